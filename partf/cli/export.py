"""partf-export: write a trained model for decoding where partf is not installed.

A TensorFlow SavedModel (--format saved_model) holds the signatures prefill, step
and generate_ids, with the carried state (XL memory, linear-attention sums, the
sliding window, a softmax cache) as named tensors of fixed shape, and generate,
from text to text with the run's tokenizer in the graph. A LiteRT flatbuffer
(--format litert) holds prefill (chunks of 64 tokens) and step. Each folder also
holds export.json (the state tensors, the context, the signatures) and decode.py,
a client that needs no partf. See docs/export.md.

Examples:
    partf-export --model checkpoints/base --out exported/base --context 1024
    partf-export --model checkpoints/base --out exported/base_litert --format litert

--model takes a `.keras` file or a run's checkpoint folder, as partf-generate.
--out must not exist; it is written beside it under a temporary name and renamed
when complete, so it is never half-written.

Exit status: 0 done, 1 failure while running, 2 bad usage (a search supernet, an
attention with no state, a missing tokenizer, an existing --out). Errors print one
line; --verbose adds the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from partf.cli.command import model_parser, run_command
from partf.cli.flags import add_bool_flag
from partf.cli.loading import UsageExit, find_sp_model, load_model, model_file

PROG = "partf-export"
FORMATS = ("saved_model", "litert")


def build_parser() -> argparse.ArgumentParser:
    parser = model_parser(PROG, __doc__)
    parser.add_argument("--out", required=True, help="the export folder to write (must not exist)")
    parser.add_argument("--format", choices=FORMATS, default="saved_model", help="what to write")
    parser.add_argument(
        "--context",
        type=int,
        help="tokens of XL memory or softmax cache the state keeps, and the longest prompt "
        "(default: the model's mem_len)",
    )
    parser.add_argument("--batch_size", type=int, default=1, help="rows of the state")
    parser.add_argument(
        "--sp_model",
        help="SentencePiece .model of the text signature; default: the run's tokenizer",
    )
    add_bool_flag(
        parser, "text", "add the text-to-text signature (SavedModel; needs the tokenizer)", True
    )
    add_bool_flag(parser, "verbose", "debug logs, and tracebacks on errors", default=False)
    return parser


def _parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.context is not None and args.context < 0:
        raise UsageExit(f"--context must be >= 0, got {args.context}")
    if args.batch_size < 1:
        raise UsageExit(f"--batch_size must be >= 1, got {args.batch_size}")
    out = Path(args.out)
    if out.exists():
        raise UsageExit(f"--out {out} exists; pass a new folder or remove it first")
    model_file(args.model)  # a wrong path answered before TensorFlow loads
    return args


def _main(args: argparse.Namespace) -> str:
    from partf.data import load_sentencepiece
    from partf.errors import DataError, UsageError
    from partf.export import export

    model, run_dir = load_model(args.model)
    sp_model = None
    if args.format == "saved_model" and args.text:
        try:
            sp_model = find_sp_model(args.sp_model, run_dir)
        except UsageExit as e:
            raise UsageExit(f"{e} (or --notext for no text signature)") from e
        try:
            pieces = load_sentencepiece(sp_model).get_piece_size()
        except DataError as e:
            raise UsageExit(str(e)) from e
        if pieces != model.config.vocab_size:
            raise UsageExit(
                f"the tokenizer has {pieces} pieces but the model {model.config.vocab_size}; "
                "pass the --sp_model the model was trained with"
            )
    context = model.config.mem_len if args.context is None else args.context
    try:
        out = export(model, args.out, context, args.format, args.batch_size, sp_model)
    except UsageError as e:
        raise UsageExit(str(e)) from e
    return f"wrote {out} ({args.format}, context {context})"


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point of partf-export: the exit status of a run on `argv`."""
    return run_command(PROG, argv, _parse, _main)


if __name__ == "__main__":
    sys.exit(run())
