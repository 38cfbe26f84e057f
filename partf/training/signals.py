"""SIGINT and SIGTERM during a run: `SignalWatch` records them, the `Checkpointer`
callback asks it at each execution end (saves, then stops `fit`), and the trainer asks it
once `fit` has returned why the run stopped.
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from typing import Any

from partf.training.run_state import StopReason

logger = logging.getLogger("partf.training")


class SignalWatch:
    """Records SIGINT and SIGTERM while `installed()`.

    The first signal asks the run to stop: the `Checkpointer` saves and stops `fit` at
    the next execution end. A second SIGINT aborts at once (KeyboardInterrupt).

    Attributes:
        received: the first signal's number, or None.
    """

    def __init__(self) -> None:
        self.received: int | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[SignalWatch]:
        """Installs the handlers for the block, then puts the previous ones back."""
        previous = {}
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._request_stop)
        except ValueError:  # not the main thread: leave signals alone
            previous = {}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _request_stop(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum
        logger.warning(
            "%s received: saving a checkpoint and stopping after the current steps.",
            signal.Signals(signum).name,
        )

    def stop_reason(self, step: int) -> StopReason | None:
        """The "signal" reason at `step` when a signal arrived, else None."""
        if self.received is None:
            return None
        return StopReason("signal", step, signum=self.received)
