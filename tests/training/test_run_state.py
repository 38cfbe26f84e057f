"""The run's state: its position (`RunProgress`, `Segment`) and its wall time (`Clock`)."""

from __future__ import annotations

from partf.training.run_state import Clock, RunProgress, Segment


def test_the_position_counts_steps_across_epochs():
    progress = RunProgress(batches_per_epoch=10, total_steps=30, tokens_per_batch=4)
    progress.move_to(14)
    assert (progress.epoch, progress.step_in_epoch, progress.global_step) == (1, 4, 14)
    progress.begin(Segment(2, 3, 3, 10))
    assert (progress.epoch, progress.step_in_epoch, progress.global_step) == (2, 3, 23)


def test_the_clock_adds_the_time_before_a_resume(monkeypatch):
    monkeypatch.setattr("partf.training.run_state.time.perf_counter", lambda: 105.0)
    assert Clock(started=100.0, before=30.0).seconds() == 35.0
