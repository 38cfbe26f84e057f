"""What one training step of a partf model does: `TrainStep`, the `fit` side of
`PARTransformerXL` and `MaskedLanguageModel`, read here top to bottom. `compile` takes,
beside Keras's own arguments, the step's options:

- `spike_guard` (TensorFlow): an object with `judge(loss) -> ok` and `record(ok, loss)`
  (`partf.training.spike_guard.SpikeGuard`), or None. `fit` runs `steps_per_execution`
  steps without returning to the host, so a step cannot be skipped with Python control
  flow: the guarded step computes the update and then keeps, for every weight and
  optimizer slot, `where(ok, new, old)`, the same graph every step.
- `compiled_loop` (JAX, XLA): Keras's JAX trainer runs an execution's steps as a Python
  loop, one dispatch per step (most of a small step on a GPU, docs/speed.md). The
  scanned train function stacks the batches and runs Keras's `train_step` through
  `jax.lax.scan` in one jitted call, on the same state (weights, optimizer slots, XL
  memory, random seeds). The last, shorter group of an epoch runs step by step.

The Keras workarounds of training, all here (Keras 3.15.1; each says what Keras does):

1. Keras's multi-step loop fails on a distributed iterator ("You must feed a value for
   placeholder tensor"): under a `tf.distribute` strategy `compile` runs one step per
   execution, with a warning.
2. Before each `fit`, Keras builds a model made under a strategy from one batch averaged
   over replicas (`_maybe_symbolic_build`), and multi_worker's collective reduce takes
   no (inputs, targets) tuple. These models build themselves and the trainer builds the
   optimizer: once it is built the step is skipped, as Keras does without a strategy.
3. Under `MultiWorkerMirroredStrategy` Keras averages each step's logs over replicas
   along axis 0, which scalars lack (tensorflow/tensorflow#72388): the training logs are
   handed over as [1] vectors, whose mean over replicas is the same scalar.
4. The guarded step updates the logs' running loss through Keras's private
   `_loss_tracker`, as Keras's own step does, so that skipped steps are not averaged in.
5. Keras does not compile a loaded model whose class overrides `compile` (it warns);
   `compile_from_config` does what Keras's own does for any other model.

Example:
    >>> model.compile(optimizer="adam", jit_compile=True, steps_per_execution=32,
    ...               spike_guard=SpikeGuard("skip"))
"""

from __future__ import annotations

import logging
from typing import Any

import keras
from keras import ops

logger = logging.getLogger("partf.models")


class TrainStep:
    """The training step of a Keras model, chosen at `compile` (see the module docstring):
    `spike_guard` (None: Keras's step) and `compiled_loop` keep the options it was given."""

    spike_guard: Any = None
    compiled_loop: bool = False

    def compile(
        self, *args: Any, spike_guard: Any = None, compiled_loop: bool = False, **kwargs: Any
    ) -> None:
        """Keras's `compile` and the step's options; ValueError for an option that this
        backend, strategy or `jit_compile` cannot run."""
        strategy = getattr(self, "_distribute_strategy", None)  # TensorFlow's only
        steps = kwargs.get("steps_per_execution", 1)
        if strategy is not None and steps > 1:  # workaround 1
            message = "--steps_per_execution %d is not supported under a distribution strategy"
            logger.warning(message + " by Keras %s; using 1.", steps, keras.__version__)
            kwargs["steps_per_execution"] = 1
        super().compile(*args, **kwargs)
        backend = keras.backend.backend()
        if spike_guard is not None and backend != "tensorflow":
            raise ValueError(
                f"--spike_guard={spike_guard.mode} needs the TensorFlow backend (its guarded "
                f"step is TensorFlow's); use --spike_guard=off on {backend}, or "
                "KERAS_BACKEND=tensorflow."
            )
        if spike_guard is not None and strategy is not None:
            raise ValueError(
                "--spike_guard does not work under a distribution strategy yet; use "
                "--spike_guard=off there."
            )
        if compiled_loop and (backend != "jax" or not self.jit_compile or self.run_eagerly):
            raise ValueError(
                "--compiled_loop runs a jax.lax.scan compiled with XLA and needs the JAX "
                "backend and --jit_compile; drop it, or set KERAS_BACKEND=jax."
            )
        self.spike_guard = spike_guard
        self.compiled_loop = compiled_loop

    def compile_from_config(self, config: dict[str, Any]) -> None:
        """Compiles a loaded model as Keras compiles one that keeps its `compile`."""
        self.compile(**keras.saving.deserialize_keras_object(config))  # workaround 5
        if getattr(self, "optimizer", None) is not None and self.built:
            self.optimizer.build(self.trainable_variables)

    # ------------------------------------------------------------------ one step
    def train_step(self, *args: Any) -> Any:
        """Keras's step (JAX: `(state, data) -> (logs, state)`; TensorFlow: `data -> logs`),
        or with a spike guard the guarded step."""
        if keras.backend.backend() != "tensorflow":
            return super().train_step(*args)
        logs = super().train_step(*args) if self.spike_guard is None else self._guarded(*args)
        import tensorflow as tf

        strategy = getattr(self, "_distribute_strategy", None)
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):  # workaround 3
            logs = {name: tf.reshape(value, (-1,)) for name, value in logs.items()}
        return logs

    def _guarded(self, data: Any) -> dict[str, Any]:
        """Keras's TensorFlow step, with the update kept only when the guard allows."""
        import tensorflow as tf

        guard = self.spike_guard
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            scaled = self.optimizer.scale_loss(loss)
        loss = ops.cast(loss, "float32")
        ok = guard.judge(loss)
        weights = self.trainable_variables
        gradients = tape.gradient(scaled, weights)
        # The optimizer's step counter advances either way (the schedule follows the data).
        guarded = list(weights) + [
            v for v in self.optimizer.variables if v.name not in ("iteration", "iterations")
        ]
        before = [tf.identity(v.value) for v in guarded]
        with tf.control_dependencies(before):
            self.optimizer.apply_gradients(zip(gradients, weights, strict=True))
        for variable, old in zip(guarded, before, strict=True):
            variable.assign(ops.where(ok, variable.value, old))
        # The running loss of the logs averages the applied steps only (workaround 4).
        batch = ops.cast(ops.shape(keras.tree.flatten(x)[0])[0], "float32")
        self._loss_tracker.update_state(
            ops.where(ok, loss, 0.0), sample_weight=ops.where(ok, batch, 0.0)
        )
        guard.record(ok, loss)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def _maybe_symbolic_build(self, *args: Any, **kwargs: Any) -> None:
        if self.optimizer is not None and self.optimizer.built:
            return  # workaround 2
        super()._maybe_symbolic_build(*args, **kwargs)

    # -------------------------------------------------------- one execution (JAX)
    def make_train_function(self, force: bool = False) -> None:
        """Keras's train function, or with `compiled_loop` the scanned one."""
        if not self.compiled_loop:
            super().make_train_function(force)
        elif self.train_function is None or force:
            self.train_function = self._scanned_train_function()

    def _scanned_train_function(self) -> Any:
        import jax
        from keras import tree

        steps = int(self.steps_per_execution)
        single = jax.jit(self.train_step, donate_argnums=0)

        def body(state: Any, data: Any) -> tuple[Any, Any]:
            logs, state = self.train_step(state, data)
            return state, logs

        def loop(state: Any, stacked: Any) -> tuple[Any, Any]:
            state, logs = jax.lax.scan(body, state, stacked)
            # The metrics accumulate in the state: the last step's logs describe them all.
            return tree.map_structure(lambda value: value[-1], logs), state

        looped = jax.jit(loop, donate_argnums=0)

        def train_function(state: Any, iterator: Any) -> tuple[Any, Any]:
            batches = [next(iterator)]  # an empty iterator ends the epoch, as in Keras
            for _ in range(steps - 1):
                try:
                    batches.append(next(iterator))
                except StopIteration:
                    break
            if len(batches) == steps and steps > 1:
                stacked = tree.map_structure(lambda *parts: jax.numpy.stack(parts), *batches)
                return looped(state, stacked)
            for data in batches:
                logs, state = single(state, data)
            return logs, state

        return train_function
