"""Data pipeline: WikiText-2 or your own text -> SentencePiece tokens ->
context-batched TFRecords -> a tf.data.Dataset of (inputs, targets).

Quick use:
    >>> from partf import data
    >>> ds = data.load_tfrecords("data/wikitext2_bsz32_seqlen32_tfrecords_train",
    ...                          sp_model="data/tokenizer/wiki2_12k.model")
    >>> meta = data.read_metadata("data/wikitext2_bsz32_seqlen32_tfrecords_valid")

Token stream conventions: every line of text ends with eos (id 2), empty lines
included, so the stream mirrors the file's lines. Batch i, row r continues
batch i-1, row r with one token of overlap (see `partf.data.batching`).
"""

from partf.data.batching import (
    check_batch_shape,
    context_batches,
    num_context_batches,
    num_lost_tokens,
    stream_from_batches,
)
from partf.data.build import build_data, build_records
from partf.data.corpus import SPLITS, find_splits, split_text_file
from partf.data.download import (
    WIKITEXT2_CHECKSUMS,
    WIKITEXT2_SOURCES,
    download,
    fetch_wikitext2,
    file_checksum,
    verify_file,
)
from partf.data.errors import DataError, UsageError
from partf.data.metadata import FORMAT_VERSION, METADATA_FILE, RecordsMetadata
from partf.data.staging import StagedOutputs
from partf.data.text_stats import TextStats, file_sha256, text_stats
from partf.data.tfrecords import (
    load_batches,
    load_tfrecords,
    parse_batch,
    read_batches,
    read_metadata,
    records_token_stream,
    serialize_batch,
    verify_records,
    write_tfrecords,
)
from partf.data.tokenizer import (
    BOS_ID,
    DEFAULT_VOCAB_SIZE,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    graph_tokenizer,
    load_sentencepiece,
    model_path,
    read_token_file,
    tokenize_file,
    train_tokenizer,
    vocab_size_of,
)

__all__ = [
    "BOS_ID",
    "DEFAULT_VOCAB_SIZE",
    "EOS_ID",
    "FORMAT_VERSION",
    "METADATA_FILE",
    "PAD_ID",
    "SPLITS",
    "UNK_ID",
    "WIKITEXT2_CHECKSUMS",
    "WIKITEXT2_SOURCES",
    "DataError",
    "RecordsMetadata",
    "StagedOutputs",
    "TextStats",
    "UsageError",
    "build_data",
    "build_records",
    "check_batch_shape",
    "context_batches",
    "download",
    "fetch_wikitext2",
    "file_checksum",
    "file_sha256",
    "find_splits",
    "graph_tokenizer",
    "load_batches",
    "load_sentencepiece",
    "load_tfrecords",
    "model_path",
    "num_context_batches",
    "num_lost_tokens",
    "parse_batch",
    "read_batches",
    "read_metadata",
    "read_token_file",
    "records_token_stream",
    "serialize_batch",
    "split_text_file",
    "stream_from_batches",
    "text_stats",
    "tokenize_file",
    "train_tokenizer",
    "verify_file",
    "verify_records",
    "vocab_size_of",
    "write_tfrecords",
]
