"""partf.models.train_step: the step's options are `compile`'s. The compiled loop's scanned
steps of one execution are the steps Keras's Python loop runs, with the XL memory, the
dropout seeds and the optimizer carried through the scan; a short last group runs step by
step (the JAX side runs in a fresh process). Options a backend cannot run are refused at
`compile`; under a strategy the Keras workarounds apply. The guarded step itself:
tests/training/test_spike_guard.py."""

from __future__ import annotations

import importlib.util
import logging
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from partf.models.par_transformer_xl import PARTransformerXL
from partf.training.spike_guard import SpikeGuard
from tests.test_jax_backend import run_on_jax

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    from partf.models.par_transformer_xl import PARTransformerXL

    B, L, V, BATCHES, SPE = 4, 8, 60, 10, 4

    def train(scanned):
        data = np.random.default_rng(0).integers(1, V, size=(BATCHES * B, L + 1))
        keras.utils.set_random_seed(0)
        # Dropout on: the same masks only if the seed generator's state is carried.
        model = PARTransformerXL(vocab_size=V, d_model=16, num_heads=2, d_ffn=32,
                                 num_layers=2, mem_len=8, cutoffs=(20,), batch_size=B,
                                 dropout_rate=0.1, architecture="A D")
        model.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=True,
                      steps_per_execution=SPE, compiled_loop=scanned)
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


def _tiny() -> PARTransformerXL:
    return PARTransformerXL(
        vocab_size=60,
        d_model=8,
        num_heads=2,
        d_ffn=16,
        num_layers=1,
        mem_len=4,
        cutoffs=(),
        batch_size=2,
        architecture="A",
    )


def test_options_a_backend_cannot_run_are_refused_at_compile():
    model = _tiny()
    with pytest.raises(ValueError, match="needs the JAX backend"):
        model.compile(optimizer="sgd", jit_compile=True, compiled_loop=True)
    model.compile(optimizer="sgd", spike_guard=SpikeGuard("skip"))  # TensorFlow: accepted
    assert model.spike_guard is not None and not model.compiled_loop
    model.compile(optimizer="sgd")  # compiling again without options drops them
    assert model.spike_guard is None


def test_under_a_strategy_the_keras_workarounds_apply(caplog):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = _tiny()
        with pytest.raises(ValueError, match="does not work under a distribution strategy"):
            model.compile(optimizer="sgd", spike_guard=SpikeGuard("skip"))
        with caplog.at_level(logging.WARNING, logger="partf.models"):
            model.compile(optimizer="sgd", steps_per_execution=4)
        model.optimizer.build(model.trainable_variables)
    # 1: one step per execution, said once.
    assert int(model.steps_per_execution) == 1
    assert "--steps_per_execution 4 is not supported under a distribution strategy" in caplog.text

    # 2: no symbolic build from a batch averaged over replicas once the optimizer is built.
    def refuse(*args, **kwargs):
        raise AssertionError("Keras built the model from a batch")

    model._symbolic_build = refuse
    model._maybe_symbolic_build(data_batch=(np.ones((2, 4), "int32"),) * 2)
