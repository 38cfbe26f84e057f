"""partf-generate: continue a prompt with a trained PAR Transformer-XL.

The prompt is read once; then each new token is fed alone with the carried
state (XL memory or a linear attention's running sums), so a token costs
the same however long the text is. The text printed is the prompt, then
--separator (" | "), then the continuation, each decoded with the
SentencePiece model (end-of-line tokens become line breaks; the tokenizer
may have lowercased the prompt). Without a prompt only the continuation is
printed; --separator "" prints the two as one text.

Examples:
    partf-generate --model checkpoints/base --prompt "the game was released" \\
        --max_tokens 60 --temperature 0.8 --top_p 0.9 --seed 1
    partf-generate --model run.keras --sp_model data/tokenizer/wiki2_12k.model \\
        --prompt "= valkyria chronicles =" --top_k 40 --mem_len 256

--model takes a `.keras` file or a run's checkpoint folder
(checkpoints/<model_name>: its <model_name>.keras, or else its newest
checkpoint rebuilt from config.json). --sp_model defaults to the tokenizer
named in the run's config.json, looked for from the current folder and then
from each folder above the run's.

Exit status: 0 done, 1 failure while running (an unreadable model file),
2 bad usage (bad values, missing files, a tokenizer that does not fit the
model). Errors print one line; --verbose adds the traceback.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from partf.cli.command import model_parser, run_command
from partf.cli.flags import add_bool_flag

# Loading lives in its own module; its names stay importable from here.
from partf.cli.loading import RuntimeExit, UsageExit, find_sp_model, load_model, model_file

__all__ = [
    "RuntimeExit",
    "UsageExit",
    "build_parser",
    "decode",
    "find_sp_model",
    "load_model",
    "run",
]

PROG = "partf-generate"
logger = logging.getLogger("partf.cli.generate")

#: With --compile auto, fewer tokens than this run eagerly. Measured on the base
#: configuration (2 CPU cores): tracing the step as a graph takes about 5 s, an
#: eager step about 0.4 s and a graph step about 0.01 s, so a graph pays off
#: from about 12 tokens on. XLA compiled for 20 s and was no faster per step.
EAGER_BELOW = 16

#: Between the prompt and the continuation: the first generated piece often continues
#: the prompt's last word ("=" then "1ing"), which would read as part of the prompt.
SEPARATOR = " | "


def build_parser() -> argparse.ArgumentParser:
    """The flags, `--name VALUE` and `--name=VALUE` alike."""
    parser = model_parser(PROG, __doc__)
    parser.add_argument(
        "--sp_model",
        help="SentencePiece .model file (or prefix without .model); default: the run's "
        "tokenizer from config.json",
    )
    parser.add_argument("--prompt", default="", help="text to continue (default: a new line)")
    parser.add_argument(
        "--separator",
        default=SEPARATOR,
        help="printed between the prompt and the generated text, so that the boundary shows "
        "even inside a word; '' joins them",
    )
    parser.add_argument("--max_tokens", type=int, default=100, help="tokens to generate")
    parser.add_argument(
        "--temperature", type=float, default=1.0, help="sampling temperature; 0 is greedy"
    )
    parser.add_argument(
        "--top_k", type=int, default=0, help="sample among the k most likely tokens (0: all)"
    )
    parser.add_argument(
        "--top_p",
        type=float,
        default=1.0,
        help="sample from the smallest set of tokens with this much probability, in (0, 1]",
    )
    parser.add_argument("--seed", type=int, help="seed of the draws (default: random, logged)")
    parser.add_argument(
        "--mode",
        choices=["carried", "recompute"],
        default="carried",
        help="carry the state from token to token, or recompute the last --context_len "
        "tokens at every step (slow; a reference)",
    )
    parser.add_argument(
        "--context_len", type=int, default=512, help="window of --mode recompute, in tokens"
    )
    parser.add_argument(
        "--mem_len",
        type=int,
        help="XL memory length for generation (default: the model's); longer memories "
        "let each new token see more of the text",
    )
    parser.add_argument(
        "--compile",
        choices=["auto", "eager", "graph", "xla"],
        default="auto",
        help="how the decoding step runs: op by op (eager), as a TensorFlow graph, or "
        f"compiled with XLA; auto: eager below {EAGER_BELOW} tokens, where tracing a graph "
        "would cost more than it saves, else graph",
    )
    add_bool_flag(parser, "verbose", "debug logs, and tracebacks on errors", default=False)
    return parser


def _parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if args.max_tokens < 0:
        raise UsageExit(f"--max_tokens must be >= 0, got {args.max_tokens}; e.g. --max_tokens 100")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise UsageExit(
            f"--temperature must be >= 0, got {args.temperature}; 0 is greedy, 1 samples the "
            "model's distribution"
        )
    if args.top_k < 0:
        raise UsageExit(f"--top_k must be >= 0 (0: no limit), got {args.top_k}")
    if not 0.0 < args.top_p <= 1.0:
        raise UsageExit(f"--top_p must be in (0, 1] (1: no limit), got {args.top_p}")
    if args.context_len < 1:
        raise UsageExit(f"--context_len must be >= 1, got {args.context_len}")
    if args.mem_len is not None and args.mem_len < 0:
        raise UsageExit(f"--mem_len must be >= 0, got {args.mem_len}")
    model_file(args.model)  # a wrong path answered before TensorFlow loads
    return args


# ---------------------------------------------------------------------- text
def decode(sp: Any, ids: Sequence[int]) -> str:
    """Token ids -> text; each end-of-line token (eos) becomes a line break."""
    from partf.data import EOS_ID

    lines, current = [], []
    for token in ids:
        if token == EOS_ID:
            lines.append(current)
            current = []
        else:
            current.append(int(token))
    lines.append(current)
    return "\n".join(sp.decode(line) for line in lines)


def _main(args: argparse.Namespace) -> str:
    from partf.data import EOS_ID, load_sentencepiece
    from partf.errors import DataError, UsageError
    from partf.generation import Generator, Sampling, reconfigure

    model, run_dir = load_model(args.model)
    try:
        sp = load_sentencepiece(find_sp_model(args.sp_model, run_dir))
    except (UsageError, DataError) as e:
        raise UsageExit(str(e)) from e
    if sp.get_piece_size() != model.config.vocab_size:
        raise UsageExit(
            f"the tokenizer has {sp.get_piece_size()} pieces but the model "
            f"{model.config.vocab_size}; pass the --sp_model the model was trained with"
        )
    # Memory sized for one stream (and the requested length) instead of the training batch.
    changes = {"batch_size": 1}
    if args.mem_len is not None:
        changes["mem_len"] = args.mem_len
    model = reconfigure(model, **changes)

    # A leading end-of-line puts the model at the start of a line, as in training.
    prompt = [EOS_ID, *sp.encode(args.prompt)]
    try:
        compile_as = args.compile
        if compile_as == "auto":
            compile_as = "eager" if args.max_tokens < EAGER_BELOW else "graph"
        generator = Generator(
            model,
            mode=args.mode,
            context_len=args.context_len,
            compiled=compile_as != "eager",
            jit_compile=compile_as == "xla",
        )
    except ValueError as e:
        raise UsageExit(f"{e} (--mode recompute, or --mem_len N)") from e
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
    sampling = Sampling(args.temperature, args.top_k, args.top_p)
    logger.info(
        "%s: %d prompt tokens, mode %s, step %s, memory %d, seed %d (pass --seed %d to repeat)",
        args.model,
        len(prompt) - 1,
        args.mode,
        compile_as,
        model.config.mem_len,
        seed,
        seed,
    )
    start = time.perf_counter()
    tokens = generator.generate([prompt], args.max_tokens, sampling, seed=seed).tokens[0]
    elapsed = time.perf_counter() - start
    logger.info("%d tokens in %.2f s", len(tokens), elapsed)
    if args.separator == "" or not args.prompt:
        return decode(sp, [*prompt[1:], *tokens.tolist()])
    return decode(sp, prompt[1:]) + args.separator + decode(sp, tokens.tolist())


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point of partf-generate: the exit status of a run on `argv` (the arguments
    without the program name; default sys.argv[1:])."""
    return run_command(PROG, argv, _parse, _main)


if __name__ == "__main__":
    sys.exit(run())
