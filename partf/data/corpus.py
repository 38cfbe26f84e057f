"""Where the train, valid and test text of a corpus lives.

A corpus is a folder with `train.txt`, `valid.txt` and `test.txt` (the layout
of `data/wikitext-2/`). Users with a single text file of their own can split
it by lines with `split_text_file`: the head is train, then valid, then test.
Lines stay whole and in order, so the held-out text is the file's tail, as
with WikiText's own splits, which are separate articles rather than random lines.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from partf.data.download import SPLIT_FILES
from partf.errors import DataError, UsageError

logger = logging.getLogger(__name__)

SPLITS = ("train", "valid", "test")


def find_splits(directory: str | os.PathLike, train_split: str = "train") -> dict[str, Path]:
    """{"train", "valid", "test"} -> text file of a folder holding train.txt, valid.txt and
    test.txt (UsageError when one is missing). `train_split="valid"` is an offline
    stand-in where train.txt is absent: "train" is then valid.txt."""
    directory = Path(directory)
    if train_split not in ("train", "valid"):
        raise UsageError(f"--train_split must be train or valid, got {train_split!r}")
    if directory.is_file():
        raise UsageError(
            f"{directory} is a file, not a folder; drop --from_directory to build it into one "
            f"record folder, or pass --source={directory} to split it into train, valid and test"
        )
    if not directory.is_dir():
        raise UsageError(
            f"text folder {directory} does not exist; give a folder with train.txt, valid.txt "
            f"and test.txt (or a single text file without --from_directory)"
        )
    files = {split: directory / f"{split}.txt" for split in SPLITS}
    if train_split == "valid":
        files["train"] = files["valid"]
        logger.warning("using %s as a stand-in for train.txt", files["valid"])
    elif not files["train"].is_file():
        raise UsageError(
            f"train.txt is missing from {directory}; add it (--source=wikitext-2 downloads "
            f"WikiText-2), or train on valid.txt as an offline stand-in with --train_split=valid "
            f"(PARTF_TRAIN_SPLIT=valid for create_tfrecords.sh)"
        )
    for split in ("valid", "test"):
        if not files[split].is_file():
            raise UsageError(f"{split}.txt is missing from {directory}; add it and retry")
    return files


def split_text_file(
    text_file: str | os.PathLike,
    out_dir: str | os.PathLike,
    holdout_fraction: float = 0.05,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Splits a UTF-8 text file of at least 3 lines into out_dir/{train,valid,test}.txt
    (returned as {split: path}): the last `holdout_fraction` (in (0, 0.5)) of the lines
    to test, the same fraction before them to valid (at least one line each), the rest
    to train. Streams the file twice, so its size is not limited by memory.

    Raises:
        UsageError: a bad fraction, a missing input, or split files in the way.
        DataError: the file has fewer than 3 lines."""
    text_file, out_dir = Path(text_file), Path(out_dir)
    if not 0.0 < holdout_fraction < 0.5:
        raise UsageError(f"holdout fraction must be in (0, 0.5), got {holdout_fraction}")
    if not text_file.is_file():
        raise UsageError(f"text file {text_file} does not exist; check the path")
    outputs = {split: out_dir / name for split, name in zip(SPLITS, SPLIT_FILES, strict=True)}
    in_the_way = [str(p) for p in outputs.values() if p.exists()]
    if in_the_way and not overwrite:
        raise UsageError(
            f"{', '.join(in_the_way)} already exist; pass --overwrite to replace them, "
            f"or choose another --text_file folder"
        )
    with open(text_file, "rb") as f:
        num_lines = sum(1 for _ in f)
    if num_lines < 3:
        raise DataError(
            f"{text_file} has {num_lines} line(s), too few to split into train, valid and "
            f"test; give a longer file, or a folder with the three files"
        )
    num_held = max(1, int(num_lines * holdout_fraction))
    num_train = num_lines - 2 * num_held
    if num_train < 1:
        raise DataError(f"{text_file} is too short to keep any lines for train; give more text")
    bounds = {"train": num_train, "valid": num_train + num_held, "test": num_lines}
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = {split: path.with_name(f".{path.name}.part") for split, path in outputs.items()}
    try:
        with open(text_file, "rb") as f:
            line_no = 0
            for split in SPLITS:
                with open(parts[split], "wb") as out:
                    while line_no < bounds[split]:
                        out.write(f.readline())
                        line_no += 1
        for split in SPLITS:
            os.replace(parts[split], outputs[split])
    finally:
        for part in parts.values():
            part.unlink(missing_ok=True)
    logger.info(
        "split %s into %d train, %d valid and %d test lines in %s",
        text_file,
        num_train,
        num_held,
        num_held,
        out_dir,
    )
    return outputs
