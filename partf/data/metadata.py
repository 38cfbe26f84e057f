"""The metadata file beside a folder of context-batched records.

`metadata.json` says how the records were made (batch size, sequence length,
which tokenizer, which text) so that a reader can check that they fit the
model and tokenizer at hand, and so that losses per token can be turned into
per-word and per-character figures.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from partf.errors import DataError
from partf.serialization import FORMAT_KEY, KINDS, check_format

METADATA_FILE = "metadata.json"


@dataclasses.dataclass(frozen=True)
class RecordsMetadata:
    """What a record folder holds. Fields a format cannot know are None.

    Attributes:
        batch_size: B, rows per batch.
        seq_len: L; each record is int32 [B, L + 1].
        num_batches: records in all shards together.
        shards: shard file names, in stream order.
        shard_batches: records in each shard.
        format_version: the records format (`partf.serialization.KINDS`); 0 for the
            original project's records (no metadata file; everything else is inferred).
        overlap: tokens shared by row r of batch i and row r of batch i+1:
            1 for partf, 0 for the original project.
        num_tokens: tokens of the source stream, one eos per line included.
        vocab_size: pieces in the tokenizer.
        tokenizer_sha256: sha256 of the tokenizer's `.model` file.
        source_sha256: sha256 of the source text file.
        num_lines, num_words, num_chars, num_bytes: counts of the source text
            (see `partf.data.TextStats`); word-level perplexity divides by
            num_words + num_lines (each line end is predicted like a word).
        eos_per_line: each line of the source ends with the eos token.
        source_file, tokenizer_file: names, for people reading the file.
        mask_id: the tokenizer's `[MASK]` id (masked language modelling), None when
            it has none.
    """

    batch_size: int
    seq_len: int
    num_batches: int
    shards: tuple[str, ...]
    shard_batches: tuple[int, ...]
    format_version: int = KINDS["records"].version
    overlap: int = 1
    num_tokens: int | None = None
    vocab_size: int | None = None
    tokenizer_sha256: str | None = None
    source_sha256: str | None = None
    num_lines: int | None = None
    num_words: int | None = None
    num_chars: int | None = None
    num_bytes: int | None = None
    eos_per_line: bool | None = None
    source_file: str | None = None
    tokenizer_file: str | None = None
    mask_id: int | None = None

    @property
    def num_target_tokens(self) -> int:
        """Tokens predicted in one pass over the records: num_batches * B * L."""
        return self.num_batches * self.batch_size * self.seq_len

    @property
    def num_lost_tokens(self) -> int | None:
        """Source tokens in no batch (the tail shorter than one batch)."""
        if self.num_tokens is None or self.overlap != 1:
            return None
        return self.num_tokens - (self.num_target_tokens + 1)

    def to_json(self) -> str:
        fields = dataclasses.asdict(self)
        fields["shards"] = [
            {"file": name, "num_batches": count}
            for name, count in zip(self.shards, self.shard_batches, strict=True)
        ]
        del fields["shard_batches"]
        version = fields.pop("format_version")
        return json.dumps({FORMAT_KEY: version, **fields}, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "metadata") -> RecordsMetadata:
        try:
            fields = json.loads(text)
            check_format(fields, where, "records")
            fields["format_version"] = fields.pop(FORMAT_KEY)
            shards = fields.pop("shards")
            fields["shards"] = tuple(s["file"] for s in shards)
            fields["shard_batches"] = tuple(int(s["num_batches"]) for s in shards)
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in fields.items() if k in known})
        except DataError:
            raise
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(
                f"{where} is not valid partf records metadata ({e}); rebuild the records "
                f"with partf-build-data --overwrite"
            ) from None


def write_metadata(directory: str | os.PathLike, metadata: RecordsMetadata) -> Path:
    """Writes `directory/metadata.json`."""
    path = Path(directory) / METADATA_FILE
    path.write_text(metadata.to_json(), encoding="utf-8")
    return path
