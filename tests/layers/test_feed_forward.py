"""Position-wise feed-forward layer."""

import keras
import numpy as np
from keras import ops

from partf.layers.feed_forward import FeedForward
from tests.layer_checks import assert_close, assert_config_round_trip


def test_matches_two_matmuls_and_round_trips():
    layer = FeedForward(6, 10, dropout_rate=0.3, activation="gelu", name="ffn")
    x = keras.random.normal((2, 3, 6), seed=0)
    y = layer(x)
    inner = keras.activations.gelu(x @ layer.inner.kernel + layer.inner.bias)
    assert_close(y, inner @ layer.outer.kernel + layer.outer.bias, atol=1e-5)
    assert_config_round_trip(layer)
    train = layer(x, training=True)
    assert np.mean(np.asarray(train) == 0) > 0.1  # dropout after the output layer
    assert ops.shape(train) == (2, 3, 6)
