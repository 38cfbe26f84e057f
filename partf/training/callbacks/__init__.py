"""Everything around the compiled train step, as Keras callbacks.

The step (forward, loss, gradients, update, XL memory, tau) runs inside `fit`'s compiled
function, `steps_per_execution` steps per call. Callbacks run between calls, on the host,
and read device values only when they have something to do, so there is no host sync
per step. `make_callbacks` (`run_callbacks`) installs them in this order, since each
reads the position the tracker has just updated and a checkpoint comes after the
figures of its step: ProgressTracker, SpikeMonitor (with --spike_guard), MemoryReset,
MetricsLogger, PiPlotter, ValidationCallback, Checkpointer; then ConsoleProgress and the
caller's own.

A callback keeps what it found out (`Checkpointer.newest`, `ValidationCallback.report`,
`SpikeMonitor.skipped`). One that ends the run early (`RunStopper`) records a typed
`StopReason` in its `outcome` and sets `model.stop_training`; after `fit` the trainer
asks `first_stop(callbacks)` why the run stopped. A signal is an outside event:
`SignalWatch` records it and the Checkpointer asks it at each execution end. The only
shared state is the position, `RunProgress` (partf.training.run_state), written by
`ProgressTracker`. "Every N steps" is `EveryNSteps`: the first execution end at or past
each multiple of N.
"""
