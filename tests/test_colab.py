"""colab.ipynb runs top to bottom, headless, with a tiny run on the original project's records."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from tests.shared_data import absent

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[1] / "colab.ipynb"


def _parameters_cell_index(nb) -> int:
    for i, cell in enumerate(nb.cells):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            return i
    raise AssertionError("colab.ipynb has no cell tagged 'parameters'")


def _first_records(source: Path, target: Path, count: int) -> Path:
    """Copies the first `count` records of a folder of original-format .tfrecords, unchanged."""
    import tensorflow as tf

    target.mkdir(parents=True)
    files = sorted(str(p) for p in source.glob("*.tfrecords"))
    with tf.io.TFRecordWriter(str(target / "file1.tfrecords")) as writer:
        for record in tf.data.TFRecordDataset(files).take(count):
            writer.write(record.numpy())
    return target


def _outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def test_notebook_runs_top_to_bottom(original_artifacts: Path, tmp_path: Path) -> None:
    valid = original_artifacts / "tfrecords_valid"
    test = original_artifacts / "tfrecords_test"
    tokenizer = original_artifacts / "tokenizer" / "wiki2_12k"
    if not (valid.is_dir() and test.is_dir() and tokenizer.with_suffix(".model").is_file()):
        absent("the original project's records or tokenizer are absent")

    # A few batches of each split: scoring the full 304-batch splits several times
    # (validation, final test, the notebook's own evaluation) would take minutes.
    valid = _first_records(valid, tmp_path / "small_train", 24)
    test = _first_records(test, tmp_path / "small_test", 12)

    nb = nbformat.read(NOTEBOOK, as_version=4)
    index = _parameters_cell_index(nb)
    overrides = {
        "DATA_DIR": str(tmp_path / "no-text"),
        "RECORDS": str(tmp_path / "records"),
        "TRAIN_DIR": str(valid),
        "VALID_DIR": str(test),
        "TEST_DIR": str(test),
        "SP_MODEL_PREFIX": str(tokenizer),
        "MODEL_NAME": "tiny",
        "OUTPUT_DIR": str(tmp_path / "runs"),
        "MAX_STEPS": 20,
        "EPOCHS": 1,
        "WARMUP_STEPS": 5,
        "JIT_COMPILE": False,
        "STEPS_PER_EXECUTION": 4,
        "MODEL": {
            "d_model": 16,
            "num_heads": 2,
            "d_ffn": 32,
            "num_layers": 2,
            "mem_len": 8,
            "dropout_rate": 0.0,
        },
        "MAX_NEW_TOKENS": 12,
    }
    injected = nbformat.v4.new_code_cell(
        "\n".join(f"{name} = {value!r}" for name, value in overrides.items())
    )
    injected.metadata["tags"] = ["injected-parameters"]
    nb.cells.insert(index + 1, injected)
    # A first cell proves which interpreter the kernel runs: it must be this one (.venv).
    nb.cells.insert(0, nbformat.v4.new_code_cell("import sys\nprint('KERNEL', sys.executable)"))

    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=600,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError on the first failing cell

    texts = [_outputs_text(cell) for cell in nb.cells if cell.cell_type == "code"]
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    kernel_python = re.search(r"KERNEL (\S+)", texts[0]).group(1)
    assert Path(kernel_python).resolve() == Path(sys.executable).resolve()

    run = tmp_path / "runs"
    assert (run / "checkpoints" / "tiny" / "tiny.keras").is_file()
    assert (run / "checkpoints" / "tiny" / "results.json").is_file()
    assert list((run / "plots" / "tiny").glob("step*.png"))
    assert (run / "plots" / "tiny" / "pi.gif").is_file()
    assert any(o.get("data", {}).get("image/png") for c in nb.cells for o in c.get("outputs", []))
    assert not (tmp_path / "records_train").exists()  # the records were found, not rebuilt

    everything = "\n".join(texts)
    generated = re.search(r"GENERATED: (.*)", everything)
    assert generated and generated.group(1).strip().startswith("The history of".lower()[:3])
    perplexity = float(re.search(r"TEST PERPLEXITY: (\S+)", everything).group(1))
    assert math.isfinite(perplexity) and perplexity > 1.0
    assert "tensorboard --logdir" in everything
