"""Everything around the compiled train step, as Keras callbacks.

The train step itself (forward, loss, gradients, update, XL memory, tau) runs inside
`fit`'s compiled function, `steps_per_execution` steps per call. Callbacks run between
calls, on the host, and read device values only when they have something to do (every
`log_every` steps, at checkpoints, at epoch ends), so there is no host sync per step.

The trainer installs them in this order (order matters: each reads the position the
tracker has just updated, and the checkpoint comes after the figures of its step):

    ProgressTracker   the run's position (`RunProgress`), counted on the host
    SpikeMonitor      the loss-spike guard's skipped steps (with --spike_guard only)
    MemoryReset       empties the training memory at each epoch start
    MetricsLogger     loss, lr, tau, tokens/s, pi: TensorBoard and training.log
    PiPlotter         pi heatmaps
    ValidationCallback  the validation split (when there is one)
    Checkpointer      checkpoints; saves and stops on SIGINT/SIGTERM

How outcomes come back. A callback keeps what it found out: `Checkpointer.newest` (the
newest checkpoint), `ValidationCallback.report`, `SpikeMonitor.skipped`. A callback that
ends the run early (`RunStopper`: MetricsLogger and Checkpointer on a NaN or Inf loss,
SpikeMonitor on a spike) records a typed `StopReason` in its own `outcome` and sets
`model.stop_training`; after `fit` the trainer asks `first_stop(callbacks)` why the run
stopped. A signal is an outside event, not a callback's finding: `SignalWatch` records it,
the Checkpointer asks it at each execution end, and the trainer asks it afterwards. The
only state the callbacks share is the position, `RunProgress`, written by one of them; it
is the trainer's (partf.training.run_state, with `Segment` and `StopReason`), so nothing
outside this package imports from it but the trainer that builds the callbacks.

"Every N steps" is `EveryNSteps` (`progress`): the first execution end at or past each
multiple of N. After partf's own the trainer adds `ConsoleProgress`, then the caller's.

The modules:

- `progress`: what every callback is built from: `ProgressTracker`, `EveryNSteps`,
  `RunStopper` and `first_stop`.
- `memory_reset`: `MemoryReset`.
- `monitoring`: the callbacks that report on a run: `MetricsLogger`, `SpikeMonitor`,
  `PiPlotter`, `ValidationCallback`.
- `checkpointer`: `Checkpointer`, which decides when a checkpoint is written (by
  partf.training.checkpoint) and stops on a signal (partf.training.signals).
- `console_progress`: `ConsoleProgress`, progress lines on the console.
- `run_callbacks`: `make_callbacks`, which builds them all for one run (`RunCallbacks`).
"""
