"""partf.training.compiled_loop: the scanned steps of one execution are the steps Keras's
Python loop runs, with the XL memory, the dropout seeds and the optimizer carried through
the scan; a short last group runs step by step. The JAX side runs in a fresh process."""

from __future__ import annotations

import importlib.util
import textwrap

import keras
import numpy as np
import pytest

from partf.training import compiled_loop
from tests.test_jax_backend import run_on_jax

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    from partf.models.par_transformer_xl import PARTransformerXL
    from partf.training import compiled_loop

    B, L, V, BATCHES, SPE = 4, 8, 60, 10, 4

    def train(scanned):
        data = np.random.default_rng(0).integers(1, V, size=(BATCHES * B, L + 1))
        keras.utils.set_random_seed(0)
        # Dropout on: the same masks only if the seed generator's state is carried.
        model = PARTransformerXL(vocab_size=V, d_model=16, num_heads=2, d_ffn=32,
                                 num_layers=2, mem_len=8, cutoffs=(20,), batch_size=B,
                                 dropout_rate=0.1, architecture="A D")
        model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=True,
                      steps_per_execution=SPE)
        if scanned:
            compiled_loop.install(model)
        losses = []
        record = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
        model.fit(data[:, :-1].astype("int32"), data[:, 1:].astype("int32"), batch_size=B,
                  shuffle=False, epochs=2, callbacks=[record], verbose=0)
        weights = [np.asarray(keras.ops.convert_to_numpy(w)).tolist() for w in model.weights]
        return {"losses": losses, "weights": weights}

    def main(out):
        with open(out, "w") as f:
            json.dump({"loop": train(False), "scan": train(True)}, f)

    if __name__ == "__main__":
        main(sys.argv[1])
    """
)


@pytest.mark.slow  # two JAX trainings in a fresh process, about two minutes
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_scanned_steps_equal_keras_steps(tmp_path):
    result = run_on_jax(SCRIPT, tmp_path, name="compiled_loop")
    loop, scan = result["loop"], result["scan"]
    # Two epochs of 10 batches in executions of 4: 4, 4 and a short group of 2 each.
    assert len(loop["losses"]) == len(scan["losses"]) == 6
    np.testing.assert_allclose(scan["losses"], loop["losses"], rtol=1e-5)
    assert len(loop["weights"]) == len(scan["weights"])
    for got, want in zip(scan["weights"], loop["weights"], strict=True):
        np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-4, atol=1e-5)
    # Training happened: the loss moved (equal weights then mean equal training).
    assert abs(loop["losses"][-1] - loop["losses"][0]) > 1e-3


def test_refused_off_jax():
    model = keras.Sequential([keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=True)
    with pytest.raises(ValueError, match="needs the JAX backend"):
        compiled_loop.install(model)
