"""The training loss of partf's language models, from per-token NLL.

A target 0 is not scored (padding, or a position the masking did not choose); the loss
is the mean NLL over the scored targets, weighted by any `sample_weight`, plus the
layers' losses. Under a `tf.distribute` strategy the NLL sum is divided by the token
count of all replicas (the layers' losses by the replica count), so the replicas'
gradients sum to the global batch's. The sampled-path search's term: `score_function_term`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import ops

#: The decay of the sampled-path search's running-mean loss baseline.
BASELINE_DECAY = 0.99


def mean_token_loss(nll: Any, targets: Any, sample_weight: Any = None) -> tuple[Any, float]:
    """(mean `nll` float32 [B, T] over the scored `targets` (int [B, T], 0: not scored) of
    the global batch, replicas in sync); `sample_weight`: None, [B] (per row) or [B, T].
    A batch in which nothing is scored contributes a zero loss, not a NaN."""
    weights = ops.cast(ops.not_equal(targets, 0), "float32")  # [B, T]
    if sample_weight is not None:
        sample_weight = ops.cast(sample_weight, "float32")
        if len(sample_weight.shape) == 1:
            sample_weight = sample_weight[:, None]
        weights = weights * sample_weight
    replicas, count = sum_over_replicas(ops.sum(weights))
    return ops.sum(nll * weights) / ops.maximum(count, 1.0), replicas


def add_layer_losses(loss: Any, losses: Sequence[Any], replicas: float = 1.0) -> Any:
    """`loss` plus the layers' own losses (float32), each divided by the replicas."""
    for extra in losses:
        loss = loss + ops.cast(extra, "float32") / replicas
    return loss


def score_function_term(
    path_log_probs: Sequence[Any], baseline: keras.Variable, data_loss: Any
) -> Any:
    """A zero-valued loss term whose gradient is the score-function (REINFORCE) estimate
    for the drawn paths: (L - b) * grad sum_blocks log pi[drawn], with b a running mean of
    the loss L. It is unbiased for the gradient of the expected loss over paths (b does
    not depend on the draw) and needs no output of the candidates not drawn.
    `path_log_probs`: log pi of the path drawn in each sampled block (scalars);
    `baseline`: float32 [2] variable, the running mean as [sum, weight] (divided out, so
    the first steps are not biased toward zero), updated here.
    """
    log_prob = ops.sum(ops.stack(path_log_probs))
    total, weight = baseline[0], baseline[1]
    loss = ops.cast(ops.stop_gradient(data_loss), "float32")
    mean = ops.where(weight > 0, total / ops.maximum(weight, 1e-12), loss)
    term = (loss - mean) * log_prob
    decay = BASELINE_DECAY
    baseline.assign(ops.stack([decay * total + (1 - decay) * loss, decay * weight + (1 - decay)]))
    return term - ops.stop_gradient(term)


def sum_over_replicas(value: Any) -> tuple[float, Any]:
    """(replicas in sync, `value` summed over them) inside a tf.distribute replica
    context; (1, value) otherwise (one device, or another backend)."""
    if keras.backend.backend() != "tensorflow":
        return 1.0, value
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return 1.0, value
    total = context.all_reduce(tf.distribute.ReduceOp.SUM, value)
    return float(context.num_replicas_in_sync), total


def split_outputs(y_pred: Any) -> tuple[Any, list[Any]]:
    """(hidden states, log pi of the drawn path per sampled block; [] if none) from what
    `PARTransformerXL.call` returned."""
    if isinstance(y_pred, dict):
        return y_pred["hidden"], list(y_pred["path_log_probs"])
    return y_pred, []


def attention_loss_logs(layers: Sequence[Any]) -> dict[str, Any]:
    """Per `loss_name`, the float32 sum of the losses `layers` (attentions that add one)
    hold from their last call; {} when they hold none."""
    terms: dict[str, list[Any]] = {}
    for layer in layers:
        terms.setdefault(layer.loss_name, []).extend(layer.losses)
    return {
        name: ops.sum(ops.stack([ops.cast(term, "float32") for term in found]))
        for name, found in terms.items()
        if found
    }
