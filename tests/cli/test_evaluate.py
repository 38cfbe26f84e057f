"""partf-evaluate: the trainer's figures again from the saved model, on records and on the
raw text; eval modes; an MQAR split's accuracy by distance; one-line errors for bad input."""

from __future__ import annotations

import json
import math
import re
import shutil

import numpy as np
import pytest

from partf.cli.evaluate import run
from tests.data.helpers import wiki_lines, write_text

BATCH, SEQ = 4, 16
TINY = dict(d_model=16, num_heads=2, d_ffn=32, num_layers=2, mem_len=8, cutoffs=(40,))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A tokenizer, records of three splits, and a short partf-train run on them whose
    results.json holds the trainer's own test figures."""
    from partf.data import build_data
    from partf.training.config import TrainConfig
    from partf.training.trainer import train

    root = tmp_path_factory.mktemp("evaluate")
    texts = {
        name: write_text(root / "text" / f"{name}.txt", wiki_lines(lines, seed=seed))
        for name, lines, seed in (("train", 800, 0), ("valid", 120, 1), ("test", 160, 2))
    }
    prefix = root / "tokenizer" / "tiny"
    records = {name: root / f"records_{name}" for name in texts}
    build_data(
        texts, records, prefix, train_tokenizer_on=texts["train"], vocab_size=120,
        batch_size=BATCH, seq_len=SEQ,
    )  # fmt: skip
    config = TrainConfig(
        train_directory=str(records["train"]),
        valid_directory="",
        test_directory=str(records["test"]),
        sp_model_prefix=str(prefix),
        model_name="tiny",
        output_dir=str(root / "run"),
        max_steps=12,
        warmup_steps=2,
        max_lr=3e-3,
        jit_compile=False,
        steps_per_execution=4,
        model={**TINY, "candidates": ("linear", "dense", "identity"), "eval_mode": "expected"},
    )
    results = train(config)
    return {
        "root": root,
        "run_dir": root / "run" / "checkpoints" / "tiny",
        "records": records,
        "texts": texts,
        "prefix": prefix,
        "results": results,
    }


def evaluate(capsys, *argv: str) -> dict:
    status = run([*argv, "--json", "--nojit_compile"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return json.loads(captured.out.strip().splitlines()[-1])


FIGURES = ("perplexity", "perplexity_original", "word_perplexity", "bits_per_character")


def test_records_give_the_trainers_figures(trained, capsys):
    want = trained["results"]["test"]
    got = evaluate(
        capsys, "--model", str(trained["run_dir"]), "--records", str(trained["records"]["test"])
    )
    assert got["eval_mode"] == "expected"
    assert (got["num_tokens"], got["num_batches"]) == (want["num_tokens"], want["num_batches"])
    for name in FIGURES:
        assert math.isclose(got[name], want[name], rel_tol=1e-6), name


def test_the_raw_text_gives_the_same_figures_as_its_records(trained, capsys):
    """The test records were built from test.txt with the run's tokenizer, the model's
    batch size and --seq_len 16: batching the text again gives the same stream."""
    model = str(trained["run_dir"] / "tiny.keras")
    records = evaluate(capsys, "--model", model, "--records", str(trained["records"]["test"]))
    text = evaluate(
        capsys, "--model", model, "--text", str(trained["texts"]["test"]), "--seq_len", str(SEQ)
    )
    for name in (*FIGURES, "num_tokens"):
        assert math.isclose(text[name], records[name], rel_tol=1e-6), name


def test_eval_mode_changes_the_block_weights(trained, capsys, monkeypatch):
    # Chunks of 4 batches, and a progress line after every one (not every 10 s).
    monkeypatch.setattr("partf.training.evaluation.perplexity.CHUNK", 4)
    monkeypatch.setattr("partf.console.EVERY_SECONDS", 0.0)
    base = ["--model", str(trained["run_dir"]), "--records", str(trained["records"]["test"])]
    assert run([*base, "--eval_mode", "argmax", "--nojit_compile"]) == 0
    out, err = capsys.readouterr()
    # What is scored is said before the pass, which may take minutes.
    assert f"scoring {base[1]} on {base[3]} (eval_mode argmax)" in err
    # Then the batches done, with a rate and an ETA, and the perplexity at the end.
    batches = trained["results"]["test"]["num_batches"]
    lines = [line for line in err.splitlines() if line.startswith("partf: scoring records_")]
    assert lines[0] == f"partf: scoring records_test (argmax weights): {batches} batches"
    assert re.fullmatch(
        rf"partf: scoring records_test \(argmax weights\): 8/{batches} \([\d.]+%\), "
        r"[\d.]+ batches/s \([\d,]+ tok/s\), elapsed 0:\d\d:\d\d, ETA (\d+:\d\d:\d\d|unknown)",
        lines[1],
    ), lines
    assert len(lines) == 2 + (batches - 1) // 4  # every chunk but the first (it compiles)
    assert re.fullmatch(
        r"partf: scoring records_test \(argmax weights\): done in [\d.]+ s, perplexity [\d.]+",
        lines[-1],
    )
    assert "(eval_mode argmax)" in out and "perplexity (exact, per token):" in out
    argmax = float(out.split("perplexity (exact, per token):")[1].split()[0])
    expected = trained["results"]["test"]["perplexity"]  # the run's own eval_mode
    assert not math.isclose(argmax, expected, rel_tol=1e-4)


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("partf-evaluate: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_bad_input_is_one_line(trained, capsys, tmp_path):
    run_dir, records = str(trained["run_dir"]), trained["records"]
    assert run(["--model", str(tmp_path / "none.keras"), "--records", str(records["test"])]) == 2
    assert "does not exist" in error_line(capsys)
    assert run(["--model", run_dir]) == 2
    assert "one of the arguments --records --text is required" in error_line(capsys)
    assert run(["--model", run_dir, "--records", str(tmp_path / "missing")]) == 2
    line = error_line(capsys)
    assert "--records" in line and "does not exist" in line

    # Records of another batch size.
    from partf.data import build_records

    other = build_records(
        trained["texts"]["test"], trained["prefix"].with_suffix(".model"), tmp_path / "b2",
        batch_size=2, seq_len=SEQ,
    )  # fmt: skip
    assert other.batch_size == 2
    assert run(["--model", run_dir, "--records", str(tmp_path / "b2")]) == 1
    assert "batches of 2 rows but the model's memory holds 4" in error_line(capsys)

    # A tokenizer other than the one the records were built with.
    from partf.data import train_tokenizer

    stranger = train_tokenizer(
        write_text(tmp_path / "other.txt", wiki_lines(600, seed=9)), tmp_path / "other", 120
    )
    status = run(
        ["--model", run_dir, "--records", str(records["test"]), "--sp_model", str(stranger)]
    )
    assert status == 1
    assert "is not the one the records" in error_line(capsys)


def test_a_run_folder_without_keras_file_uses_its_checkpoint(trained, capsys, tmp_path):
    copy = tmp_path / "tiny"
    shutil.copytree(trained["run_dir"], copy)
    (copy / "tiny.keras").unlink()
    got = evaluate(capsys, "--model", str(copy), "--records", str(trained["records"]["test"]))
    want = trained["results"]["test"]
    assert math.isclose(got["perplexity"], want["perplexity"], rel_tol=1e-6)


def test_a_masked_language_model_is_refused_in_one_line(trained, capsys, tmp_path):
    from partf.models import MaskedLanguageModel
    from partf.training.checkpoint import CheckpointManager

    # Real records, so that the model is what is refused (an empty folder is refused first).
    records = str(trained["records"]["test"])
    model = MaskedLanguageModel(
        vocab_size=30, attention="softmax", d_model=8, num_heads=2, d_ffn=16, architecture="A D"
    )
    model(np.ones((1, 4), np.int32))
    model.save(tmp_path / "mlm.keras")
    assert run(["--model", str(tmp_path / "mlm.keras"), "--records", records]) == 2
    line = error_line(capsys)
    assert "masked language model (partf-train --objective=mlm)" in line
    assert "masked-token perplexity is in the run's results.json" in line
    # A run folder with only checkpoints: refused from its configuration.
    folder = tmp_path / "checkpoints" / "mlm"
    CheckpointManager(folder).save(2, {"model": []}, {"config": {"training": {"objective": "mlm"}}})
    assert run(["--model", str(folder), "--records", records]) == 2
    assert "--objective=mlm" in error_line(capsys)


@pytest.fixture(scope="module")
def mqar_model(tmp_path_factory) -> dict:
    """MQAR splits and a small model fitted on them for a few seconds, saved as .keras."""
    from partf.tasks.mqar import MQARSettings, write_mqar
    from tests.training.evaluation.helpers import MQAR, trained_mqar_model

    root = tmp_path_factory.mktemp("mqar")
    folders = write_mqar(root / "mqar", MQARSettings(**MQAR))
    trained_mqar_model().save(root / "mqar.keras")
    return {"model": str(root / "mqar.keras"), "test": str(folders["test"])}


def test_an_mqar_split_by_distance_and_text_refused(mqar_model, capsys, tmp_path):
    """An MQAR split is scored by its answers, with --by_distance a bucket per range of
    key-to-query distance that adds up to the accuracy; text is refused in one line."""
    base = ["--model", mqar_model["model"], "--records", mqar_model["test"], "--by_distance"]
    got = evaluate(capsys, *base)
    buckets = got["by_distance"]
    assert [b["distance"] for b in buckets] == ["0-16", "16-32", "32-64"]
    assert sum(b["answers"] for b in buckets) == got["num_tokens"] == 8 * 4 * 4
    correct = sum(b["correct"] for b in buckets)
    assert 0 < correct < got["num_tokens"]
    assert math.isclose(correct / got["num_tokens"], got["accuracy"])
    summary = got["predictions"]
    assert summary["answers"] == got["num_tokens"] and summary["distinct_predictions"] >= 1
    assert got["accuracy"] <= summary["in_row"] <= 1  # a right answer is a value of its row
    assert run([*base, "--nojit_compile"]) == 0
    out = capsys.readouterr().out
    assert f"accuracy (answers exactly right): {100 * got['accuracy']:.2f}% of 128 answers" in out
    table = out.split("by distance from the key's pair to its query (tokens):\n")[1]
    lines = table.splitlines()
    rows = [line.split() for line in lines[: len(buckets) + 1]]
    assert rows[0] == ["distance", "answers", "correct", "accuracy"]
    assert rows[1:] == [
        [b["distance"], str(b["answers"]), str(b["correct"]), f"{100 * b['accuracy']:.2f}%"]
        for b in buckets
    ]
    assert lines[len(buckets) + 1] == (
        f"  predictions at the answers: {summary['distinct_predictions']:,} distinct tokens, "
        f"{100 * summary['in_row']:.1f}% of them a value of the row's own pairs"
    )
    # Text records (a folder partf-evaluate takes for records) and a text file: one line.
    (tmp_path / "records").mkdir()
    (tmp_path / "records" / "metadata.json").write_text("{}")
    text = write_text(tmp_path / "test.txt", ["some text"])
    for data in (["--records", str(tmp_path / "records")], ["--text", str(text)]):
        assert run(["--model", mqar_model["model"], *data, "--by_distance"]) == 2
        line = error_line(capsys)
        assert "--by_distance scores the answers of an MQAR split but" in line
        assert "pass --records an MQAR split folder (partf-build-data --task=mqar)" in line
