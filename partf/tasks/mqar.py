"""Multi-query associative recall (MQAR), the synthetic task of Zoology (Arora et al. 2023).

Each example is a sequence of `seq_len` tokens: first `n` key-value pairs
(`k1 v1 k2 v2 ... kn vn`), then every one of those keys once more, in a random order, at
even positions of the rest of the sequence, with noise tokens between them. At the
position of each repeated key the model must predict the value that key was paired
with; nothing else is scored (target 0, which partf's loss and evaluation skip), so loss
and accuracy are over the answers alone.

Vocabulary (`vocab_size` V, even): 0 is never an input a model must read (the unscored
target); keys are 1 .. V/2 - 1 and values V/2 .. V - 1, as in Zoology. Noise tokens are
keys that the example does not use, so a key of the example appears exactly twice: once
in its pair, once as its query (Zoology fills with any token, so its keys can also appear
as noise). The query slots follow Zoology's power law (`power_a`, 0.01): slot s of the
`(L - 2n) / 2` slots is chosen with weight proportional to (s + 1)^(a - 1), so most
queries sit close to the pairs and some far away. Splits: `partf.tasks.base.DrawnTask`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from partf.errors import UsageError
from partf.settings import setting
from partf.tasks.base import DrawnTask, split_rng


@dataclasses.dataclass(frozen=True)
class MQARSettings:
    """How MQAR examples are drawn (each setting a `--mqar_<name>` flag of
    partf-build-data, but `seq_len`, `batch_size` and `vocab_size`, its own flags)."""

    seq_len: int = setting(256, "L, tokens per example (one example per row of a batch)")
    pairs: tuple[int, ...] = setting(
        (16,),
        "key-value pairs per training example; several, comma-separated (4,8,16): the "
        "examples cycle through them",
    )
    vocab_size: int = setting(512, "V, even: keys 1 .. V/2 - 1, values V/2 .. V - 1")
    batch_size: int = setting(32, "B, examples per batch")
    train_examples: int = setting(20_000, "training examples (whole batches)")
    eval_examples: int = setting(1_000, "examples of valid and of test")
    eval_pairs: int | None = setting(
        None, "pairs of each valid and test example (default: the largest of --mqar_pairs)"
    )
    power_a: float = setting(0.01, "the power law of the query slots (Zoology's 0.01)")
    seed: int = setting(0, "the seed of every split")

    def __post_init__(self) -> None:
        object.__setattr__(self, "pairs", tuple(int(n) for n in self.pairs))
        for name in ("seq_len", "vocab_size", "batch_size", "train_examples", "eval_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise UsageError(f"MQAR {name} must be a positive integer, got {value!r}")
        if not self.pairs or min(self.pairs) < 1:
            raise UsageError(f"MQAR pairs must be positive integers, got {list(self.pairs)}")
        if self.vocab_size % 2 or self.vocab_size < 8:
            raise UsageError(
                f"MQAR vocab_size must be even and at least 8 (keys below V/2, values "
                f"above), got {self.vocab_size}"
            )
        if not 0.0 < self.power_a <= 1.0:
            raise UsageError(f"MQAR power_a must be in (0, 1], got {self.power_a}")
        keys = self.vocab_size // 2 - 1
        for n in {*self.pairs, self.query_pairs}:
            if 4 * n > self.seq_len:
                raise UsageError(
                    f"MQAR with {n} pairs needs seq_len >= {4 * n} (the pairs and as many "
                    f"query slots again), got {self.seq_len}; use fewer pairs or longer rows"
                )
            if n >= keys or n > self.vocab_size // 2:
                raise UsageError(
                    f"MQAR with {n} pairs needs more than {n} keys and {n} values; "
                    f"vocab_size={self.vocab_size} gives {keys} keys: raise vocab_size"
                )
        if self.train_examples < self.batch_size or self.eval_examples < self.batch_size:
            raise UsageError(
                f"MQAR train_examples and eval_examples must hold at least one batch of "
                f"{self.batch_size}, got {self.train_examples} and {self.eval_examples}"
            )

    @property
    def query_pairs(self) -> int:
        """Pairs of each validation and test example."""
        return self.eval_pairs if self.eval_pairs is not None else max(self.pairs)

    def split_pairs(self, split: str) -> tuple[int, ...]:
        """The pair counts a split's examples cycle through."""
        return self.pairs if split == "train" else (self.query_pairs,)

    def num_batches(self, split: str) -> int:
        examples = self.train_examples if split == "train" else self.eval_examples
        return examples // self.batch_size


def draw_examples(
    num: int,
    seq_len: int,
    pairs: int,
    vocab_size: int,
    rng: np.random.Generator,
    power_a: float = 0.01,
) -> tuple[np.ndarray, np.ndarray]:
    """`num` MQAR examples of `pairs` key-value pairs each: (inputs, targets), int32
    [num, seq_len]; targets are 0 except at each query, where they hold the value its key
    was paired with."""
    n, length = pairs, seq_len
    half = vocab_size // 2
    # Distinct keys and values per example: the first n of a random order of each range.
    key_order = np.argsort(rng.random((num, half - 1)), axis=1) + 1  # [num, V/2 - 1]
    keys = key_order[:, :n]
    values = np.argsort(rng.random((num, vocab_size - half)), axis=1)[:, :n] + half
    # Noise: keys the example does not use, drawn uniformly.
    unused = key_order[:, n:]
    pick = rng.integers(0, unused.shape[1], size=(num, length))
    inputs = np.take_along_axis(unused, pick, axis=1)
    inputs[:, 0 : 2 * n : 2] = keys
    inputs[:, 1 : 2 * n : 2] = values
    # Query slots without replacement, weighted by Zoology's power law (Gumbel top-n).
    space = (length - 2 * n) // 2
    weights = np.log(power_a * np.arange(1, space + 1) ** (power_a - 1.0))
    scores = weights[None, :] + rng.gumbel(size=(num, space))
    slots = np.argsort(-scores, axis=1)[:, :n]  # [num, n]; slot j asks key j
    positions = 2 * n + 2 * slots
    np.put_along_axis(inputs, positions, keys, axis=1)
    targets = np.zeros((num, length), np.int64)
    np.put_along_axis(targets, positions, values, axis=1)
    return inputs.astype(np.int32), targets.astype(np.int32)


def draw_split(settings: MQARSettings, split: str) -> tuple[np.ndarray, np.ndarray]:
    """A split's examples as batches: (inputs, targets), int32 [batches, B, L].

    Row i of the split (batch i // B, row i % B) has `split_pairs(split)[i % k]` pairs.
    """
    rng = split_rng(settings.seed, split)
    batches, width = settings.num_batches(split), settings.batch_size
    total = batches * width
    counts = settings.split_pairs(split)
    inputs = np.zeros((total, settings.seq_len), np.int32)
    targets = np.zeros((total, settings.seq_len), np.int32)
    for k, n in enumerate(counts):
        rows = np.arange(k, total, len(counts))
        x, y = draw_examples(
            len(rows), settings.seq_len, n, settings.vocab_size, rng, settings.power_a
        )
        inputs[rows], targets[rows] = x, y
    shape = (batches, width, settings.seq_len)
    return inputs.reshape(shape), targets.reshape(shape)


TASK = DrawnTask(
    "mqar",
    "multi-query associative recall (Zoology), scored on its answers",
    options=MQARSettings,
    draw=draw_split,
    required=("seq_len", "batch_size", "pairs"),
    prefix=lambda settings: f"data/mqar_L{settings.seq_len}_p{max(settings.pairs)}",
)
#: What the tests, the benchmarks and scripts call the split functions.
write_mqar, read_mqar, is_mqar = TASK.write, TASK.read, TASK.owns
