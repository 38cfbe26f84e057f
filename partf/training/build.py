"""Building a run's model: `build_model` compiles the resolved model config
(`partf.training.resolve`) with its schedule and loss-spike guard, and `Built` carries
the full configuration that checkpoints and results hold ({"model": ..., "training":
...}) and the variable groups a checkpoint saves (`state_groups`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import keras

from partf.training.config import ConfigError, TrainConfig
from partf.training.distribution import checkpoint_view
from partf.training.resolve import model_error
from partf.training.spike_guard import SpikeGuard
from partf.training.splits import RunData

if TYPE_CHECKING:
    import tensorflow as tf

    from partf.models.config import ModelConfig

logger = logging.getLogger("partf.training")


@dataclasses.dataclass(frozen=True)
class Built:
    """The compiled model of a run and what came with it.

    Attributes:
        model: the `PARTransformerXL`, compiled, its optimizer built; its
            `spike_guard` is the loss-spike guard, or None (--spike_guard=off).
        model_config: its `ModelConfig`, resolved (`partf.training.resolve`).
        schedule: the learning-rate schedule (`value_at(step)` for the logs).
        full_config: {"model": the resolved model config, "training": the training
            settings without a model}, as config.json, checkpoints and results.json
            carry it.
    """

    model: Any
    model_config: Any
    schedule: Any
    full_config: dict[str, Any]

    def state_groups(self) -> dict[str, list[Any]]:
        """The variables a checkpoint holds, by group (restored by path, not order)."""
        groups = {
            # Per-replica memory is saved as all local replicas' rows, in order.
            "model": checkpoint_view(list(self.model.variables)),
            "optimizer": list(self.model.optimizer.variables),
            "metrics": list(self.model.metrics_variables),
        }
        if self.model.spike_guard is not None:
            groups["guard"] = self.model.spike_guard.variables
        return groups


def build_model(
    config: TrainConfig,
    model_config: ModelConfig,
    data: RunData,
    strategy: tf.distribute.Strategy | None,
) -> Built:
    """Seeds the random generators, sets the precision policy and builds the model of
    `model_config` (resolved from `config` and `data`, `partf.training.resolve`): compiled,
    with the optimizer's and metrics' variables created (so a checkpoint can be restored
    into them before the first step).

    Raises:
        ConfigError: settings the model refuses, or --spike_guard under a strategy.
    """
    keras.utils.set_random_seed(config.seed)
    if config.mixed_precision:
        policy = "mixed_float16" if _has_gpu() else "mixed_bfloat16"
        keras.mixed_precision.set_global_policy(policy)
    else:
        keras.mixed_precision.set_global_policy("float32")
    sampled = model_config.is_stochastic and model_config.search_estimator == "sampled"
    if sampled and config.jit_compile and keras.backend.backend() == "tensorflow":
        # TensorFlow's XLA bridge resolves every input of the per-block conditional as a
        # possible compile-time constant by interpreting its graph (XlaCaseOp ->
        # ValueInference); at the base configuration that did not finish in 10 minutes,
        # although small models compile. The JAX backend compiles it (tests/test_jax_backend.py).
        raise ConfigError(
            "--search_estimator=sampled cannot be compiled with XLA by TensorFlow at "
            "useful sizes (its conditionals do not finish compiling); add "
            "--jit_compile=False, or train on the JAX backend (KERAS_BACKEND=jax)."
        )
    with strategy.scope() if strategy else contextlib.nullcontext():
        model, schedule = _compiled_model(config, model_config, data.total_steps)
    # Learned positions cannot raise inside compiled code: refuse a split whose streams
    # (one epoch, or one evaluation pass, between memory resets) outrun the table now.
    # An encoder's sequences are the rows of one batch.
    for split in (data.train, data.valid, data.test, data.recall):
        if split is not None:
            try:
                if config.objective == "mlm":
                    model.check_length(split.seq_len)
                else:
                    model.check_positions(split.num_batches * split.seq_len)
            except ValueError as e:
                raise ConfigError(str(e)) from None
    full_config = {"model": model_config.to_dict(), "training": config.training_dict()}
    if model_config.is_stochastic:
        arch = config.arch_settings(data.total_steps)
        logger.info(
            "architecture search (--search=%s, %s estimator): logits at lr %s, weight decay %s, "
            "frozen for %d of %d steps",
            config.search,
            model_config.search_estimator,
            "shared" if arch.lr is None else f"{arch.lr:g}",
            "shared" if arch.weight_decay is None else f"{arch.weight_decay:g}",
            arch.freeze_steps,
            data.total_steps,
        )
    return Built(model, model_config, schedule, full_config)


def _has_gpu() -> bool:
    """Whether the backend computes on a GPU (float16 there, bfloat16 elsewhere)."""
    if keras.backend.backend() == "jax":
        import jax

        return any(device.platform == "gpu" for device in jax.devices())
    import tensorflow as tf

    return bool(tf.config.list_physical_devices("GPU"))


def _compiled_model(
    config: TrainConfig,
    model_config: ModelConfig,
    total_steps: int,
) -> tuple[Any, Any]:
    """The model, compiled with its optimizer and spike guard (inside the scope), and
    its learning-rate schedule."""
    from partf.models.par_transformer_xl import PARTransformerXL

    try:
        if not model_config.causal:
            from partf.models.masked_lm import MaskedLanguageModel

            # --objective=mlm: `tie_embeddings` is ignored (the MLM head is always tied); a
            # search's logits get --search's and --arch_*'s optimizer settings all the same
            # (the optimizer picks them by their "arch_logits" path).
            logger.info(
                "objective mlm: a bidirectional encoder; --mem_len and the adaptive softmax "
                "(--cutoffs, --proj_*) do not apply and are ignored"
            )
            model = MaskedLanguageModel(config=model_config, name="masked_language_model")
        else:
            model = PARTransformerXL(model_config, name="par_transformer_xl")
    except ValueError as e:  # e.g. a non-causal attention (lara) in this causal model
        raise model_error(e) from None
    schedule, optimizer = config.schedule_and_optimizer(total_steps)
    guard = None
    if config.spike_guard != "off":
        guard = SpikeGuard(config.spike_guard, config.spike_factor, config.spike_warmup)
    try:  # the step's options and its Keras workarounds: partf.models.train_step
        model.compile(
            optimizer=optimizer,
            jit_compile=config.jit_compile,
            steps_per_execution=config.steps_per_execution,
            spike_guard=guard,
            compiled_loop=config.compiled_loop,
        )
    except ValueError as e:  # e.g. --spike_guard off TensorFlow, --compiled_loop off JAX
        raise ConfigError(str(e)) from None
    # Create the optimizer's and the loss tracker's variables now, so a checkpoint
    # can be restored into them before the first step.
    model.optimizer.build(model.trainable_variables)
    return model, schedule
