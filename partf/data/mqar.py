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
queries sit close to the pairs and some far away.

A split is a folder holding `mqar.json`: the settings and seed it is drawn from and the
sha256 of the arrays they give. The examples are drawn again, deterministically, when
the folder is read (numpy only, so the JAX path reads it without TensorFlow), and a
different draw (another numpy, another partf) is refused rather than trained on. Train,
valid and test are drawn from different streams of the same seed.

Example:
    >>> settings = MQARSettings(seq_len=64, pairs=(4,), vocab_size=128, batch_size=8)
    >>> inputs, targets = draw_split(settings, "train")
    >>> inputs.shape                        # [batches, B, L]
    (2500, 8, 64)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from partf.atomic import atomic_write_text
from partf.errors import DataError, UsageError

#: The file that makes a folder an MQAR split.
MQAR_FILE = "mqar.json"
FORMAT = "partf-mqar"
FORMAT_VERSION = 1

#: The splits and the index of each one's random stream.
SPLITS = ("train", "valid", "test")


@dataclasses.dataclass(frozen=True)
class MQARSettings:
    """How MQAR examples are drawn.

    Attributes:
        seq_len: L, tokens per example (one example per row of a batch).
        pairs: key-value pairs per training example; several values: the examples cycle
            through them (a curriculum of easy and hard examples in every batch).
        vocab_size: V, even: keys 1 .. V/2 - 1, values V/2 .. V - 1.
        batch_size: B, examples per batch.
        train_examples: examples in the training split (rounded down to whole batches).
        eval_examples: examples in the validation and the test split each.
        eval_pairs: key-value pairs of every validation and test example; None: the
            largest of `pairs`.
        power_a: the power law of the query slots (Zoology's 0.01).
        seed: the seed of every split's stream.
    """

    seq_len: int = 256
    pairs: tuple[int, ...] = (16,)
    vocab_size: int = 512
    batch_size: int = 32
    train_examples: int = 20_000
    eval_examples: int = 1_000
    eval_pairs: int | None = None
    power_a: float = 0.01
    seed: int = 0

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

    def to_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values["pairs"] = list(self.pairs)
        return values


def draw_examples(
    num: int,
    seq_len: int,
    pairs: int,
    vocab_size: int,
    rng: np.random.Generator,
    power_a: float = 0.01,
) -> tuple[np.ndarray, np.ndarray]:
    """`num` MQAR examples of `pairs` key-value pairs each.

    Returns:
        (inputs, targets), int32 [num, seq_len]; targets are 0 except at each query,
        where they hold the value its key was paired with.
    """
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
    if split not in SPLITS:
        raise UsageError(f"unknown MQAR split {split!r}; valid: {', '.join(SPLITS)}")
    rng = np.random.default_rng([settings.seed, SPLITS.index(split)])
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


def digest(inputs: np.ndarray, targets: np.ndarray) -> str:
    """sha256 of a split's arrays (int32, C order), which its folder records."""
    h = hashlib.sha256()
    for array in (inputs, targets):
        h.update(np.ascontiguousarray(array, np.int32).tobytes())
    return h.hexdigest()


def write_mqar(
    prefix: str | os.PathLike, settings: MQARSettings, overwrite: bool = False
) -> dict[str, Path]:
    """Writes the folders `<prefix>_{train,valid,test}` of `settings`, each an
    `mqar.json`, every folder checked before any is written (UsageError: one holds
    files, without `overwrite`); returns {split: folder}."""
    folders = {split: Path(f"{prefix}_{split}") for split in SPLITS}
    for folder in folders.values():
        if not overwrite and folder.exists() and any(folder.iterdir()):
            raise UsageError(f"{folder} exists and is not empty; pass --overwrite to replace it")
    for split, folder in folders.items():
        inputs, targets = draw_split(settings, split)
        folder.mkdir(parents=True, exist_ok=True)
        record = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "split": split,
            "settings": settings.to_dict(),
            "num_batches": int(inputs.shape[0]),
            "answers": int(np.count_nonzero(targets)),
            "sha256": digest(inputs, targets),
        }
        atomic_write_text(folder / MQAR_FILE, json.dumps(record, indent=2) + "\n")
    return folders


def is_mqar(directory: str | os.PathLike) -> bool:
    """Whether `directory` is an MQAR split (holds `mqar.json`)."""
    return (Path(directory) / MQAR_FILE).is_file()


def read_mqar(directory: str | os.PathLike) -> tuple[MQARSettings, str, np.ndarray, np.ndarray]:
    """(settings, split, inputs, targets int32 [batches, B, L]) of an MQAR split folder,
    drawn again and checked against its sha256 (DataError: an invalid file, or another
    draw than the one recorded)."""
    path = Path(directory) / MQAR_FILE
    fix = "write the splits again with partf-build-data --task=mqar --overwrite"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("format") != FORMAT:
            raise ValueError("not an MQAR split file")
        if record.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"format version {record.get('format_version')!r}, this partf reads "
                f"{FORMAT_VERSION}"
            )
        values = dict(record["settings"])
        values["pairs"] = tuple(values["pairs"])
        settings = MQARSettings(**values)
        split = record["split"]
        want = record["sha256"]
    except (OSError, ValueError, KeyError, TypeError, UsageError) as e:
        raise DataError(f"{path} is not a valid MQAR split ({e}); {fix}") from None
    inputs, targets = draw_split(settings, split)
    if digest(inputs, targets) != want:
        raise DataError(
            f"{path}: drawing its examples again gives other data than when it was written "
            f"(another numpy or partf); {fix}"
        )
    return settings, split, inputs, targets


def parse_pairs(text: str | Sequence[int]) -> tuple[int, ...]:
    """'4,8,16' (or a sequence of ints) -> (4, 8, 16)."""
    if not isinstance(text, str):
        return tuple(int(n) for n in text)
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise UsageError(
            f"MQAR pairs must be whole numbers separated by commas (e.g. 4,8,16), got {text!r}"
        ) from None
