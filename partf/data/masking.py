"""BERT's masking for masked language modelling, as tf.data maps over context batches.

Of the real (non-pad) tokens of a batch, each is chosen with probability `rate` (15%);
a chosen token is replaced by the mask id with probability `mask_fraction` (80%), by a
random token with probability `random_fraction` (10%), and kept otherwise (10%). The
model sees the replaced tokens and is scored on the chosen positions only: the targets
hold the original token there and 0 (padding, never scored) everywhere else.

Every draw is a stateless function of a two-number seed, so a batch's mask depends on
nothing but its seed:

- training: (`--seed`, global step), so every step gets fresh masks, a rerun gets the
  same ones and a resumed run continues exactly (the step is part of its checkpoint);
- evaluation: (a fixed number per split, batch index), the same whatever `--seed`, so
  masked perplexities of different runs on the same records are comparable.

The sequence masked is a context batch's inputs, [B, L]: in partf records row r of
batch i+1 starts where row r of batch i ends, so a split's inputs hold each token once.

References:
    Devlin et al., "BERT", NAACL 2019, section 3.1 and appendix C.2.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

#: Seeds of the evaluation masks (the first seed number; the second is the batch index).
#: Negative, so they never meet a training seed (--seed is >= 0).
EVAL_SEEDS = {"valid": -1, "test": -2}


def mask_tokens(
    tokens: Any,
    seed: Any,
    mask_id: int,
    vocab_size: int,
    rate: float = 0.15,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Masks int32 [B, T] token ids by BERT's 80/10/10 rule over `rate` of the real tokens
    (0 is padding, never chosen): (inputs the model sees, targets holding the original
    token at each chosen position and 0 elsewhere). `seed` is two integers (stateless);
    random replacements are drawn from 1 .. vocab_size - 1 without `mask_id`."""
    if not 0 < mask_id < vocab_size or vocab_size < 3:
        raise ValueError(
            f"mask_id {mask_id} must be a non-pad id below vocab_size {vocab_size} (>= 3)."
        )
    tokens = tf.convert_to_tensor(tokens, tf.int32)
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
    shape = tf.shape(tokens)
    # Three independent draws from one seed.
    choose_seed, action_seed, random_seed = tf.unstack(
        tf.random.experimental.stateless_split(seed, 3)
    )
    chosen = tf.logical_and(
        tf.random.stateless_uniform(shape, choose_seed) < rate, tf.not_equal(tokens, 0)
    )
    action = tf.random.stateless_uniform(shape, action_seed)
    to_mask = tf.logical_and(chosen, action < mask_fraction)
    to_random = tf.logical_and(
        chosen,
        tf.logical_and(action >= mask_fraction, action < mask_fraction + random_fraction),
    )
    # Uniform over the vocab_size - 2 ids that are neither padding nor the mask: draw from
    # 1 .. vocab_size - 2, then step over mask_id.
    random_ids = tf.random.stateless_uniform(
        shape, random_seed, minval=1, maxval=vocab_size - 1, dtype=tf.int32
    )
    random_ids = random_ids + tf.cast(random_ids >= mask_id, tf.int32)
    inputs = tf.where(to_mask, mask_id, tf.where(to_random, random_ids, tokens))
    targets = tf.where(chosen, tokens, 0)
    return inputs, targets


@dataclasses.dataclass(frozen=True)
class Masking:
    """How a masked-language-model run masks its batches (the fields as in `mask_tokens`;
    `seed` is the first seed number of the training masks, --seed)."""

    mask_id: int
    vocab_size: int
    seed: int = 0
    rate: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1

    def _map(self, dataset: tf.data.Dataset, first_seed: int, start: int) -> tf.data.Dataset:
        def mask(index: tf.Tensor, batch: tuple[tf.Tensor, tf.Tensor]):
            return mask_tokens(
                batch[0],
                tf.stack([tf.constant(first_seed, tf.int64), index]),
                self.mask_id,
                self.vocab_size,
                self.rate,
                self.mask_fraction,
                self.random_fraction,
            )

        return dataset.enumerate(start=start).map(mask)

    def training_batches(self, dataset: tf.data.Dataset, first_step: int) -> tf.data.Dataset:
        """Masked (inputs, targets) int32 [B, L] of the training batches in order, the first
        being the run's global step `first_step` (0-based)."""
        return self._map(dataset, self.seed, first_step)

    def evaluation_batches(self, dataset: tf.data.Dataset, split: str) -> tf.data.Dataset:
        """Masked (inputs, targets) int32 [B, L] of a split ("valid" or "test"), with its fixed
        seed (`EVAL_SEEDS`), the same every pass."""
        return self._map(dataset, EVAL_SEEDS[split], 0)
