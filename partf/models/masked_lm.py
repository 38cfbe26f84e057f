"""MaskedLanguageModel: the Encoder with its MLM head, shaped for partf's trainer.

It answers the same contract as `PARTransformerXL` (`compute_loss`, `token_nll`,
`reset_state`, `pi()`, `candidate_names`, `architecture_string()`, `tau()`), scored on
the masked positions only: the batches come masked (partf.data.masking), targets holding
the original token at each chosen position and 0 elsewhere, so the loss and perplexity,
which skip targets 0, are the masked-token ones. There is no memory: each row is a
sequence of its own.
"""

from __future__ import annotations

from typing import Any

from keras import ops

from partf.models.config import ModelConfig
from partf.models.encoder import Encoder
from partf.models.loss import add_layer_losses, mean_token_loss
from partf.models.train_step import TrainStep
from partf.serialization import register


def masked_token_nll(logits: Any, targets: Any) -> Any:
    """float32 [B, T] -log softmax(logits [B, T, V])[targets int [B, T]]; 0 where
    target == 0 (not chosen)."""
    logits = ops.cast(logits, "float32")
    targets = ops.cast(targets, "int32")
    picked = ops.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    nll = ops.logsumexp(logits, axis=-1) - picked
    return ops.where(ops.not_equal(targets, 0), nll, ops.zeros_like(nll))


@register
class MaskedLanguageModel(TrainStep, Encoder):
    """An `Encoder` with its MLM head (tied to the embedding) and the trainer's contract:
    masked ids int [B, T] -> float32 logits [B, T, vocab_size]. Arguments as `Encoder`'s,
    without `num_classes` and `mlm_head` (always on); its training step is `TrainStep`'s."""

    def __init__(self, config: ModelConfig | dict[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.pop("mlm_head", None)
        kwargs.pop("num_classes", None)
        super().__init__(config, mlm_head=True, num_classes=0, **kwargs)

    # -------------------------------------------------------------- the loss
    def token_nll(self, logits: Any, targets: Any) -> Any:
        """float32 [B, T] NLL of each chosen position's original token; 0 elsewhere."""
        return masked_token_nll(logits, targets)

    def compute_loss(
        self,
        x: Any = None,
        y: Any = None,
        y_pred: Any = None,
        sample_weight: Any = None,
        training: bool = True,
    ) -> Any:
        """Mean NLL over the chosen positions (targets != 0), plus any layer losses; the
        causal model's loss (partf.models.loss) without its search terms. A batch in
        which nothing was chosen contributes a zero loss, not a NaN."""
        data_loss, replicas = mean_token_loss(self.token_nll(y_pred, y), y, sample_weight)
        return add_layer_losses(data_loss, self.losses, replicas)

    # ------------------------------------------------- what the trainer asks
    def reset_state(self, which: str = "all") -> None:
        """Nothing to reset: an encoder keeps no memory between batches."""

    def tau(self) -> Any:
        """The search's Gumbel temperature; None for a fixed architecture (the Encoder
        itself refuses to answer there)."""
        return super().tau() if self.is_search else None
