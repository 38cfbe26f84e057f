"""The window-grid mechanisms (diag, eva) give padding no place in their windows.

Their windows sit at fixed stream positions 0, W, 2W, ...; positions count real tokens
only, so a padded stream (left padding of uneven prompts and recompute-mode contexts
above all) is cut into the same windows as the stream without its pads. The float64
references (tests/attention/references.py) check `attend` with every token in place;
here the layers are checked against themselves on the unpadded stream.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from partf.attention import create_attention
from partf.attention.windowed import real_token_layout
from tests.attention.helpers import random_heads, random_state, to_np

#: Each mechanism with small windows (several per stream) and its options.
GRID_MECHANISMS = [
    pytest.param("diag", {"window_size": 4, "diag_activation": "softmax"}, id="diag-softmax"),
    pytest.param(
        "diag",
        {"window_size": 3, "diag_activation": "relu", "norm_type": "layer", "rotary": True},
        id="diag-relu-rotary",
    ),
    pytest.param("eva", {"window_size": 4, "chunk_size": 2, "mem_chunks": 3}, id="eva"),
    pytest.param(
        "eva",
        {
            "window_size": 4,
            "chunk_size": 2,
            "mem_chunks": 2,
            "overlap_window": True,
            "use_t5_rpe": True,
            "rotary": True,
        },
        id="eva-overlap-t5-rotary",
    ),
]

WIDTH, HEADS = 8, 2


def test_real_token_layout_matches_numpy():
    valid = np.random.default_rng(4).random((3, 11)) > 0.4
    valid[0] = False  # a row of pads only
    valid[1] = True  # and one without any
    order, place, count = (to_np(t).astype(int) for t in real_token_layout(valid))
    for row, real in enumerate(valid):
        tokens = np.arange(len(real))
        np.testing.assert_array_equal(order[row], np.concatenate([tokens[real], tokens[~real]]))
        np.testing.assert_array_equal(place[row], np.cumsum(real) - real)
        assert count[row] == real.sum()


def padded_stream(length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x [2, length, D] and its mask: row 0 starts with 3 pads and has 2 more inside,
    row 1 starts with 5 pads; the pads hold large random vectors."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, length, WIDTH)).astype("float32")
    mask = np.ones((2, length), bool)
    mask[0, [0, 1, 2, 9, 10]] = False
    mask[1, :5] = False
    x = np.where(mask[..., None], x, 100.0 * rng.normal(size=x.shape)).astype("float32")
    return x, mask


def run(layer, x, mask, cuts):
    """Outputs [B, T, D] and final state of the stream read segment by segment."""
    state, outputs = None, []
    for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
        part = slice(start, stop)
        y, state = layer(x[:, part], state=state, mask=None if mask is None else mask[:, part])
        outputs.append(to_np(y))
    return np.concatenate(outputs, axis=1), {name: to_np(v) for name, v in state.items()}


@pytest.mark.parametrize("name, options", GRID_MECHANISMS)
def test_padded_row_equals_the_row_without_its_pads(name, options):
    """Each row's outputs on its real tokens, and the carried state, equal those of the
    row without its pads, over two segments (the first cut inside a window); the pads'
    outputs are zero."""
    layer = create_attention(name, WIDTH, HEADS, **options)
    length = 19
    x, mask = padded_stream(length)
    padded, padded_state = run(layer, x, mask, (0, 8, length))
    for row in range(2):
        real = mask[row]
        alone = x[row : row + 1, real]
        # The same cut: after the real tokens of the first segment.
        cut = int(real[:8].sum())
        want, want_state = run(layer, alone, None, (0, cut, alone.shape[1]))
        np.testing.assert_allclose(padded[row, real], want[0], rtol=1e-5, atol=1e-5)
        assert not padded[row, ~real].any()
        for key, value in want_state.items():
            np.testing.assert_allclose(
                padded_state[key][row], value[0], rtol=1e-5, atol=1e-5, err_msg=key
            )


@pytest.mark.parametrize("name, options", GRID_MECHANISMS)
def test_without_pads_the_layout_changes_nothing_bit_for_bit(name, options):
    """With every token real, skipping pads gathers exactly what keeping every token in
    place gathers: outputs, state and gradients equal bit for bit, from a carried state
    (so training on unpadded batches is what it was)."""
    layer = create_attention(name, WIDTH, HEADS, **options)
    layer.build((None, None, WIDTH))
    q, k, v = random_heads(2, 13, HEADS, WIDTH // HEADS)
    state = random_state(layer, 2)
    mask = np.ones((2, 13), bool)

    def attend(skip_pads):
        inputs = [tf.Variable(t) for t in (q, k, v)]
        with tf.GradientTape() as tape:
            out, new = layer.attend(*inputs, state, mask=mask, skip_pads=skip_pads)
            loss = tf.reduce_sum(out * out) + sum(
                tf.reduce_sum(tf.cast(value, "float32")) for value in new.values()
            )
        return [to_np(out), *map(to_np, new.values()), *map(to_np, tape.gradient(loss, inputs))]

    for got, want in zip(attend(True), attend(False), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name, options", GRID_MECHANISMS[::2])
def test_left_padding_moves_every_window_when_pads_keep_their_place(name, options):
    """The check above can fail: with every token in its place (`attend` without
    `skip_pads`), 3 leading pads shift the windows and the outputs change."""
    layer = create_attention(name, WIDTH, HEADS, **options)
    layer.build((None, None, WIDTH))
    q, k, v = random_heads(1, 12, HEADS, WIDTH // HEADS)
    pads = np.zeros((1, 3, HEADS, WIDTH // HEADS), "float32")
    mask = np.concatenate([np.zeros((1, 3), bool), np.ones((1, 12), bool)], axis=1)
    padded = [np.concatenate([pads, t], axis=1) for t in (q, k, v)]
    want, _ = layer.attend(q, k, v, layer.get_initial_state(1))
    skipped, _ = layer.attend(*padded, layer.get_initial_state(1), mask=mask, skip_pads=True)
    kept, _ = layer.attend(*padded, layer.get_initial_state(1), mask=mask)
    np.testing.assert_allclose(to_np(skipped)[:, 3:], to_np(want), rtol=1e-5, atol=1e-6)
    assert np.abs(to_np(kept)[:, 3:] - to_np(want)).max() > 1e-2
