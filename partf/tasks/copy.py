"""Copying: a row is `length` random tokens, a separator, then the same tokens again;
the model is scored on the copy alone.

Row (`seq_len` L, `length` n, 2n + 1 <= L): `x1 .. xn SEP x1 .. xn f ..`, where SEP is
token 1, the x are drawn uniformly from 2 .. V - 1 and the filler f after the copy too.
The target of the separator is x1 and that of each copied x_i is x_(i+1) (its last, xn,
has none); every other target is 0, which partf's loss and evaluation skip, so the loss
and the accuracy are over the n tokens of the copy. A model must hold n tokens over n
positions: a test of memory rather than of retrieval by key (partf.tasks.mqar).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from partf.errors import UsageError
from partf.settings import setting
from partf.tasks.base import DrawnTask, split_rng

#: The separator between a row's tokens and their copy.
SEPARATOR = 1


@dataclasses.dataclass(frozen=True)
class CopySettings:
    """How copy examples are drawn (each setting a `--copy_<name>` flag of
    partf-build-data, but `seq_len`, `batch_size` and `vocab_size`, its own flags)."""

    seq_len: int = setting(64, "L, tokens per example (one example per row of a batch)")
    length: int = setting(16, "n, tokens copied; 2n + 1 <= seq_len")
    vocab_size: int = setting(64, "V: tokens 2 .. V - 1 copied, 1 the separator")
    batch_size: int = setting(32, "B, examples per batch")
    train_examples: int = setting(10_000, "training examples (whole batches)")
    eval_examples: int = setting(1_000, "examples of valid and of test")
    seed: int = setting(0, "the seed of every split")

    def __post_init__(self) -> None:
        for name in ("seq_len", "length", "vocab_size", "batch_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"copy {name} must be positive, got {getattr(self, name)}")
        if 2 * self.length + 1 > self.seq_len:
            raise UsageError(
                f"copy of {self.length} tokens needs seq_len >= {2 * self.length + 1}, got "
                f"{self.seq_len}; copy fewer tokens or use longer rows"
            )
        if self.vocab_size < 3:
            raise UsageError(f"copy vocab_size must be at least 3, got {self.vocab_size}")
        if min(self.train_examples, self.eval_examples) < self.batch_size:
            raise UsageError(
                f"copy train_examples and eval_examples must hold at least one batch of "
                f"{self.batch_size}, got {self.train_examples} and {self.eval_examples}"
            )

    def num_batches(self, split: str) -> int:
        examples = self.train_examples if split == "train" else self.eval_examples
        return examples // self.batch_size


def draw_split(settings: CopySettings, split: str) -> tuple[np.ndarray, np.ndarray]:
    """A split's examples as batches: (inputs, targets), int32 [batches, B, L]."""
    rng = split_rng(settings.seed, split)
    n, length = settings.length, settings.seq_len
    shape = (settings.num_batches(split), settings.batch_size)
    inputs = rng.integers(2, settings.vocab_size, size=(*shape, length), dtype=np.int32)
    inputs[..., n] = SEPARATOR
    inputs[..., n + 1 : 2 * n + 1] = inputs[..., :n]
    targets = np.zeros_like(inputs)
    targets[..., n : 2 * n] = inputs[..., :n]
    return inputs, targets


TASK = DrawnTask(
    "copy",
    "copying a row's tokens after a separator, scored on the copy",
    options=CopySettings,
    draw=draw_split,
    prefix=lambda settings: f"data/copy_L{settings.seq_len}_n{settings.length}",
)
