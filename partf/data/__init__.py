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

from partf.errors import DataError, UsageError  # noqa: F401 (re-exported)
from partf.lazy import lazy_exports

# Imported on first use, so that what needs no TensorFlow loads without it (partf.lazy).
_WHERE = {
    "check_batch_shape": "batching",
    "context_batches": "batching",
    "num_context_batches": "batching",
    "num_lost_tokens": "batching",
    "stream_from_batches": "batching",
    "build_data": "build",
    "build_records": "build",
    "SPLITS": "corpus",
    "find_splits": "corpus",
    "split_text_file": "corpus",
    "WIKITEXT2_CHECKSUMS": "download",
    "WIKITEXT2_SOURCES": "download",
    "download": "download",
    "fetch_wikitext2": "download",
    "file_checksum": "download",
    "verify_file": "download",
    "EVAL_SEEDS": "masking",
    "Masking": "masking",
    "mask_tokens": "masking",
    "METADATA_FILE": "metadata",
    "RecordsMetadata": "metadata",
    "SHIPPED_WIKITEXT2": "shipped",
    "get_wikitext2": "shipped",
    "unpack_wikitext2": "shipped",
    "StagedOutputs": "staging",
    "TextStats": "text_stats",
    "file_sha256": "text_stats",
    "text_stats": "text_stats",
    "load_batches": "tfrecords",
    "load_tfrecords": "tfrecords",
    "parse_batch": "tfrecords",
    "read_batches": "tfrecords",
    "read_metadata": "tfrecords",
    "records_token_stream": "tfrecords",
    "serialize_batch": "tfrecords",
    "verify_records": "tfrecords",
    "write_tfrecords": "tfrecords",
    "BOS_ID": "tokenizer",
    "DEFAULT_VOCAB_SIZE": "tokenizer",
    "EOS_ID": "tokenizer",
    "PAD_ID": "tokenizer",
    "UNK_ID": "tokenizer",
    "graph_tokenizer": "tokenizer",
    "MASK_PIECE": "tokenizer",
    "load_sentencepiece": "tokenizer",
    "mask_id_of": "tokenizer",
    "model_path": "tokenizer",
    "read_token_file": "tokenizer",
    "tokenize_file": "tokenizer",
    "train_tokenizer": "tokenizer",
    "vocab_size_of": "tokenizer",
}

__all__ = sorted([*_WHERE, "DataError", "UsageError"])
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
