"""The format every file partf writes carries: `format_problem`'s one line for a record of
another format, `check_format`'s refusal, every kind of file (`KINDS`) refused when of
the previous or a newer format through the reader partf uses, and `register`'s Keras
names."""

from __future__ import annotations

import json
from pathlib import Path

import keras
import pytest

from partf.data import read_metadata
from partf.data.metadata import RecordsMetadata, write_metadata
from partf.errors import DataError
from partf.run_folder import RunFolder
from partf.serialization import (
    FORMAT_KEY,
    FORMAT_VERSION,
    KINDS,
    FormatError,
    check_format,
    format_problem,
    register,
)
from partf.training.cost_table import CostTable, read_cost_table, write_cost_table
from partf.training.drop_selection import Selection, read_selection, write_selection

READS = f"this partf reads format {FORMAT_VERSION}"


def test_a_record_of_this_format_has_no_problem():
    assert format_problem({FORMAT_KEY: FORMAT_VERSION, "model": {}}, "run.keras") is None
    check_format({FORMAT_KEY: FORMAT_VERSION}, "run.keras")  # does not raise


@pytest.mark.parametrize(
    ("record", "shown"),
    [
        ({}, "none"),
        ({FORMAT_KEY: FORMAT_VERSION - 1}, str(FORMAT_VERSION - 1)),
        ({FORMAT_KEY: str(FORMAT_VERSION)}, repr(str(FORMAT_VERSION))),  # not the number
        ({FORMAT_KEY: True}, "True"),
        (["not", "a", "mapping"], "none"),
    ],
    ids=["absent", "earlier", "string", "bool", "list"],
)
def test_an_earlier_or_unknown_format_says_how_to_read_it(record, shown):
    problem = format_problem(record, "ckpt-00000012.npz")
    assert problem.startswith(
        f"ckpt-00000012.npz was written by an earlier partf (format {shown}; {READS}): "
        "retrain it, or load it with the partf version that wrote it"
    )
    assert "\n" not in problem


def test_a_newer_format_says_to_update():
    newer = FORMAT_VERSION + 1
    assert format_problem({FORMAT_KEY: newer}, "results.json") == (
        f"results.json was written by a newer partf (format {newer}; {READS}): update partf"
    )


def test_check_format_raises_the_line_as_a_data_error():
    with pytest.raises(FormatError) as caught:
        check_format({FORMAT_KEY: FORMAT_VERSION + 1}, "config.json")
    assert isinstance(caught.value, DataError)  # the commands' one-line failure, status 1
    assert str(caught.value) == format_problem({FORMAT_KEY: FORMAT_VERSION + 1}, "config.json")


def test_register_names_a_class_under_the_partf_package():
    @register
    class SerializationProbe(keras.layers.Layer):
        pass

    assert keras.saving.get_registered_name(SerializationProbe) == "partf>SerializationProbe"
    assert keras.saving.get_registered_object("partf>SerializationProbe") is SerializationProbe


def _model_file(folder: Path) -> Path:
    """A run's config.json, one of the model format's files."""
    path = RunFolder(folder).config_path
    path.write_text(json.dumps({FORMAT_KEY: FORMAT_VERSION, "model": {}, "training": {}}))
    return path


def _records_file(folder: Path) -> Path:
    meta = RecordsMetadata(
        batch_size=2, seq_len=4, num_batches=1, shards=("a",), shard_batches=(1,)
    )
    return write_metadata(folder, meta)


def _cost_table_file(folder: Path) -> Path:
    costs = {"dense": 1.0, "identity": 0.0}
    table = CostTable(costs, {"dense": 0.9, "identity": 0.0}, 2, 4, "cpu", "tensorflow")
    return write_cost_table(folder, table)


def _selection_file(folder: Path) -> Path:
    write_selection(folder, Selection("source", "I D", (0,), 4.0, {0: 4.1}))
    return RunFolder(folder).selection_path


def _task_split_file(folder: Path) -> Path:
    """A drawn task's split file (the copy task's train split, a few rows)."""
    from partf.tasks.copy import TASK, CopySettings

    settings = CopySettings(
        seq_len=16, length=4, vocab_size=16, batch_size=2, train_examples=2, eval_examples=2
    )
    return TASK.write(folder / "copy", settings)["train"] / TASK.marker


def _old_layout(name: str):
    """The layout before the one key: the kind's name under "format", its version beside."""
    return lambda record, version: {**record, FORMAT_KEY: name, "format_version": version}


def _key(record: dict, version: int) -> dict:
    return {**record, FORMAT_KEY: version}


def _no_key(record: dict, version: int) -> dict:
    return {k: v for k, v in record.items() if k != FORMAT_KEY}


#: Per kind: (write a file of this format, read it as partf does, the previous format's
#: record from this one's and its version).
KIND_FILES = {
    "model": (_model_file, lambda path: RunFolder(path.parent).read_config(), _key),
    "records": (
        _records_file,
        lambda path: read_metadata(path.parent),
        _old_layout("partf-context-batches"),
    ),
    "cost table": (_cost_table_file, read_cost_table, _old_layout("partf-cost-table")),
    "selection": (_selection_file, lambda path: read_selection(path.parent), _no_key),
    "task split": (
        _task_split_file,
        lambda path: _copy_task().read(path.parent),
        _old_layout("partf-copy"),
    ),
}


def _copy_task():
    from partf.tasks.copy import TASK

    return TASK


def test_every_kind_of_file_has_a_case():
    assert set(KIND_FILES) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("age", ["previous", "newer"])
def test_a_file_of_another_format_is_refused_in_one_line_naming_both(kind, age, tmp_path):
    write, read, previous = KIND_FILES[kind]
    path = write(tmp_path)
    read(path)  # this format reads
    expected = KINDS[kind]
    label = "format" if kind == "model" else f"{kind} format"  # "records format 1"
    record = json.loads(path.read_text())
    if age == "previous":
        found = expected.version - 1
        record = previous(record, found)
        shown = "none" if kind == "selection" else found  # selection.json had no format
        said = f"an earlier partf ({label} {shown}; "
        fix = expected.fix
    else:
        found = expected.version + 1
        record = _key(record, found)
        said, fix = f"a newer partf ({label} {found}; ", "update partf"
    path.write_text(json.dumps(record))
    with pytest.raises(FormatError) as caught:
        read(path)
    message = str(caught.value)
    assert message == (
        f"{path} was written by {said}this partf reads {label} {expected.version}): {fix}"
    )
