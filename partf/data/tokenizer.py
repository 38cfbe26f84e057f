"""SentencePiece tokenizer: training with the original project's defaults, and
tokenizing text files inside the tf.data graph.

Every line of the text becomes its tokens followed by the end-of-line token
(eos, id 2). An empty line becomes a lone eos, so the token stream mirrors the
file's lines one for one, and word-level perplexity (which counts each line
end as a word) can be computed from it. The original project dropped line
ends; partf keeps them.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

from partf.console import Meter
from partf.errors import DataError, UsageError

logger = logging.getLogger(__name__)

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
DEFAULT_VOCAB_SIZE = 12000
# WikiText writes hyphens inside words as " @-@ "; one piece keeps it intact.
USER_SYMBOLS = ("@-@",)
# The masked-language-model symbol, added only when asked (`mask_symbol=True`): adding it
# shifts every later piece's id, and the original project's ids must stay as they were.
MASK_PIECE = "[MASK]"


def model_path(sp_model_prefix: str | os.PathLike) -> Path:
    """The `.model` file of a SentencePiece prefix ("data/tokenizer/wiki2_12k").

    A path already ending in `.model` is returned as is.
    """
    prefix = str(sp_model_prefix)
    return Path(prefix if prefix.endswith(".model") else prefix + ".model")


def train_tokenizer(
    text_file: str | os.PathLike,
    sp_model_prefix: str | os.PathLike,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    lowercase: bool = True,
    overwrite: bool = False,
    input_sentence_size: int = 0,
    mask_symbol: bool = False,
) -> Path:
    """Trains a SentencePiece unigram model with the original project's settings and
    returns the `.model` path: `nfkc_cf` normalization when lowercasing (`nfkc`
    otherwise), `@-@` a user-defined symbol, ids pad=0 bos=1 eos=2 unk=3 (pieces `[PAD]`,
    `[BOS]`, `[EOS]`, `[UNK]`); trained in a temporary folder, moved into place on success.

    Args:
        text_file: the training text (the train split only).
        sp_model_prefix: writes `<prefix>.model` and `<prefix>.vocab`.
        vocab_size: number of pieces, special ids included.
        lowercase: fold case (nfkc_cf) so "The" and "the" share pieces.
        input_sentence_size: train on this many random lines (0: all), bounding time
            and memory on very large corpora.
        mask_symbol: also reserve `[MASK]` (id 5, after `@-@`) for masked language
            modelling; off keeps the original's ids.

    Raises:
        UsageError: non-positive vocab size, missing text, model in the way.
        DataError: the text cannot support `vocab_size` pieces (the message gives the
            largest size that works)."""
    text_file = Path(text_file)
    out_model = model_path(sp_model_prefix)
    out_vocab = out_model.with_suffix(".vocab")
    if vocab_size < 5:
        raise UsageError(
            f"--vocab_size must be at least 5 (4 special ids and one piece), got {vocab_size}"
        )
    if not text_file.is_file():
        raise UsageError(f"text file {text_file} does not exist; check the path")
    if out_model.exists() and not overwrite:
        raise UsageError(
            f"tokenizer {out_model} already exists; pass --overwrite to retrain it, "
            f"or drop --train_tokenizer to use it"
        )
    out_model.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_model.stem}.tmp-", dir=out_model.parent))
    try:
        logger.info(
            "training SentencePiece (vocab %d%s) on %s",
            vocab_size,
            ", lowercased" if lowercase else "",
            text_file,
        )
        start = time.perf_counter()
        try:
            spm.SentencePieceTrainer.train(
                input=str(text_file),
                model_prefix=str(staging / out_model.stem),
                vocab_size=vocab_size,
                user_defined_symbols=[*USER_SYMBOLS, *([MASK_PIECE] if mask_symbol else [])],
                normalization_rule_name="nfkc_cf" if lowercase else "nfkc",
                pad_id=PAD_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                pad_piece="[PAD]",
                bos_piece="[BOS]",
                eos_piece="[EOS]",
                unk_piece="[UNK]",
                input_sentence_size=input_sentence_size,
                shuffle_input_sentence=True,
                minloglevel=1,
            )
        except RuntimeError as e:
            raise _tokenizer_error(e, text_file, vocab_size) from None
        os.replace(staging / f"{out_model.stem}.model", out_model)
        os.replace(staging / f"{out_model.stem}.vocab", out_vocab)
        logger.info("trained the tokenizer in %.1f s", time.perf_counter() - start)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out_model


def _tokenizer_error(error: RuntimeError, text_file: Path, vocab_size: int) -> DataError:
    message = str(error)
    limit = re.search(r"Vocabulary size (?:is )?too high.*?<=\s*(\d+)", message)
    if limit:
        return DataError(
            f"--vocab_size={vocab_size} is more than the text in {text_file} can support "
            f"(at most {limit.group(1)}); pass --vocab_size={limit.group(1)} or less, "
            f"or train on more text"
        )
    first_line = message.strip().splitlines()[0] if message.strip() else type(error).__name__
    return DataError(f"SentencePiece could not train on {text_file}: {first_line}")


def load_sentencepiece(sp_model: str | os.PathLike) -> spm.SentencePieceProcessor:
    """Loads a `.model` file with the sentencepiece library (for ids <-> text); UsageError
    when it is missing, DataError when it is not a SentencePiece model."""
    sp_model = Path(sp_model)
    if not sp_model.is_file():
        raise UsageError(
            f"tokenizer model {sp_model} does not exist; pass --train_tokenizer to train one, "
            f"or --sp_model_prefix naming an existing model (without .model)"
        )
    try:
        return spm.SentencePieceProcessor(model_file=str(sp_model))
    except (RuntimeError, OSError) as e:
        raise DataError(f"{sp_model} is not a SentencePiece model ({e}); check the path") from None


def mask_id_of(sp_model: str | os.PathLike) -> int | None:
    """The id of `[MASK]` in a SentencePiece model file, or None when it has none."""
    sp = load_sentencepiece(sp_model)
    piece_id = sp.piece_to_id(MASK_PIECE)
    # sentencepiece answers unk's id for a piece it does not know.
    return piece_id if sp.id_to_piece(piece_id) == MASK_PIECE else None


def vocab_size_of(sp_model: str | os.PathLike) -> int:
    """Number of pieces in a SentencePiece model file."""
    return load_sentencepiece(sp_model).get_piece_size()


def graph_tokenizer(sp_model: str | os.PathLike, add_eos: bool = True) -> Any:
    """A tensorflow-text SentencepieceTokenizer of int32 ids for tf.data maps, optionally
    appending eos (id 2) to every line."""
    # Imported here: ids <-> text (partf-generate) needs only sentencepiece, and runs
    # where TensorFlow is not installed.
    import tensorflow as tf
    import tensorflow_text as tf_text

    load_sentencepiece(sp_model)  # one clear error for a missing or broken file
    model = Path(sp_model).read_bytes()
    return tf_text.SentencepieceTokenizer(model=model, out_type=tf.int32, add_eos=add_eos)


def tokenize_file(
    text_file: str | os.PathLike,
    sp_model: str | os.PathLike,
    out_file: str | os.PathLike,
    add_eos: bool = True,
    lines_per_step: int = 256,
    total_lines: int | None = None,
) -> int:
    """Tokenizes a text file line by line into a flat file of little-endian int32 ids
    (`read_token_file` reads it), inside a tf.data pipeline (parallel, in order), so
    memory stays bounded however large the text; returns the number of tokens.
    `add_eos` ends each line, empty ones included, with eos; `total_lines` is only for
    the progress lines."""
    import tensorflow as tf

    tokenizer = graph_tokenizer(sp_model, add_eos=add_eos)
    lines = tf.data.TextLineDataset(str(text_file), buffer_size=1 << 20)

    # Plain tensor code: skipping autograph's source conversion saves ~0.5 s.
    @tf.autograph.experimental.do_not_convert
    def tokenize(batch: Any) -> Any:
        return tokenizer.tokenize(batch).flat_values

    dataset = (
        lines.batch(lines_per_step)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        .prefetch(4)
    )
    num_tokens = num_lines = 0
    # Lines done of the file's with a rate and an ETA, on stderr, when it takes a while.
    meter = Meter(f"tokenizing {Path(text_file).name}", total_lines or 0, "lines")
    with open(out_file, "wb") as f:
        for ids in dataset.as_numpy_iterator():
            f.write(ids.astype("<i4", copy=False).tobytes())
            num_tokens += ids.size
            num_lines += lines_per_step
            if total_lines:
                meter.advance(min(num_lines, total_lines))
    return num_tokens


def read_token_file(path: str | os.PathLike) -> np.ndarray:
    """Memory-maps a token file written by `tokenize_file` (int32, read-only)."""
    if os.path.getsize(path) == 0:
        return np.zeros([0], np.int32)
    return np.memmap(path, dtype="<i4", mode="r")
