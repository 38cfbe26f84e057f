"""partf-export: SavedModel and LiteRT exports decode as partf-generate does in a process
that cannot import partf, carry their state exactly, and refuse bad input in one line
leaving no folder behind."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from partf.cli.export import run
from tests.data.helpers import wiki_lines, write_text
from tests.export.helpers import (
    CONTEXT,
    KINDS,
    NEW_TOKENS,
    PROMPT,
    TINY,
    VOCAB,
    run_without_partf,
    tiny,
    write_run,
)
from tests.layer_checks import float32_atol

TEXT = "the game was released"


@pytest.fixture(scope="module")
def export_root(tmp_path_factory):
    """<root>/data/tokenizer/tiny.model and <root>/runs/checkpoints/<kind>/ per kind."""
    from partf.data import train_tokenizer

    root = tmp_path_factory.mktemp("export")
    text = write_text(root / "corpus" / "train.txt", wiki_lines(600, seed=0))
    train_tokenizer(text, root / "data" / "tokenizer" / "tiny", vocab_size=VOCAB)
    for kind in KINDS:
        write_run(tiny(kind), root / "runs" / "checkpoints" / kind, "data/tokenizer/tiny")
    return root


def export(capsys, *argv: str) -> None:
    assert run(list(argv)) == 0, capsys.readouterr().err
    capsys.readouterr()


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("partf-export: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def partf_greedy(run_dir, count: int = NEW_TOKENS, prompt=PROMPT):
    """partf-generate's greedy tokens and log-probs with --mem_len CONTEXT."""
    from partf.cli.loading import load_model
    from partf.generation import generate, reconfigure

    model, _ = load_model(run_dir)
    model = reconfigure(model, batch_size=1, mem_len=model.config.mem_len and CONTEXT)
    result = generate(model, [prompt], count, temperature=0.0, return_log_probs=True)
    return result.tokens, result.log_probs


def check_kind(kind, export_root, tmp_path, capsys, text: bool):
    run_dir = export_root / "runs" / "checkpoints" / kind
    folders = []
    for fmt in ("saved_model", "litert"):
        out = tmp_path / f"{kind}_{fmt}"
        argv = ["--model", str(run_dir), "--out", str(out), "--format", fmt]
        export(capsys, *argv, "--context", str(CONTEXT), *([] if text else ["--notext"]))
        folders.append(str(out))
    results = tmp_path / "results.npz"
    done = run_without_partf(
        str(results),
        ",".join(map(str, PROMPT)),
        str(NEW_TOKENS),
        *([TEXT] if text else []),
        "--",
        *folders,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected_tokens, expected_log_probs = partf_greedy(run_dir)
    with np.load(results) as got:
        for i in range(len(folders)):
            np.testing.assert_array_equal(got[f"tokens_{i}"], expected_tokens, folders[i])
            # A few hundred roundings (the widths, the window, the vocabulary) of terms
            # up to the log-probs' size: float32 rounding, not a looser tolerance.
            atol = float32_atol(256, magnitude=np.abs(expected_log_probs).max())
            np.testing.assert_allclose(
                got[f"log_probs_{i}"], expected_log_probs, rtol=0, atol=atol, err_msg=folders[i]
            )
        return got["text_0"].item() if text else None


def test_hybrid_exports_decode_as_partf_without_partf(export_root, tmp_path, capsys):
    """Both formats of the hybrid (relative attention and a window of 16), and the text
    signature from text to text, against partf's own greedy decoding."""
    from partf.cli.generate import decode
    from partf.data import EOS_ID, load_sentencepiece

    text = check_kind("hybrid", export_root, tmp_path, capsys, text=True)
    # decode.py refuses a prompt longer than the context, for LiteRT too (no check inside).
    spec = importlib.util.spec_from_file_location(
        "decode", tmp_path / "hybrid_litert" / "decode.py"
    )
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    decoder = client.open_export(tmp_path / "hybrid_litert")
    with pytest.raises(ValueError, match=f"longer than the exported context of {CONTEXT}"):
        decoder.prefill(np.ones((1, CONTEXT + 1)), decoder.zeros())
    sp = load_sentencepiece(export_root / "data" / "tokenizer" / "tiny.model")
    tokens, _ = partf_greedy(
        export_root / "runs" / "checkpoints" / "hybrid", prompt=[EOS_ID, *sp.encode(TEXT)]
    )
    assert text == decode(sp, tokens[0].tolist())


@pytest.mark.slow
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "hybrid"])
def test_every_kind_exports_decode_as_partf_without_partf(kind, export_root, tmp_path, capsys):
    check_kind(kind, export_root, tmp_path, capsys, text=False)


def test_carrying_the_state_equals_one_call(export_root, tmp_path, capsys):
    """prefill(a) then prefill(b) or steps over b with the state carried equals
    prefill(a + b); a prompt longer than the exported context is refused in one line."""
    import tensorflow as tf

    out = tmp_path / "hybrid"
    run_dir = export_root / "runs" / "checkpoints" / "hybrid"
    export(capsys, "--model", str(run_dir), "--out", str(out), "--notext")
    loaded = tf.saved_model.load(str(out))
    prefill, step = loaded.signatures["prefill"], loaded.signatures["step"]
    state = json.loads((out / "export.json").read_text())["state"]
    zeros = {name: tf.zeros(s["shape"], s["dtype"]) for name, s in state.items()}
    tokens = np.array([PROMPT], np.int32)

    def split(outputs):
        return outputs["log_probs"].numpy(), {k: v for k, v in outputs.items() if k != "log_probs"}

    whole, whole_state = split(prefill(tokens=tokens, **zeros))
    _, first_state = split(prefill(tokens=tokens[:, :9], **zeros))
    for second in (prefill, step):
        state_now = first_state
        if second is step:
            for t in range(9, tokens.shape[1]):
                log_probs, state_now = split(step(tokens=tokens[:, t : t + 1], **state_now))
        else:
            log_probs, state_now = split(prefill(tokens=tokens[:, 9:], **state_now))
        atol = float32_atol(256, magnitude=np.abs(whole).max())
        np.testing.assert_allclose(log_probs, whole, rtol=0, atol=atol)
        for name, value in whole_state.items():
            expected = value.numpy().astype(np.float64)
            tolerance = float32_atol(256, magnitude=max(1.0, np.abs(expected).max()))
            np.testing.assert_allclose(
                state_now[name].numpy(), expected, rtol=0, atol=tolerance, err_msg=name
            )
    too_long = np.ones((1, CONTEXT + 1), np.int32)
    message = f"longer than the exported context of {CONTEXT} tokens"
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        prefill(tokens=too_long, **zeros)


# ------------------------------------------------------------------- bad input
def assert_nothing_written(out):
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".tmp-")]


def test_a_search_supernet_is_refused(tmp_path, capsys):
    from partf.models import PARTransformerXL

    run_dir = write_run(
        PARTransformerXL(TINY, attention="relative", mem_len=8), tmp_path / "search", None
    )
    out = tmp_path / "out"
    assert run(["--model", str(run_dir), "--out", str(out), "--notext"]) == 2
    line = error_line(capsys)
    assert "search supernet" in line and "--from_search" in line
    assert_nothing_written(out)


def test_an_attention_without_state_is_refused(export_root, tmp_path, capsys):
    out = tmp_path / "out"
    run_dir = export_root / "runs" / "checkpoints" / "xl"
    assert run(["--model", str(run_dir), "--out", str(out), "--context", "0", "--notext"]) == 2
    line = error_line(capsys)
    assert "keep no fixed-size state" in line and "--context N" in line
    assert_nothing_written(out)


def test_a_missing_tokenizer_is_refused(export_root, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "checkpoints" / "xl"
    shutil.copytree(export_root / "runs" / "checkpoints" / "xl", run_dir)
    out = tmp_path / "out"
    assert run(["--model", str(run_dir), "--out", str(out)]) == 2
    line = error_line(capsys)
    assert "tokenizer" in line and "--sp_model" in line and "--notext" in line
    assert_nothing_written(out)


def test_an_existing_out_is_refused(export_root, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert (
        run(["--model", str(export_root / "runs" / "checkpoints" / "xl"), "--out", str(out)]) == 2
    )
    assert "exists" in error_line(capsys)
