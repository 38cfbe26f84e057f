"""partf-build-data: the original flags, one-line errors, exit codes, nothing half written."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from partf.cli.build_data import run
from tests.data.helpers import wiki_lines, write_corpus, write_text


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def error_line(capsys) -> str:
    """The one error line; fails if there is not exactly one."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("partf-build-data: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A corpus, and a first successful build from it (tokenizer trained)."""
    root = tmp_path_factory.mktemp("cli")
    write_corpus(root / "corpus")
    return root


@pytest.fixture(scope="module")
def first_build(workspace) -> dict:
    argv = [
        f"--text_file={workspace / 'corpus'}",
        "--from_directory",
        "--train_tokenizer",
        "--vocab_size=100",
        f"--sp_model_prefix={workspace / 'tok' / 'tiny'}",
        "--batch_size=3",
        "--seq_len=10",
        "--shards=2",
        f"--tfrecords_directory={workspace / 'rec'}",
    ]
    return {"argv": argv, "rc": run(argv)}


def test_builds_folder_with_original_flags(workspace, first_build):
    from partf.data import load_tfrecords, read_metadata

    assert first_build["rc"] == 0
    model = workspace / "tok" / "tiny.model"
    assert model.is_file() and (workspace / "tok" / "tiny.vocab").is_file()
    for split in ("train", "valid", "test"):
        meta = read_metadata(workspace / f"rec_{split}")
        assert (meta.batch_size, meta.seq_len, len(meta.shards)) == (3, 10, 2)
        assert meta.vocab_size == 100 and meta.source_file == f"{split}.txt"
        inputs, targets = next(iter(load_tfrecords(workspace / f"rec_{split}", sp_model=model)))
        np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])


def test_existing_outputs_need_overwrite(workspace, first_build, capsys):
    before = {p: p.stat().st_mtime_ns for p in (workspace / "rec_valid").iterdir()}
    assert run(first_build["argv"]) == 2
    assert "--overwrite" in error_line(capsys)
    assert {p: p.stat().st_mtime_ns for p in (workspace / "rec_valid").iterdir()} == before


def test_single_file_and_defaults(workspace, first_build, tmp_path, monkeypatch):
    from partf.data import read_metadata

    monkeypatch.chdir(tmp_path)
    tok = f"--sp_model_prefix={workspace / 'tok' / 'tiny'}"
    # One file -> one folder, the existing tokenizer, the original's default folder name.
    assert run([f"--text_file={workspace / 'corpus' / 'valid.txt'}", tok, "--batch_size=2"]) == 0
    meta = read_metadata(tmp_path / "data" / "wikitext2_bsz2_seqlen32_tfrecords")
    assert meta.source_file == "valid.txt" and meta.batch_size == 2
    # A folder as --text_file implies --from_directory; absl's --nolowercase is accepted.
    args = [f"--text_file={workspace / 'corpus'}", tok, "--seq_len=8", "--nolowercase"]
    assert run(args) == 0
    assert (tmp_path / "data" / "wikitext2_bsz32_seqlen8_tfrecords_test").is_dir()


def test_source_text_file_is_split_and_built(workspace, tmp_path, monkeypatch):
    from partf.data import read_metadata

    monkeypatch.chdir(tmp_path)
    own = write_text(tmp_path / "mine.txt", wiki_lines(2000, seed=5))
    argv = [f"--source={own}", f"--sp_model_prefix={workspace / 'tok' / 'tiny'}", "--seq_len=8"]
    assert run(argv) == 0
    assert sorted(p.name for p in (tmp_path / "data" / "mine").iterdir()) == [
        "test.txt",
        "train.txt",
        "valid.txt",
    ]
    meta = read_metadata(tmp_path / "data" / "wikitext2_bsz32_seqlen8_tfrecords_valid")
    assert meta.num_lines == 100  # 5% of 2000 lines


def test_train_split_stand_in(workspace, tmp_path, capsys):
    from partf.data import read_metadata

    corpus = tmp_path / "no_train"
    shutil.copytree(workspace / "corpus", corpus)
    (corpus / "train.txt").unlink()
    common = [
        f"--text_file={corpus}",
        f"--sp_model_prefix={tmp_path / 'tok'}",
        "--train_tokenizer",
        "--vocab_size=90",
        f"--tfrecords_directory={tmp_path / 'rec'}",
    ]
    assert run(common) == 2
    message = error_line(capsys)
    assert "train.txt is missing" in message and "--train_split=valid" in message
    assert not (tmp_path / "rec_train").exists() and not (tmp_path / "tok.model").exists()
    assert run([*common, "--train_split=valid"]) == 0
    assert read_metadata(tmp_path / "rec_train").source_file == "valid.txt"


def bad_text_cases(root: Path) -> dict[str, Path]:
    (root / "empty.txt").write_bytes(b"")
    (root / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (root / "short.txt").write_text("the war\n", encoding="utf-8")
    return {n: root / f"{n}.txt" for n in ("empty", "latin1", "short")}


@pytest.mark.parametrize(
    "extra,code,match",
    [
        (["--batch_size=0"], 2, "--batch_size must be a positive integer"),
        (["--seq_len=-4"], 2, "--seq_len must be a positive integer"),
        (["--shards=0"], 2, "--shards must be a positive integer"),
        (["--vocab_size=2", "--train_tokenizer"], 2, "--vocab_size must be at least 5"),
        (["--batch_size=abc"], 2, "batch_size"),
        (["--no_such_flag"], 2, "no_such_flag"),
        (["--text_file={root}/missing.txt"], 2, "does not exist"),
        (["--text_file={root}/empty.txt"], 1, "is empty"),
        (["--text_file={root}/latin1.txt"], 1, "line 1 of .* is not UTF-8"),
        (["--text_file={root}/short.txt"], 1, "fewer than one batch needs"),
        (["--text_file={root}/short.txt", "--sp_model_prefix={root}/none"], 2, "--train_tokenizer"),
        (
            ["--text_file={corpus}/valid.txt", "--train_tokenizer", "--vocab_size=5000"],
            1,
            r"--vocab_size=5000 is more than .*pass --vocab_size=\d+ or less",
        ),
        (["--source={root}/nowhere"], 2, "is not 'wikitext-2', a URL"),
    ],
)
def test_errors(workspace, tmp_path, monkeypatch, capsys, extra, code, match):
    monkeypatch.chdir(tmp_path)
    bad_text_cases(tmp_path)
    before = listing(tmp_path)
    argv = [
        f"--sp_model_prefix={workspace / 'tok' / 'tiny'}",
        f"--text_file={workspace / 'corpus' / 'valid.txt'}",
        f"--tfrecords_directory={tmp_path / 'out' / 'rec'}",
        *[e.format(root=tmp_path, corpus=workspace / "corpus") for e in extra],
    ]
    if "--train_tokenizer" in extra:
        argv.append(f"--sp_model_prefix={tmp_path / 'tok' / 'new'}")
    assert run(argv) == code
    assert re.search(match, error_line(capsys))
    assert listing(tmp_path) == before  # nothing written, no folders made


def test_source_checksum_mismatch_and_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    archive = tmp_path / "fake-wikitext-2-v1.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for split in ("train", "valid", "test"):
            zf.writestr(f"wikitext-2/wiki.{split}.tokens", " = Not WikiText = \n")
    assert run([f"--source={archive.as_uri()}", "--train_tokenizer"]) == 1
    assert "checksum mismatch in train.txt, valid.txt, test.txt (deleted)" in error_line(capsys)
    assert listing(tmp_path) == [archive.name]  # no data/wikitext-2, not even empty
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/wikitext-2-v1.zip"
    assert run([f"--source={url}", "--train_tokenizer"]) == 1
    assert "no network access" in error_line(capsys)


def test_a_damaged_copy_of_wikitext2_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """--source=wikitext-2 unpacks the copy partf ships; a truncated one stops the build
    with one line naming it and the fix, exit 1, before anything is written."""
    from partf.data import shipped

    archive = tmp_path / "wikitext-2.tar.xz"
    archive.write_bytes(shipped.SHIPPED_WIKITEXT2.read_bytes()[:1_000_000])
    monkeypatch.setattr(shipped, "SHIPPED_WIKITEXT2", archive)
    monkeypatch.chdir(tmp_path)
    assert run(["--source=wikitext-2", "--train_tokenizer"]) == 1
    line = error_line(capsys)
    assert line.startswith("partf-build-data: error: wikitext-2.tar.xz is corrupt or truncated")
    assert "restore it with " in line and "DATA_DIR" in line
    assert listing(tmp_path) == [archive.name]  # no data/, nothing half unpacked


def test_verbose_shows_traceback(tmp_path, capsys):
    (tmp_path / "empty.txt").write_bytes(b"")
    argv = [f"--text_file={tmp_path / 'empty.txt'}", "--train_tokenizer", "--verbose"]
    argv.append(f"--sp_model_prefix={tmp_path / 'tok'}")
    assert run(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "is empty" in err


def test_help(capsys):
    assert run(["--help"]) == 0
    out = capsys.readouterr().out
    flags = "text_file vocab_size sp_model_prefix shards batch_size seq_len tfrecords_directory"
    for flag in flags.split():
        assert f"--{flag} " in out
    for flag in ["from_directory", "train_tokenizer", "lowercase", "overwrite"]:
        assert f"--{flag} [BOOL]" in out  # absl booleans: --flag, --noflag, --flag=false
    # Each task adds its own flags (partf.tasks), the default records task's first.
    assert "--task {text," in out and "--mqar_pairs MQAR_PAIRS" in out
    assert "[data/tokenizer/wiki2_12k]" in " ".join(out.split())  # its default


def test_absl_spellings_of_booleans_still_parse():
    from partf.cli.build_data import build_parser

    args = build_parser().parse_args(["--nolowercase", "--overwrite=false", "--train_tokenizer"])
    assert (args.lowercase, args.overwrite, args.train_tokenizer) == (False, False, True)
    assert build_parser().parse_args(["--lowercase=0"]).lowercase is False


def test_process_exit_code_and_one_line(tmp_path):
    """As a process: usage errors are answered before TensorFlow is even imported."""
    result = subprocess.run(
        [sys.executable, "-m", "partf.cli.build_data", "--batch_size=0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "partf-build-data: error: --batch_size must be a positive integer, got 0; e.g. "
        "--batch_size=32"
    ]
    assert list(tmp_path.iterdir()) == []
