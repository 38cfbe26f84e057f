"""JAX: the steps of one `fit` execution as one compiled loop (`--compiled_loop`).

Keras 3.15's JAX trainer runs `steps_per_execution` steps as a Python loop over one
jitted step: each step is its own dispatch from the host, with its own transfer of the
batch. On a GPU, where a base-configuration step computes in well under a millisecond,
that dispatch is most of the step (docs/speed.md). `install(model)` gives the model a
train function that takes the next `steps_per_execution` batches, stacks them, and runs
them through `jax.lax.scan` of Keras's own `train_step` in one jitted call: the same
steps, in the same order, on the same state (weights, optimizer slots, XL memory and
random seeds all live in the state that `train_step` carries). The last, shorter group
of an epoch runs step by step with the single-step function.

Example:
    >>> model.compile(optimizer="adam", jit_compile=True, steps_per_execution=32)
    >>> install(model)  # KERAS_BACKEND=jax
    >>> model.fit(data)
"""

from __future__ import annotations

from typing import Any

import keras


def install(model: keras.Model) -> None:
    """Replaces the compiled model's train function by the scanned one (after `compile`,
    before `fit`).

    Raises:
        ValueError: not the JAX backend, or the model is not compiled with XLA.
    """
    if keras.backend.backend() != "jax":
        raise ValueError(
            "--compiled_loop runs a jax.lax.scan and needs the JAX backend; drop it, or "
            "set KERAS_BACKEND=jax."
        )
    if not model.jit_compile or model.run_eagerly:
        raise ValueError("--compiled_loop compiles the loop with XLA; drop --jit_compile=False.")
    import jax
    from keras import tree

    steps = int(model.steps_per_execution)
    single = jax.jit(model.train_step, donate_argnums=0)

    def body(state: Any, data: Any) -> tuple[Any, Any]:
        logs, state = model.train_step(state, data)
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

    def make_train_function(force: bool = False) -> None:
        model.train_function = train_function

    model.make_train_function = make_train_function
    model.train_function = train_function
