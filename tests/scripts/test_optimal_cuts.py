"""Tests for scripts/optimal_cuts.py, run as a user runs it: a subprocess."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.scripts import load_script
from tests.shared_data import wikitext2_file

optimal_cutoffs = load_script("cutoffs").optimal_cutoffs
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "optimal_cuts.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _parse_flags(stdout: str) -> tuple[int, ...]:
    line = stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"(--cutoffs=\d+)( --cutoffs=\d+)*", line), line
    return tuple(int(flag.split("=")[1]) for flag in line.split())


def test_counts_file(tmp_path):
    rng = np.random.default_rng(0)
    counts = rng.zipf(1.4, 300)
    path = tmp_path / "counts.txt"
    path.write_text("\n".join(str(c) for c in counts) + "\n")
    done = _run(f"--filename={path}", "--clusters=3")
    assert done.returncode == 0, done.stderr
    assert _parse_flags(done.stdout) == optimal_cutoffs(counts, 3).cutoffs
    assert "cost" in done.stderr


def test_token_count_pairs_keep_their_order(tmp_path):
    counts = [5, 90, 40, 1, 70, 3, 2, 60, 1, 1]
    path = tmp_path / "pairs.txt"
    path.write_text("".join(f"tok{i} {c}\n" for i, c in enumerate(counts)))
    done = _run(f"--filename={path}", "--clusters=2", "--nosort", "--noverbose")
    assert done.returncode == 0, done.stderr
    assert _parse_flags(done.stdout) == optimal_cutoffs(counts, 2, sort=False).cutoffs


def test_text_and_sentencepiece(original_artifacts, tmp_path):
    import sentencepiece

    model = original_artifacts / "tokenizer" / "wiki2_12k.model"
    # Cutoffs come from the training text's frequencies, so train.txt; its first 4,000
    # lines (about valid.txt's size), since the script and this test both tokenize it
    # and all 10 MB would take most of a minute on a busy CPU.
    text = tmp_path / "train_head.txt"
    with open(wikitext2_file("train.txt"), encoding="utf-8") as f:
        text.write_text("".join(itertools.islice(f, 4000)), encoding="utf-8")
    done = _run(f"--text={text}", f"--sp_model={model}", "--clusters=3")
    assert done.returncode == 0, done.stderr
    processor = sentencepiece.SentencePieceProcessor(model_file=str(model))
    ids = np.concatenate(
        [np.asarray(x, dtype=np.int64) for x in processor.encode(text.read_text().splitlines())]
    )
    counts = np.bincount(ids, minlength=processor.get_piece_size())
    assert _parse_flags(done.stdout) == optimal_cutoffs(counts, 3).cutoffs


def test_original_records(original_artifacts):
    import tensorflow as tf

    # valid, not train: the script reads either the same way, and this test counts every
    # target itself in a Python loop, which over train's 2,827 records (not 304) is slow.
    records = original_artifacts / "tfrecords_valid"
    model = original_artifacts / "tokenizer" / "wiki2_12k.model"
    done = _run(f"--records={records}", f"--sp_model={model}", "--clusters=3")
    assert done.returncode == 0, done.stderr
    # Count the targets independently: each record is int32 [32, 33], targets are [:, 1:].
    counts = np.zeros(12000, dtype=np.int64)
    for raw in tf.data.TFRecordDataset(sorted(str(p) for p in records.glob("*.tfrecords"))):
        example = tf.train.Example.FromString(raw.numpy())
        tensor = tf.io.parse_tensor(example.features.feature["batch"].bytes_list.value[0], tf.int32)
        counts += np.bincount(tensor.numpy()[:, 1:].ravel(), minlength=12000)
    assert counts.sum() == 304 * 32 * 32
    cutoffs = _parse_flags(done.stdout)
    assert cutoffs == optimal_cutoffs(counts, 3).cutoffs
    assert "vocabulary of 12000" in done.stderr


@pytest.mark.parametrize(
    ("content", "args", "message"),
    [
        (None, ["--clusters=2"], "does not exist"),
        ("\n\n", ["--clusters=2"], "empty"),
        ("3\n2\n1\n", ["--clusters=3"], "num_clusters"),
        ("3\n-2\n1\n", ["--clusters=2"], ">= 0"),
    ],
)
def test_bad_input_gives_one_line_error(tmp_path, content, args, message):
    path = tmp_path / "counts.txt"
    if content is not None:
        path.write_text(content)
    done = _run(f"--filename={path}", *args)
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("optimal_cuts.py: error:") and message in lines[0]


def test_no_input_is_an_error():
    done = _run("--clusters=2")
    assert done.returncode != 0
    assert "give exactly one of --filename, --records or --text" in done.stderr
