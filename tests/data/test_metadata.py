"""metadata.json: round trip, and refusing what it cannot read."""

from __future__ import annotations

import json

import pytest

from partf.data import DataError, RecordsMetadata
from partf.serialization import KINDS, FormatError

FORMAT_VERSION = KINDS["records"].version


def make(**overrides) -> RecordsMetadata:
    fields = dict(
        batch_size=4,
        seq_len=8,
        num_batches=10,
        shards=("a", "b"),
        shard_batches=(5, 5),
        num_tokens=4 * 10 * 8 + 1 + 7,
        vocab_size=120,
        tokenizer_sha256="ab" * 32,
        source_sha256="cd" * 32,
        num_lines=3,
        num_words=30,
        num_chars=200,
        num_bytes=201,
        eos_per_line=True,
        source_file="valid.txt",
        tokenizer_file="tiny.model",
    )
    fields.update(overrides)
    return RecordsMetadata(**fields)


def test_round_trip_and_derived_counts():
    meta = make()
    fields = json.loads(meta.to_json())
    assert fields["format"] == FORMAT_VERSION and "format_version" not in fields
    assert fields["shards"] == [{"file": "a", "num_batches": 5}, {"file": "b", "num_batches": 5}]
    assert RecordsMetadata.from_json(meta.to_json()) == meta
    assert meta.num_target_tokens == 10 * 4 * 8
    assert meta.num_lost_tokens == 7


def test_rejects_newer_versions_and_other_files():
    newer = json.loads(make().to_json())
    newer["format"] = FORMAT_VERSION + 1
    with pytest.raises(FormatError, match="written by a newer partf"):
        RecordsMetadata.from_json(json.dumps(newer))
    with pytest.raises(FormatError, match=r"earlier partf \(records format none"):
        RecordsMetadata.from_json('{"hello": 1}')
    with pytest.raises(DataError, match="not valid partf records metadata"):
        RecordsMetadata.from_json("not json")
