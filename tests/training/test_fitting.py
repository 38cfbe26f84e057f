"""How a run's training is cut into `fit` calls (`partf.training.fitting`): whole epochs
where possible, a resumed run first finishing its epoch, a run cut by max_steps ending
with a partial one; --objective=mlm one epoch per call."""

from __future__ import annotations

import pytest

from partf.training.fitting import one_epoch_each, plan_segments
from partf.training.run_state import Segment


@pytest.mark.parametrize(
    ("start", "total", "expected"),
    [
        (0, 30, [Segment(0, 3, 0, 10)]),
        (14, 30, [Segment(1, 2, 4, 10), Segment(2, 3, 0, 10)]),
        (0, 25, [Segment(0, 2, 0, 10), Segment(2, 3, 0, 5)]),
        (23, 25, [Segment(2, 3, 3, 5)]),
        (20, 20, []),
    ],
)
def test_plan_segments(start, total, expected):
    assert plan_segments(start, 10, total) == expected


def test_one_epoch_each_cuts_multi_epoch_segments_keeping_skip_and_limit():
    segments = [Segment(1, 2, 4, 10), Segment(2, 4, 0, 10), Segment(4, 5, 0, 5)]
    assert one_epoch_each(segments) == [
        Segment(1, 2, 4, 10),
        Segment(2, 3, 0, 10),
        Segment(3, 4, 0, 10),
        Segment(4, 5, 0, 5),
    ]
