"""Window-grid bookkeeping shared by the windowed mechanisms."""

import numpy as np
from keras import ops

from partf.attention.windowed import (
    from_grid,
    grid_buffer,
    grid_valid,
    next_offset,
    to_grid,
)
from tests.attention.helpers import to_np


def test_grid_places_carried_and_new_tokens_at_stream_positions():
    window = 4
    # Stream positions: example 0 has 3 carried tokens (positions 4, 5, 6),
    # example 1 none; both then receive 6 new tokens.
    offset = np.array([3, 0], "int32")
    buffer = np.zeros((2, window), "float32")
    buffer[0, :3] = [4, 5, 6]
    x = np.stack([np.arange(7, 13), np.arange(0, 6)]).astype("float32")
    grid = to_np(to_grid(x, buffer, offset, window))
    valid = to_np(grid_valid(np.ones((2, 6), bool), buffer > 0, offset, window))
    # Grid slot s holds stream position (window start + s).
    np.testing.assert_array_equal(grid[0, :9], np.arange(4, 13))
    np.testing.assert_array_equal(grid[1, :6], np.arange(0, 6))
    np.testing.assert_array_equal(valid[0], np.arange(grid.shape[1]) < 9)
    np.testing.assert_array_equal(valid[1], np.arange(grid.shape[1]) < 6)
    np.testing.assert_array_equal(to_np(from_grid(grid, offset, 6)), x)
    # After the segment: example 0 is at position 13 (1 token into a window),
    # example 1 at position 6 (2 tokens in).
    np.testing.assert_array_equal(to_np(next_offset(offset, 6, window)), [1, 2])
    np.testing.assert_array_equal(
        to_np(grid_buffer(grid, offset, 6, window)), [[12, 0, 0, 0], [4, 5, 0, 0]]
    )


def test_grid_handles_segments_that_end_on_a_window_boundary():
    offset = np.array([2], "int32")
    buffer = np.array([[1.0, 2.0, 0.0, 0.0]], "float32")
    x = np.array([[3.0, 4.0]], "float32")
    grid = to_grid(x, buffer, offset, 4)
    assert to_np(next_offset(offset, 2, 4)).tolist() == [0]
    np.testing.assert_array_equal(to_np(grid_buffer(grid, offset, 2, 4)), [[0, 0, 0, 0]])
    assert ops.shape(grid)[1] % 4 == 0
