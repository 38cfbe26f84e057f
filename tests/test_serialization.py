"""The format every file partf writes carries: `format_problem`'s one line for a record of
another format, `check_format`'s refusal, and `register`'s Keras names."""

from __future__ import annotations

import keras
import pytest

from partf.errors import DataError
from partf.serialization import (
    FORMAT_KEY,
    FORMAT_VERSION,
    FormatError,
    check_format,
    format_problem,
    register,
)

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
