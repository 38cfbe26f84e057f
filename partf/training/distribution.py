"""Training on several devices or machines with `tf.distribute`, memory kept per replica.

Transformer-XL's context batching gives every row of a batch its own stream, so a
strategy must never move rows between replicas: replica k always receives rows
[k*b, (k+1)*b) of every batch (b = B / replicas, numbered worker by worker), and its
memory (`synchronization="on_read"` variables, one copy per replica) continues exactly
those streams. The loss divides each replica's NLL sum by the tokens of the whole
global batch, so gradients and logged loss equal one device's with batch B. Only the
TensorFlow backend has `tf.distribute`; Keras's limits under a strategy are worked
around in partf.models.train_step. The strategies and the layout: docs/scaling.md.

Example:
    >>> strategy = build_strategy("mirrored")
    >>> with strategy.scope():
    ...     model = PARTransformerXL(config.replace(batch_size=32 // strategy.num_replicas_in_sync))
    >>> data = distribute_rows(strategy, dataset, global_batch=32)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import keras

from partf.training.config import DISTRIBUTION_STRATEGIES as STRATEGIES
from partf.training.config import ConfigError

if TYPE_CHECKING:
    import tensorflow as tf

logger = logging.getLogger("partf.training")


def build_strategy(name: str) -> tf.distribute.Strategy | None:
    """The `tf.distribute` strategy called `name` (one of `STRATEGIES`); None for
    "default" (one device). Must run before TensorFlow touches a device for
    "multi_worker" and "tpu".

    Raises:
        ConfigError: an unknown name, or a strategy on a backend other than TensorFlow.
    """
    if name not in STRATEGIES:
        raise ConfigError(
            f"unknown --distribution_strategy {name!r}; valid: {', '.join(STRATEGIES)}."
        )
    if name == "default":
        return None
    if keras.backend.backend() != "tensorflow":
        raise ConfigError(
            f"--distribution_strategy {name} needs the TensorFlow backend (KERAS_BACKEND="
            f"{keras.backend.backend()}); use --distribution_strategy default."
        )
    import tensorflow as tf

    if name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    elif name == "multi_worker":
        # TF_CONFIG names the cluster and this worker's index (TensorFlow's own format).
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    logger.info(
        "distribution strategy %s: %d replicas in sync",
        type(strategy).__name__,
        strategy.num_replicas_in_sync,
    )
    return strategy


def per_replica_batch(strategy: tf.distribute.Strategy, global_batch: int) -> int:
    """Rows of every batch (and of the memory) on one replica.

    Raises:
        ConfigError: the global batch does not divide among the replicas.
    """
    replicas = strategy.num_replicas_in_sync
    if global_batch % replicas:
        raise ConfigError(
            f"the batch of {global_batch} rows does not split over {replicas} replicas; "
            f"rebuild the records with --batch_size a multiple of {replicas}."
        )
    return global_batch // replicas


def distribute_rows(
    strategy: tf.distribute.Strategy | None, dataset: tf.data.Dataset, global_batch: int
) -> Any:
    """Gives replica k rows [k*b, (k+1)*b) of every (inputs, targets) int32 [B, L] batch
    of `dataset` (B = `global_batch`), in order: a distributed dataset whose per-replica
    elements are [b, L], b = B / replicas, each worker reading only its own rows. With
    no `strategy`, `dataset` as is."""
    if strategy is None:
        return dataset
    import tensorflow as tf

    rows = per_replica_batch(strategy, global_batch)
    replicas = strategy.num_replicas_in_sync

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        local = replicas // context.num_input_pipelines
        first = context.input_pipeline_id * local * rows

        def split(*tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
            # [B, L] -> this worker's rows [local * b, L] -> [local, b, L]
            return tuple(
                tf.reshape(t[first : first + local * rows], (local, rows, -1)) for t in tensors
            )

        # One element per local replica, in replica order: the per-worker iterator hands
        # consecutive elements to the worker's devices round-robin.
        return dataset.map(split).unbatch()

    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return strategy.distribute_datasets_from_function(dataset_fn, options)


class ReplicaRows:
    """A per-replica memory variable seen as one array: its local replicas' rows in order.

    Checkpoints store this view, so a checkpoint of a run on R replicas of b rows holds
    the same [R*b, ...] memory as a one-device run with batch R*b; restoring splits it
    back. Under multi_worker each worker sees (and saves) only its own replicas' rows.
    `variable` was created with `synchronization="on_read"` under a strategy.
    """

    def __init__(self, variable: keras.Variable) -> None:
        self.variable = variable
        self.path = variable.path
        self._parts = list(variable.value.values)  # one tf.Variable per local replica

    @property
    def shape(self) -> tuple[int, ...]:
        first = tuple(self._parts[0].shape)
        return (first[0] * len(self._parts), *first[1:])

    def numpy(self) -> Any:
        import numpy as np

        return np.concatenate([part.numpy() for part in self._parts], axis=0)

    def assign(self, value: Any) -> None:
        rows = self._parts[0].shape[0]
        for k, part in enumerate(self._parts):
            part.assign(value[k * rows : (k + 1) * rows])


def checkpoint_view(variables: list[Any]) -> list[Any]:
    """`variables` with every per-replica (on_read, distributed) one as `ReplicaRows`."""
    if keras.backend.backend() != "tensorflow":
        return list(variables)  # strategies are TensorFlow's only
    import tensorflow as tf

    viewed = []
    for variable in variables:
        value = getattr(variable, "value", None)
        per_replica = isinstance(value, tf.distribute.DistributedValues) and (
            getattr(value, "synchronization", None) == tf.VariableSynchronization.ON_READ
        )
        viewed.append(ReplicaRows(variable) if per_replica else variable)
    return viewed
