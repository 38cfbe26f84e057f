"""export(): a folder complete or absent, whatever fails while it is written."""

from __future__ import annotations

import keras
import pytest

from partf.export import ExportError, export
from partf.export import writer as writer_module
from partf.models import PARTransformerXL
from tests.export.helpers import TINY


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    settings = {**TINY, "num_layers": 2}
    return PARTransformerXL(settings, attention="linear", mem_len=0, architecture="linear D")


def leftovers(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".tmp-")]


def test_a_failure_while_writing_leaves_nothing(model, tmp_path, monkeypatch):
    def half_written(decoder, folder):
        (folder / "saved_model.pb").write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(writer_module, "_write_saved_model", half_written)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="disk full"):
        export(model, out, context=0)
    assert not out.exists() and not leftovers(tmp_path)


def test_the_text_signature_decodes_one_prompt(model, tmp_path):
    sp_model = tmp_path / "tiny.model"
    sp_model.write_bytes(b"not read")
    with pytest.raises(ExportError, match="--batch_size 1"):
        export(model, tmp_path / "out", context=0, batch_size=2, sp_model=sp_model)
    assert not (tmp_path / "out").exists() and not leftovers(tmp_path)
