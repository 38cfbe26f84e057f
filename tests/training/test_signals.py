"""SignalWatch: a signal during a run is recorded, not fatal; a second SIGINT aborts."""

from __future__ import annotations

import os
import signal

import pytest

from partf.training.run_state import StopReason
from partf.training.signals import SignalWatch


def test_a_signal_is_recorded_and_the_previous_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    watch = SignalWatch()
    assert watch.stop_reason(5) is None
    with watch.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        assert watch.received == signal.SIGTERM
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)  # the second one aborts at once
    assert signal.getsignal(signal.SIGTERM) is before
    assert watch.stop_reason(5) == StopReason("signal", 5, signum=signal.SIGTERM)
