"""Every bad input of issue 8 against the three commands: one line naming the problem and
the fix, exit 2 for usage and 1 at run time, no traceback without --verbose, nothing
half written. docs/robustness.md lists these cases with their messages.

The commands run in-process (`main(argv)` / `run(argv)`): a subprocess costs seconds of
TensorFlow import each. One module fixture builds tiny records (vocabulary 100, batches
3 x 10) and one two-step training run that the checkpoint cases reuse.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

from partf.cli import build_data, generate
from partf.cli import train as train_cli
from tests.data.helpers import wiki_lines, write_corpus, write_text

TINY_MODEL = [
    "--d_model=16",
    "--num_heads=2",
    "--d_ffn=32",
    "--num_layers=2",
    "--mem_len=4",
    "--cutoffs=20",
]


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_error_line(capsys, prog: str) -> str:
    """The single `<prog>: error:` line; fails on a traceback or on several lines."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith(f"{prog}: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> dict:
    """Corpus, tokenizer `tok/tiny`, records rec_{train,valid,test} (3 x 10), records
    of another shape (4 x 10) and of another tokenizer, bad text files, and a finished
    two-step run `runs/checkpoints/done`."""
    root = tmp_path_factory.mktemp("bad_input")
    corpus = write_corpus(root / "corpus", train_lines=600, eval_lines=200)
    common = ["--vocab_size=100", "--batch_size=3", "--seq_len=10"]
    assert (
        build_data.run(
            [
                f"--text_file={corpus}",
                "--train_tokenizer",
                f"--sp_model_prefix={root / 'tok' / 'tiny'}",
                f"--tfrecords_directory={root / 'rec'}",
                *common,
            ]
        )
        == 0
    )
    assert (
        build_data.run(
            [
                f"--text_file={corpus / 'valid.txt'}",
                f"--sp_model_prefix={root / 'tok' / 'tiny'}",
                f"--tfrecords_directory={root / 'rec4_valid'}",
                "--batch_size=4",
                "--seq_len=10",
            ]
        )
        == 0
    )
    assert (
        build_data.run(
            [
                f"--text_file={corpus / 'test.txt'}",
                "--train_tokenizer",
                "--vocab_size=90",
                f"--sp_model_prefix={root / 'tok' / 'other'}",
                f"--tfrecords_directory={root / 'rec_other'}",
                "--batch_size=3",
                "--seq_len=10",
            ]
        )
        == 0
    )
    (root / "text").mkdir()
    (root / "text" / "empty.txt").write_bytes(b"")
    (root / "text" / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (root / "text" / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (root / "text" / "short.txt").write_text("the war\n", encoding="utf-8")
    write_text(root / "text" / "small.txt", wiki_lines(40, seed=3))
    (root / "a_file").write_text("not a folder\n")
    assert train_cli.main(train_argv(root, "done", root / "runs")) == 0
    saved = root / "runs" / "checkpoints" / "done" / "done.keras"
    (root / "broken.keras").write_bytes(saved.read_bytes()[:500])
    return {"root": root, "corpus": corpus}


def train_argv(root: Path, name: str, out: Path, *extra: str) -> list[str]:
    """A two-step run of the tiny model; `extra` flags replace the model flags they name."""
    given = {flag.split("=")[0] for flag in extra}
    model = [flag for flag in TINY_MODEL if flag.split("=")[0] not in given]
    return [
        f"--train_directory={root / 'rec_train'}",
        f"--valid_directory={root / 'rec_valid'}",
        "--test_directory=",
        f"--sp_model_prefix={root / 'tok' / 'tiny'}",
        *model,
        "--epochs=1",
        "--max_steps=2",
        "--nojit_compile",
        "--steps_per_execution=1",
        "--lr_schedule=constant",
        "--warmup_steps=0",
        f"--output_dir={out}",
        f"--model_name={name}",
        *extra,
    ]


# --------------------------------------------------------------------- build
# (extra flags, exit code, message pattern); {root} is the workspace.
BUILD_CASES = {
    "nonexistent_path": (["--text_file={root}/missing.txt"], 2, r"does not exist; give a"),
    "empty_text": (["--text_file={root}/text/empty.txt"], 1, r"is empty"),
    "binary_text": (["--text_file={root}/text/binary.txt"], 1, r"is not UTF-8"),
    "non_utf8_text": (["--text_file={root}/text/latin1.txt"], 1, r"line 1 of .* is not UTF-8"),
    "shorter_than_one_batch": (
        ["--text_file={root}/text/short.txt"],
        1,
        r"fewer than one batch needs",
    ),
    "vocab_too_large": (
        ["--text_file={root}/text/small.txt", "--train_tokenizer", "--vocab_size=5000"],
        1,
        r"--vocab_size=5000 is more than .*pass --vocab_size=\d+ or less",
    ),
    "output_not_writable": (
        ["--text_file={root}/corpus/valid.txt", "--tfrecords_directory={root}/a_file/rec"],
        1,
        r"a_file.*check the path",
    ),
    "mask_symbol_missing_from_the_tokenizer": (
        ["--text_file={root}/corpus/valid.txt", "--mask_symbol"],
        2,
        r"tiny.model has no \[MASK\] symbol; add --train_tokenizer to train one with it",
    ),
}


@pytest.mark.parametrize("case", sorted(BUILD_CASES))
def test_build_data_bad_input(ws, tmp_path, monkeypatch, capsys, case):
    extra, code, pattern = BUILD_CASES[case]
    root = ws["root"]
    monkeypatch.chdir(tmp_path)
    argv = [
        f"--sp_model_prefix={root / 'tok' / 'tiny'}",
        f"--tfrecords_directory={tmp_path / 'out' / 'rec'}",
        "--batch_size=3",
        "--seq_len=10",
        *[e.format(root=root) for e in extra],
    ]
    if "--train_tokenizer" in extra:
        argv.append(f"--sp_model_prefix={tmp_path / 'tok' / 'new'}")
    before, root_before = listing(tmp_path), listing(root)
    assert build_data.run(argv) == code
    assert re.search(pattern, one_error_line(capsys, "partf-build-data"))
    assert listing(tmp_path) == before and listing(root) == root_before


def test_build_data_disk_full_keeps_nothing(ws, tmp_path, monkeypatch, capsys):
    """ENOSPC while writing the records: exit 1, and no records folder, not even staged."""
    import partf.data.tfrecords as tfrecords

    def full(directory, meta):
        raise OSError(errno.ENOSPC, "No space left on device", str(directory))

    monkeypatch.setattr(tfrecords, "write_metadata", full)
    monkeypatch.chdir(tmp_path)
    root = ws["root"]
    argv = [
        f"--text_file={ws['corpus'] / 'valid.txt'}",
        f"--sp_model_prefix={root / 'tok' / 'tiny'}",
        f"--tfrecords_directory={tmp_path / 'rec'}",
        "--batch_size=3",
        "--seq_len=10",
    ]
    assert build_data.run(argv) == 1
    assert "no space left on the device" in one_error_line(capsys, "partf-build-data")
    assert listing(tmp_path) == []


def test_build_data_verbose_shows_the_traceback(ws, tmp_path, capsys):
    argv = [f"--text_file={ws['root'] / 'text' / 'empty.txt'}", "--verbose"]
    argv += [f"--sp_model_prefix={ws['root'] / 'tok' / 'tiny'}"]
    argv += [f"--tfrecords_directory={tmp_path / 'rec'}"]
    assert build_data.run(argv) == 1
    assert "Traceback" in capsys.readouterr().err


# --------------------------------------------------------------------- train
TRAIN_CASES = {
    "nonexistent_path": (
        ["--train_directory={root}/missing"],
        2,
        r"train records .*missing do not exist; build them",
    ),
    "cutoffs_unsorted": (["--cutoffs=40,20"], 2, r"cutoffs must be sorted and unique"),
    "cutoffs_duplicated": (["--cutoffs=20,20"], 2, r"cutoffs must be sorted and unique"),
    "cutoffs_at_vocab_size": (["--cutoffs=20,100"], 2, r"cutoffs must be below vocab_size=100"),
    "cutoffs_above_vocab_size": (["--cutoffs=20,500"], 2, r"cutoffs must be below vocab_size"),
    "cutoffs_empty_cluster": (["--cutoffs=0,20"], 2, r"cutoffs must be positive"),
    "d_model_not_divisible": (["--d_model=18", "--num_heads=4"], 2, r"not divisible by"),
    "negative_mem_len": (["--mem_len=-1"], 2, r"mem_len must be >= 0"),
    "batch_size_differs": (
        ["--valid_directory={root}/rec4_valid"],
        2,
        r"valid records have batches of 4x10 but the training records 3x10",
    ),
    "other_tokenizer": (
        ["--sp_model_prefix={root}/tok/other"],
        1,
        r"is not the one the records .* were built with",
    ),
    "unknown_attention": (["--attention=nope"], 2, r"unknown attention 'nope'; valid names"),
    "unknown_candidate": (["--candidates=attention,nope"], 2, r"unknown candidate 'nope'"),
    "lara_in_causal_model": (["--attention=lara"], 2, r"non-causal only"),
    "invalid_eval_mode": (["--eval_mode=best"], 2, r"unknown eval_mode 'best'; choose"),
    "learned_positions_past_their_table": (
        ["--attention=softmax", "--position=learned", "--max_positions=8"],
        2,
        r"learned positions number 8 tokens .* set max_positions >= \d+",
    ),
    "mlm_without_a_mask_symbol": (
        ["--objective=mlm", "--architecture=A D", "--attention=softmax"],
        2,
        r"--objective=mlm needs a \[MASK\] token .*; rebuild the records with partf-build-data "
        r"--train_tokenizer --mask_symbol",
    ),
    "unknown_objective": (["--objective=bert"], 2, r"--objective.*invalid choice"),
    "output_not_writable": (
        ["--output_dir={root}/a_file/out"],
        2,
        r"cannot write under --output_dir .*; choose a writable folder",
    ),
}


@pytest.mark.parametrize("case", sorted(TRAIN_CASES))
def test_train_bad_input(ws, tmp_path, capsys, case):
    extra, code, pattern = TRAIN_CASES[case]
    root = ws["root"]
    argv = train_argv(root, "bad", tmp_path, *[e.format(root=root) for e in extra])
    before = listing(root)
    assert train_cli.main(argv) == code
    assert re.search(pattern, one_error_line(capsys, "partf-train"))
    assert listing(tmp_path) == [] and listing(root) == before


def test_train_corrupt_records(ws, tmp_path, capsys):
    import shutil

    records = tmp_path / "records"
    shutil.copytree(ws["root"] / "rec_train", records)
    shard = next(records.glob("*.tfrecords"))
    shard.write_bytes(shard.read_bytes()[:-50])  # truncated: the last record is cut
    out = tmp_path / "out"
    argv = train_argv(ws["root"], "bad", out, f"--train_directory={records}")
    assert train_cli.main(argv) == 1
    assert re.search(
        r"records in .* are truncated or corrupt .*rebuild them",
        one_error_line(capsys, "partf-train"),
    )
    assert not out.exists()
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF  # a flipped bit: the record's CRC no longer matches
    shard.write_bytes(bytes(data))
    assert train_cli.main(argv) == 1
    assert "truncated or corrupt" in one_error_line(capsys, "partf-train")


def test_train_checkpoint_of_another_configuration(ws, capsys):
    runs = ws["root"] / "runs"
    before = listing(runs)
    argv = train_argv(ws["root"], "done", runs, "--d_model=32")
    assert train_cli.main(argv) == 2
    line = one_error_line(capsys, "partf-train")
    assert "holds a run with another configuration (d_model: 16 -> 32" in line
    assert "pass --overwrite to start again" in line
    assert listing(runs) == before


def test_train_unreadable_checkpoints(ws, tmp_path, capsys):
    import shutil

    runs = tmp_path / "runs"
    shutil.copytree(ws["root"] / "runs", runs)
    for ckpt in (runs / "checkpoints" / "done").glob("ckpt-*.npz"):
        ckpt.write_bytes(ckpt.read_bytes()[:200])
    before = listing(runs)
    assert train_cli.main(train_argv(ws["root"], "done", runs)) == 1
    assert re.search(
        r"no checkpoint in .* can be read; move the folder away or pass --overwrite",
        one_error_line(capsys, "partf-train"),
    )
    assert listing(runs) == before


def test_train_disk_full_leaves_no_partial_checkpoint(ws, tmp_path, monkeypatch, capsys):
    """ENOSPC half-way through the checkpoint: exit 1, no ckpt-*.npz and no temp file."""
    import partf.atomic as atomic

    def half_then_full(f, data):
        f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "_write_all", half_then_full)
    assert train_cli.main(train_argv(ws["root"], "full", tmp_path)) == 1
    line = one_error_line(capsys, "partf-train")
    assert "no space left on the device" in line and "run the same command again" in line
    folder = tmp_path / "checkpoints" / "full"
    assert [p.name for p in folder.iterdir()] == [], "no checkpoint, config or temp file"


def test_train_verbose_shows_the_traceback(ws, tmp_path, capsys):
    argv = train_argv(ws["root"], "bad", tmp_path, "--attention=lara", "--verbose")
    assert train_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("partf-train: error:")


# ------------------------------------------------------------------ generate
GENERATE_CASES = {
    "nonexistent_path": (["--model={root}/missing.keras"], 2, r"missing\.keras"),
    "corrupt_model_file": (
        ["--model={root}/broken.keras"],
        1,
        r"broken\.keras: not a readable \.keras file \(truncated or corrupt\)",
    ),
    "other_tokenizer": (
        ["--model={root}/runs/checkpoints/done", "--sp_model={root}/tok/other.model"],
        2,
        r"tokenizer",
    ),
}


@pytest.mark.parametrize("case", sorted(GENERATE_CASES))
def test_generate_bad_input(ws, capsys, case):
    extra, code, pattern = GENERATE_CASES[case]
    root = ws["root"]
    argv = [*[e.format(root=root) for e in extra], "--prompt=the war", "--max_tokens=2"]
    if not any(a.startswith("--sp_model") for a in argv):
        argv.append(f"--sp_model={root / 'tok' / 'tiny.model'}")
    before = listing(root)
    assert generate.run(argv) == code
    assert re.search(pattern, one_error_line(capsys, "partf-generate"))
    assert listing(root) == before


# ----------------------------------------------------------------- downloads
def test_download_cut_mid_stream_leaves_nothing(tmp_path, monkeypatch):
    """A connection dropped half-way: no `dest`, no `.part`; the next try is complete."""
    import io
    import urllib.request

    from partf.data import download

    payload = bytes(range(256)) * 8192  # 2 MiB: several chunks

    class Dropped(io.BytesIO):
        headers: dict = {}

        def read(self, size=-1):
            if self.tell() >= len(payload) // 2:
                raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
            return super().read(size)

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: Dropped(payload))
    dest = tmp_path / "archive.zip"
    with pytest.raises(OSError):
        download("https://example.invalid/archive.zip", dest)
    assert listing(tmp_path) == []

    class Whole(io.BytesIO):
        headers: dict = {}

    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: Whole(payload))
    download("https://example.invalid/archive.zip", dest)
    assert dest.read_bytes() == payload and listing(tmp_path) == ["archive.zip"]


def test_nothing_downloaded_or_loaded_is_executed_or_unpickled():
    """The modules that read downloads, the shipped WikiText-2, records and checkpoints never
    unpickle or run code, and never let an archive name the paths it writes (extractall)."""
    import inspect

    import partf.data.download
    import partf.data.shipped
    import partf.data.tfrecords
    import partf.training.checkpoint

    forbidden = re.compile(
        r"\bpickle\b|allow_pickle\s*=\s*True|\beval\(|\bexec\(|subprocess|extractall|os\.system"
    )
    for module in (
        partf.data.download,
        partf.data.shipped,
        partf.data.tfrecords,
        partf.training.checkpoint,
    ):
        code = "\n".join(
            line
            for line in inspect.getsource(module).splitlines()
            if not line.strip().startswith("#")
        )
        code = re.sub(r'""".*?"""', "", code, flags=re.S)  # docstrings may name them
        assert not forbidden.search(code), f"{module.__name__}: {forbidden.search(code)}"
