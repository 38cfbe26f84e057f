"""No NaN or Inf in 500 training steps of every attention mechanism, in float32 and in
mixed precision (bfloat16 on CPU), on the first records of the original project's
WikiText-2 validation records. Non-causal mechanisms (lara) must be refused by the
causal model instead.

Slow: one graph trace and 500 steps per mechanism and precision (minutes in all).
"""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest

from partf.attention import attention_names, get_attention_class

STEPS = 500
RECORDS = 16  # the first 16 batches of [32, 33], cycled


@pytest.fixture(scope="module")
def batches(original_artifacts):
    from partf.data import load_tfrecords

    dataset = load_tfrecords(original_artifacts / "tfrecords_valid", prefetch=False)
    return dataset.take(RECORDS).cache().repeat().take(STEPS)


def _model(name: str):
    from partf.models import PARTransformerXL

    return PARTransformerXL(
        {
            "d_model": 32,
            "num_heads": 2,
            "d_ffn": 64,
            "num_layers": 2,
            "mem_len": 16,
            "cutoffs": (250, 2500),
            "attention": name,
            "candidates": ("attention", "dense", "identity"),
            "batch_size": 32,
        },
        vocab_size=12000,
    )


def _cases():
    for name in attention_names():
        for policy in ("float32", "mixed_bfloat16"):
            yield pytest.param(name, policy, id=f"{name}-{policy}")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "policy"), list(_cases()))
def test_500_steps_stay_finite(batches, name, policy):
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        if not get_attention_class(name).supports_causal:
            with pytest.raises(ValueError, match="non-causal"):
                _model(name)
            return
        model = _model(name)
        # A rate ten times the base configuration's, to stress the numbers.
        model.compile(optimizer=keras.optimizers.Adam(1e-3), steps_per_execution=50)
        history = model.fit(batches, epochs=1, verbose=0, shuffle=False)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    # The running mean over all 500 steps is finite only if every step's loss was.
    loss = history.history["loss"][-1]
    assert math.isfinite(loss), f"{name} ({policy}): mean loss {loss}"
    assert loss < math.log(12000), f"{name} ({policy}) did not learn: {loss}"
    for variable in model.trainable_variables:
        values = keras.ops.convert_to_numpy(variable)
        assert np.all(np.isfinite(values)), f"{name} ({policy}): {variable.path} not finite"
