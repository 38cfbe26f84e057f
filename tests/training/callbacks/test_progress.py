"""Progress callbacks: every-N-steps intervals and the stop reason reported."""

from __future__ import annotations

from partf.training.callbacks.progress import EveryNSteps, ProgressTracker, first_stop
from partf.training.run_state import RunProgress, Segment, StopReason
from tests.training.callbacks.helpers import FakeModel, attach, fit


def test_every_n_steps_fires_at_the_first_execution_end_past_each_multiple():
    model = FakeModel()
    progress = RunProgress(batches_per_epoch=10, total_steps=30, tokens_per_batch=4)
    seen = []

    class Every5(EveryNSteps):
        def on_interval(self, step, logs):
            seen.append(step)

    callbacks = [attach(ProgressTracker(progress), model), attach(Every5(progress, 5), model)]
    # Resumed at step 14 with 4 steps per execution: ends at 18, 20, then 24, 28, 30.
    fit(callbacks, Segment(1, 2, 4, 10), progress, steps_per_execution=4)
    fit(callbacks, Segment(2, 3, 0, 10), progress, steps_per_execution=4)
    assert seen == [18, 20, 28, 30]


def test_the_highest_ranked_stop_reason_is_reported():
    class Stopped:
        def __init__(self, outcome):
            self.outcome = outcome

    nan, spike = StopReason("non_finite", 6), StopReason("spike", 8)
    assert first_stop([Stopped(None), Stopped(nan), Stopped(spike)]) == spike
    assert first_stop([Stopped(nan), object()]) == nan
    assert first_stop([Stopped(None)]) is None
