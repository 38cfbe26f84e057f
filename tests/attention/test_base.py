"""The attention base: `Projection` equals `keras.layers.EinsumDense`, values and gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from partf.attention.base import Projection, _matmul_plan
from tests.layer_checks import assert_close, assert_config_round_trip

CASES = [
    ("btd,dhk->bthk", (None, 3, 4), (2, 5, 8), "hk"),
    ("bthk,hkd->btd", (None, 8), (2, 5, 3, 4), "d"),
    ("ld,dhk->lhk", (3, 4), (7, 8), None),
    # Not a plain matmul (the kernel's axes are not in input order): EinsumDense's path.
    ("btd,hd->bth", (None, 3), (2, 5, 8), None),
]


def test_matmul_plan():
    assert _matmul_plan("btd,dhk->bthk") == (1, 2)
    assert _matmul_plan("bthk,hkd->btd") == (2, 1)
    assert _matmul_plan("btd,hd->bth") is None
    assert _matmul_plan("...d,dk->...k") is None


@pytest.mark.parametrize("equation, output_shape, input_shape, bias_axes", CASES)
def test_projection_equals_einsum_dense(equation, output_shape, input_shape, bias_axes):
    fast = Projection(equation, output_shape, bias_axes=bias_axes, bias_initializer="normal")
    slow = keras.layers.EinsumDense(equation, output_shape, bias_axes=bias_axes)
    fast.build(input_shape)
    slow.build(input_shape)
    slow.set_weights(fast.get_weights())
    x = tf.random.normal(input_shape, seed=1)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y_fast, y_slow = fast(x), slow(x)
        loss_fast = tf.reduce_sum(y_fast * tf.sin(y_fast))
        loss_slow = tf.reduce_sum(y_slow * tf.sin(y_slow))
    assert_close(y_fast, y_slow)
    grads_fast = tape.gradient(loss_fast, [x, *fast.trainable_variables])
    grads_slow = tape.gradient(loss_slow, [x, *slow.trainable_variables])
    for a, b in zip(grads_fast, grads_slow, strict=True):
        assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_projection_unknown_batch_and_config():
    layer = Projection("btd,dhk->bthk", (None, 2, 3), bias_axes="hk", name="q")
    fn = tf.function(layer, input_signature=[tf.TensorSpec((None, None, 6))])
    x = np.random.default_rng(0).normal(size=(2, 4, 6)).astype("float32")
    assert_close(fn(x), layer(x))
    assert_config_round_trip(layer)
