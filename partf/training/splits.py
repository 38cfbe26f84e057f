"""A run's records: the training, validation and test splits, and what they tell.

`load_data(config)` reads the folders named by a `TrainConfig` and returns `RunData`:
the splits as datasets of (inputs, targets), and the numbers the rest of the run is
built from (vocabulary size, batches per epoch, steps in all). Everything here can
reject the inputs, and nothing here writes.

On the TensorFlow backend a split is a `tf.data.Dataset`; on the others it is
`ArrayBatches`, the records read into numpy without TensorFlow
(`partf.data.record_reader`), which `fit` and `JaxEvaluator` take as they are.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keras
import numpy as np

from partf.errors import DataError
from partf.training.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from partf.data.masking import Masking

logger = logging.getLogger("partf.training")


class ArrayBatches:
    """A split's batches in memory, as (inputs, targets) pairs in stream order: of
    `batches` int32 [n, B, L + 1] (records: targets are the inputs shifted by one), or
    of inputs `batches` and `targets` [n, B, L] (a task's own targets)."""

    def __init__(self, batches: np.ndarray, targets: np.ndarray | None = None) -> None:
        if targets is None:
            self.inputs, self.targets = batches[..., :-1], batches[..., 1:]
        else:
            self.inputs, self.targets = batches, targets

    def __len__(self) -> int:
        return len(self.inputs)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        yield from zip(self.inputs, self.targets, strict=True)

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Batches [start, stop) as (inputs, targets) rows [(stop - start) * B, L]: what
        `fit(x, y, batch_size=B, shuffle=False)` cuts back into those batches, in order."""
        width = self.inputs.shape[-1]
        return (
            np.ascontiguousarray(self.inputs[start:stop]).reshape(-1, width),
            np.ascontiguousarray(self.targets[start:stop]).reshape(-1, width),
        )


@dataclasses.dataclass
class Split:
    """One split's dataset ((inputs, targets) int32 [B, L] batches: a `tf.data.Dataset`
    on TensorFlow, `ArrayBatches` elsewhere) and what is known about it."""

    dataset: Any
    num_batches: int
    batch_size: int
    seq_len: int
    vocab_size: int | None
    text_counts: dict[str, int | None]
    mask_id: int | None = None
    task: str = "text"  # the task whose split it is (partf.tasks)
    scored: bool = False  # accuracy on the scored positions, beside the loss


def load_split(directory: str, what: str, sp_model_prefix: str | None = None) -> Split:
    """The `Split` of a folder of records (partf-build-data's or the original project's;
    `what` names it in messages), a dataset of (inputs, targets) int32 [B, L] of known
    length (so the progress bar has an ETA). The tokenizer `sp_model_prefix`, when its
    file exists, is checked against the records' metadata.
    """
    from partf import tasks
    from partf.data.tokenizer import model_path

    path = Path(directory)
    if not path.exists():
        raise ConfigError(
            f"{what} records {path} do not exist; build them with ./create_tfrecords.sh "
            f"or point --{what}_directory at a folder of .tfrecords files."
        )
    task = tasks.of_folder(path)
    if task is not None:
        return _drawn_split(task, path)
    on_tensorflow = keras.backend.backend() == "tensorflow"
    if on_tensorflow:
        from partf.data.tfrecords import read_metadata
    else:
        from partf.data.record_reader import read_records_metadata as read_metadata
    metadata = read_metadata(path)
    sp_model = None
    if sp_model_prefix and metadata.tokenizer_sha256:
        # partf records name their tokenizer: check it against the one given, if present
        # (the records carry the vocabulary size, so the tokenizer itself is optional).
        sp_model = model_path(sp_model_prefix)
        if not sp_model.is_file():
            logger.warning(
                "tokenizer %s not found: not checked against the %s records", sp_model, what
            )
            sp_model = None
    if not metadata.num_batches:
        raise DataError(f"{what} records {path} hold no batches; rebuild them.")
    if on_tensorflow:
        from partf.data.tfrecords import load_tfrecords, verify_records

        dataset = load_tfrecords(path, sp_model, prefetch=False)  # of known length
        # A truncated or corrupt shard is found now, not when training reaches it.
        verify_records(path)
    else:
        from partf.data.record_reader import read_record_batches

        # Every record is read (and its CRCs checked) now.
        dataset = ArrayBatches(read_record_batches(path, sp_model))
    text_counts: dict[str, int | None] = {}
    if metadata.num_words is not None and metadata.num_lines is not None:
        text_counts["num_words"] = metadata.num_words + metadata.num_lines
    if metadata.num_chars is not None:
        text_counts["num_chars"] = metadata.num_chars
    if metadata.num_tokens:
        text_counts["text_tokens"] = metadata.num_tokens - 1  # every (t, t+1) pair
    return Split(
        dataset,
        int(metadata.num_batches),
        int(metadata.batch_size),
        int(metadata.seq_len),
        metadata.vocab_size,
        text_counts,
        metadata.mask_id,
    )


def _drawn_split(task: Any, path: Path) -> Split:
    """A split of a drawn task (partf.tasks.base.DrawnTask): its examples drawn again
    from the folder's settings, as a `tf.data.Dataset` on TensorFlow and `ArrayBatches`
    elsewhere."""
    settings, _, inputs, targets = task.read(path)
    dataset: Any = ArrayBatches(inputs, targets)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        dataset = tf.data.Dataset.from_tensor_slices((inputs, targets))
    return Split(
        dataset,
        int(inputs.shape[0]),
        settings.batch_size,
        settings.seq_len,
        settings.vocab_size,
        {},
        task=task.name,
        scored=task.scores_accuracy,
    )


def vocab_size_of(splits: Sequence[Split], sp_model_prefix: str) -> int:
    """The vocabulary size from the records' metadata (of `splits`, in order of
    preference), else from the tokenizer `sp_model_prefix`."""
    from partf.data import model_path
    from partf.data import vocab_size_of as tokenizer_size

    for split in splits:
        if split.vocab_size:
            return int(split.vocab_size)
    model_file = model_path(sp_model_prefix)
    if not model_file.is_file():
        raise ConfigError(
            f"cannot tell the vocabulary size: the records have no metadata.json and the "
            f"tokenizer {model_file} does not exist; pass --sp_model_prefix."
        )
    return int(tokenizer_size(model_file))


@dataclasses.dataclass(frozen=True)
class RunData:
    """The run's splits and the sizes that follow from them: `total_steps` is epochs x
    batches per epoch, capped by max_steps; `masking` masks the training batches
    (--objective=mlm); `recall` is a drawn task's split scored by its answers at the end
    (--recall_directory).
    """

    train: Split
    valid: Split | None
    test: Split | None
    vocab_size: int
    total_steps: int
    masking: Masking | None = None
    recall: Split | None = None

    @property
    def batches_per_epoch(self) -> int:
        """B, batches in one pass over the training records."""
        return self.train.num_batches

    @property
    def scored(self) -> bool:
        """Whether the run's task reports accuracy on its scored positions beside the loss
        (a drawn task: partf.tasks)."""
        return self.train.scored

    @property
    def tokens_per_batch(self) -> int:
        """Target tokens per training batch (batch size x sequence length)."""
        return self.train.batch_size * self.train.seq_len


def load_data(config: TrainConfig) -> RunData:
    """The `RunData` of the splits `config` names, checked to fit together (with
    --mix_directory, the training split is the mixed stream of `partf.training.mixing`).

    Raises:
        ConfigError: a missing folder, splits of different batch shapes, no way to tell
            the vocabulary size, a task's split that does not fit the text.
        DataError: empty or damaged records.
    """
    sp = config.sp_model_prefix
    train = load_split(config.train_directory, "train", sp)
    valid = load_split(config.valid_directory, "valid", sp) if config.valid_directory else None
    test = load_split(config.test_directory, "test", sp) if config.test_directory else None
    shape = (train.batch_size, train.seq_len)
    for split, what in ((valid, "valid"), (test, "test")):
        if split is not None and (split.batch_size, split.seq_len) != shape:
            raise ConfigError(
                f"{what} records have batches of {split.batch_size}x{split.seq_len} but the "
                f"training records {shape[0]}x{shape[1]}; build all splits with the same "
                "--batch_size and --seq_len."
            )
        if split is not None and split.task != train.task:
            raise ConfigError(
                f"{what} records are {split.task} data but the training records "
                f"{train.task}; give every split of the same task."
            )
    vocab_size = vocab_size_of([s for s in (train, valid, test) if s], sp)
    # A task's split scored by its answers at the end, and one mixed into the training.
    recall = None
    if config.recall_directory:
        recall = task_split(config.recall_directory, "--recall_directory", train, vocab_size)
    if config.mix_directory:
        train = _mix(config, train, vocab_size)
    masking = None
    if config.objective == "mlm":
        if keras.backend.backend() != "tensorflow":
            # The masks are tf.data maps (partf.data.masking).
            raise ConfigError(
                "--objective=mlm masks its batches with TensorFlow; train it on the "
                "TensorFlow backend (KERAS_BACKEND=tensorflow), or use --objective=causal."
            )
        from partf.data.masking import Masking

        masking = Masking(_mask_id(config, train, valid, test), vocab_size, seed=config.seed)
        # Fixed masks per split; word and character counts do not apply to masked tokens.
        valid, test = (
            None
            if split is None
            else dataclasses.replace(
                split, dataset=masking.evaluation_batches(split.dataset, what), text_counts={}
            )
            for split, what in ((valid, "valid"), (test, "test"))
        )
    total_steps = config.epochs * train.num_batches
    if config.max_steps is not None:
        total_steps = min(total_steps, config.max_steps)
    if config.lr_schedule != "constant" and config.warmup_steps >= total_steps:
        logger.warning(
            "the warm-up (%d steps) is not shorter than the run (%d steps): the learning "
            "rate never reaches --max_lr; lower --warmup_steps for short runs.",
            config.warmup_steps,
            total_steps,
        )
    return RunData(train, valid, test, vocab_size, total_steps, masking, recall)


def task_split(directory: str, flag: str, train: Split, vocab_size: int) -> Split:
    """The drawn task's split `directory` names (`flag` is its flag, for messages),
    checked to fit the training records: the same batch shape, and its tokens ids of the
    text's vocabulary (partf.training.mixing).

    Raises:
        ConfigError: not a task's split, another batch shape, too large a vocabulary.
        DataError: a damaged split file.
    """
    from partf import tasks

    task = tasks.of_folder(directory)
    if task is None:
        shape = f"--batch_size={train.batch_size} --seq_len={train.seq_len}"
        raise ConfigError(
            f"{flag} {directory} is not a task's split (a folder with <task>.json: "
            f"{', '.join(t.marker for t in tasks.drawn_tasks().values())}); write one with "
            f"partf-build-data --task=<task> {shape}."
        )
    split = _drawn_split(task, Path(directory))
    if (split.batch_size, split.seq_len) != (train.batch_size, train.seq_len):
        raise ConfigError(
            f"{flag} {directory} has batches of {split.batch_size}x{split.seq_len} but the "
            f"training records {train.batch_size}x{train.seq_len}; build the [{task.name}] "
            f"split with the text's --batch_size={train.batch_size} and "
            f"--seq_len={train.seq_len}."
        )
    if split.vocab_size > vocab_size:
        raise ConfigError(
            f"{flag} {directory} has a {task.name} vocabulary of {split.vocab_size} tokens "
            f"but the text's has {vocab_size}; build the [{task.name}] split with "
            f"--vocab_size <= {vocab_size}, its tokens being ids of the text's vocabulary."
        )
    return split


def mixed_split(train: Split, task: Split, every: int) -> Split:
    """`train` with a batch of `task` after every `every` of its batches
    (`partf.training.mixing`): a split of `train.num_batches + train.num_batches // every`
    batches, of the same kind as `train.dataset` (a `tf.data.Dataset`, or `ArrayBatches`)."""
    from partf.training.mixing import mix_choices, mixed_arrays, mixed_dataset

    choices = mix_choices(train.num_batches, every)
    if isinstance(train.dataset, ArrayBatches):
        text, rows = train.dataset, task.dataset
        mixed = mixed_arrays((text.inputs, text.targets), (rows.inputs, rows.targets), choices)
        dataset: Any = ArrayBatches(*mixed)
    else:
        dataset = mixed_dataset(train.dataset, task.dataset, choices)
    return dataclasses.replace(train, dataset=dataset, num_batches=len(choices))


def _mix(config: TrainConfig, train: Split, vocab_size: int) -> Split:
    """The training split with the batches of --mix_directory mixed in."""
    if train.scored:
        raise ConfigError(
            f"--mix_directory mixes a task's batches into text, but the training records are "
            f"{train.task} data; drop --mix_directory or train on text records."
        )
    task = task_split(config.mix_directory, "--mix_directory", train, vocab_size)
    mixed = mixed_split(train, task, config.mix_every)
    logger.info(
        "%d %s batches of %s mixed into the %d text batches of each epoch (one after every "
        "%d): %d batches per epoch",
        mixed.num_batches - train.num_batches,
        task.task,
        config.mix_directory,
        train.num_batches,
        config.mix_every,
        mixed.num_batches,
    )
    return mixed


def _mask_id(config: TrainConfig, train: Split, *others: Split | None) -> int:
    """The `[MASK]` id every split's tokenizer reserved; refuses records without one."""
    fix = (
        "rebuild the records with partf-build-data --train_tokenizer --mask_symbol "
        "(or train with --objective=causal)"
    )
    if train.mask_id is None:
        raise ConfigError(
            f"--objective=mlm needs a [MASK] token but the train records "
            f"{config.train_directory} were built with a tokenizer without one; {fix}."
        )
    for split, what in zip(others, ("valid", "test"), strict=True):
        if split is not None and split.mask_id != train.mask_id:
            raise ConfigError(
                f"the {what} records' [MASK] id is {split.mask_id} but the train records' "
                f"{train.mask_id}; {fix}, all splits with the same tokenizer."
            )
    return int(train.mask_id)
