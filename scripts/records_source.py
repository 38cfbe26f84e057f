"""Checks that existing records were built from the text DATA_DIR names.

base_model.sh and create_tfrecords.sh reuse records that exist. Without this check a
DATA_DIR that names other text (a typo, another corpus) would be ignored and the run would
train on whatever was built before. Each records folder's metadata.json holds the sha256
of the text file it was built from (`source_sha256`), so the check compares contents, not
paths: the same text in another folder passes.

Usage (exit 0 when the records fit or cannot be told apart, 2 with one line on stderr
when they were built from other text):

    python scripts/records_source.py PROG DATA_DIR TRAIN_SPLIT TRAIN_DIR VALID_DIR TEST_DIR

Standard library only: it runs before anything imports TensorFlow.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

SPLITS = ("train", "valid", "test")


def expected_texts(data_dir: Path, train_split: str) -> dict[str, Path]:
    """The text file each split's records are built from, for this DATA_DIR.

    Mirrors create_tfrecords.sh: a folder is read in place; a zip is unpacked into
    data/wikitext-2; a single text file is split into data/<its name without suffix>.
    """
    if data_dir.is_dir():
        folder = data_dir
    elif data_dir.suffix == ".zip":
        folder = Path("data/wikitext-2")
    else:
        folder = Path("data") / data_dir.stem
    texts = {split: folder / f"{split}.txt" for split in SPLITS}
    texts["train"] = folder / f"{train_split}.txt"
    return texts


def sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def mismatch(prog: str, data_dir: str, train_split: str, records: dict[str, Path]) -> str | None:
    """The error line for the first records folder not built from DATA_DIR, or None."""
    fix = f"rebuild the records from it: DATA_DIR={data_dir} ./create_tfrecords.sh --overwrite"
    texts = expected_texts(Path(data_dir), train_split)
    for split in SPLITS:
        meta_file = records[split] / "metadata.json"
        try:
            meta = json.loads(meta_file.read_text())
        except (OSError, ValueError):
            continue  # no metadata (the original project's records): nothing to compare
        built_from = meta.get("source_sha256")
        if not isinstance(built_from, str):
            continue
        text = texts[split]
        fallback = split == "train" and train_split == "train" and text.is_file()
        if fallback and meta.get("source_file") == "valid.txt":
            # The fallback's records (a folder without train.txt) met a folder that has
            # one: the commonest case, named as such.
            return (
                f"{prog}: error: {records[split]} was built from valid.txt (a folder without "
                f"train.txt) but {data_dir} has train.txt; {fix}"
            )
        if not text.is_file():
            if Path(data_dir).is_dir():
                continue  # a folder missing a split: building from it names the file
            return (
                f"{prog}: error: {records[split]} was not built from DATA_DIR={data_dir} "
                f"({text} does not exist); {fix}"
            )
        if sha256(text) != built_from:
            return (
                f"{prog}: error: {records[split]} was built from other text than "
                f"DATA_DIR={data_dir} (its {meta.get('source_file') or 'text'} has sha256 "
                f"{built_from[:12]}, {text} {sha256(text)[:12]}); {fix}"
            )
    return None


def main(argv: list[str]) -> int:
    """Command line: see the module docstring."""
    if len(argv) != 6:
        print(
            "usage: records_source.py PROG DATA_DIR TRAIN_SPLIT TRAIN_DIR VALID_DIR TEST_DIR",
            file=sys.stderr,
        )
        return 2
    prog, data_dir, train_split, *dirs = argv
    line = mismatch(prog, data_dir, train_split, dict(zip(SPLITS, map(Path, dirs), strict=True)))
    if line:
        print(line, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
