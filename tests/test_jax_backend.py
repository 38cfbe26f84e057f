"""The JAX backend trains the same model to the same numbers as TensorFlow.

The backend is fixed when Keras is imported, so the JAX side runs in a fresh process
(KERAS_BACKEND=jax); the TensorFlow side runs the same script in this process. Both
start from the same weights (written by the TensorFlow side), with dropout 0 and a fixed
architecture (no Gumbel noise), train five steps on the same context batches (memory
carried across them), then score the batches with the evaluation memory (`Evaluator`
on TensorFlow, `JaxEvaluator` on JAX).
Skipped when jax is not installed (`pip install "jax[cpu]"`).
"""

from __future__ import annotations

import importlib.util
import json
import runpy
import textwrap

import numpy as np
import pytest

from tests.jax_process import run_on_jax

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed"
)

BATCH, LENGTH, VOCAB, STEPS = 4, 8, 60, 5

# Runs on either backend: argv = weights.npz (read, or written if absent), output.json.
SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import keras
    import tensorflow as tf
    from partf.models.par_transformer_xl import PARTransformerXL
    from partf.training.evaluation.evaluators import make_evaluator

    B, L, V, STEPS = {B}, {L}, {V}, {STEPS}


    def main(weights, out):
        data = np.random.default_rng(0).integers(1, V, size=(STEPS, B, L + 1)).astype("int32")
        x = data[:, :, :-1].reshape(-1, L)
        y = data[:, :, 1:].reshape(-1, L)
        keras.utils.set_random_seed(0)
        model = PARTransformerXL(vocab_size=V, d_model=16, num_heads=2, d_ffn=32, num_layers=2,
                                 mem_len=8, cutoffs=(20,), batch_size=B, dropout_rate=0.0,
                                 architecture="A D")
        if os.path.exists(weights):
            saved = np.load(weights)
            for i, variable in enumerate(model.weights):
                variable.assign(saved[f"w{{i}}"])
        else:
            np.savez(weights, **{{f"w{{i}}": np.asarray(v.numpy()) for i, v in
                                  enumerate(model.weights)}})
        # Plain SGD: Adam's first steps divide by sqrt(v), turning gradients that are zero up
        # to rounding into full steps, which amplifies the backends' last-bit differences.
        model.compile(optimizer=keras.optimizers.SGD(0.5),
                      jit_compile=keras.backend.backend() == "jax")
        losses = []
        record = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
        model.fit(x, y, batch_size=B, shuffle=False, epochs=1, callbacks=[record], verbose=0)
        dataset = tf.data.Dataset.from_tensor_slices((data[:, :, :-1], data[:, :, 1:]))
        on_jax = keras.backend.backend() == "jax"  # eager JAX is slower than compiling
        stats = make_evaluator(model, None, B, jit_compile=on_jax).evaluate(dataset)
        # Plain reference: one eager call per batch, the evaluation memory carried by the
        # model's own variables.
        model.reset_state("eval")
        loop_nll = 0.0
        for inputs, targets in zip(data[:, :, :-1], data[:, :, 1:]):
            hidden = model(inputs, training=False)
            loop_nll += float(keras.ops.sum(model.token_nll(hidden, targets)))
        model.reset_state("eval")
        memory = np.asarray(keras.ops.convert_to_numpy(model._state_vars("train")[0].value))
        with open(out, "w") as f:
            json.dump({{"backend": keras.backend.backend(), "losses": losses,
                       "eval_nll": stats.total_nll, "eval_tokens": stats.num_tokens,
                       "eval_exp_sum": stats.sum_exp_batch_loss, "loop_nll": loop_nll,
                       "memory": memory.tolist()}}, f)


    if __name__ == "__main__":
        main(sys.argv[1], sys.argv[2])
    """
).format(B=BATCH, L=LENGTH, V=VOCAB, STEPS=STEPS)


def _run(backend: str, tmp_path) -> dict:
    """Runs SCRIPT on `backend`: TensorFlow in this process (its backend already), JAX in
    a fresh one."""
    weights = tmp_path / "weights.npz"
    if backend == "jax":
        return run_on_jax(SCRIPT, tmp_path, str(weights))
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / f"{backend}.json"
    runpy.run_path(str(script))["main"](str(weights), str(out))
    return json.loads(out.read_text())


@pytest.mark.slow  # numerics across backends: two trainings, about a minute
def test_jax_backend_matches_tensorflow(tmp_path):
    reference = _run("tensorflow", tmp_path)
    result = _run("jax", tmp_path)
    assert (reference["backend"], result["backend"]) == ("tensorflow", "jax")
    assert len(result["losses"]) == STEPS
    np.testing.assert_allclose(result["losses"], reference["losses"], rtol=1e-5, atol=1e-5)
    # training lowered the loss, so equal losses are not equal constants
    assert reference["losses"][-1] < reference["losses"][0]
    np.testing.assert_allclose(result["memory"], reference["memory"], rtol=1e-4, atol=1e-5)
    assert np.abs(np.asarray(reference["memory"])).max() > 1e-3
    assert result["eval_tokens"] == reference["eval_tokens"] == STEPS * BATCH * LENGTH
    np.testing.assert_allclose(result["eval_nll"], reference["eval_nll"], rtol=1e-5)
    np.testing.assert_allclose(result["eval_exp_sum"], reference["eval_exp_sum"], rtol=1e-5)
    # each backend's evaluator equals its own batch-by-batch loop
    for run in (reference, result):
        np.testing.assert_allclose(run["eval_nll"], run["loop_nll"], rtol=1e-5)


SAMPLED_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    from keras import ops
    from partf.models.par_transformer_xl import PARTransformerXL

    B, L, V = 4, 8, 60
    data = np.random.default_rng(0).integers(1, V, size=(8, B, L + 1)).astype("int32")
    keras.utils.set_random_seed(0)
    model = PARTransformerXL(vocab_size=V, d_model=16, num_heads=2, d_ffn=32, num_layers=2,
                             mem_len=8, cutoffs=(20,), batch_size=B, dropout_rate=0.3,
                             search_estimator="sampled")
    block = model.blocks[0]
    x = keras.random.normal((B, L, 16), seed=1)
    states = block.get_initial_state(B)
    dense = block.candidates.index("dense")
    # The drawn candidate in a conditional: fresh dropout masks on each call in training,
    # exactly the candidate itself without dropout.
    first = ops.convert_to_numpy(block.run_sampled(dense, x, states, training=True)[0])
    second = ops.convert_to_numpy(block.run_sampled(dense, x, states, training=True)[0])
    plain = ops.convert_to_numpy(block.run_sampled(dense, x, states, training=False)[0])
    alone = ops.convert_to_numpy(block.run_candidate(dense, x, states[dense])[0])
    before = [np.asarray(v.value) for v in model.arch_variables]
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=True,
                  steps_per_execution=4)
    history = model.fit(data[:, :, :-1].reshape(-1, L), data[:, :, 1:].reshape(-1, L),
                        batch_size=B, shuffle=False, epochs=1, verbose=0)
    after = [np.asarray(v.value) for v in model.arch_variables]
    json.dump({"backend": keras.backend.backend(),
               "masks_differ": float(np.abs(first - second).max()),
               "eval_error": float(np.abs(plain - alone).max()),
               "loss": history.history["loss"][-1],
               "arch_moved": max(float(np.abs(a - b).max()) for a, b in zip(after, before)),
               "baseline_weight": float(np.asarray(model.search_baseline.value)[1])},
              open(sys.argv[1], "w"))
    """
)


@pytest.mark.slow  # XLA compilation of the sampled search: about 40 s
def test_the_sampled_search_trains_compiled_on_jax(tmp_path):
    """The sampled-path estimator's conditional compiles with XLA on the JAX backend (its
    candidates' random draws keyed outside the branch), trains the architecture logits and
    draws fresh dropout masks inside the branch."""
    result = run_on_jax(SAMPLED_SCRIPT, tmp_path, name="sampled")
    assert result["backend"] == "jax"
    assert result["masks_differ"] > 1e-3
    assert result["eval_error"] < 1e-6
    assert np.isfinite(result["loss"])
    assert result["arch_moved"] > 1e-4
    assert result["baseline_weight"] > 0
