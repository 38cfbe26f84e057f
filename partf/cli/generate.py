"""partf-generate: continue a prompt with a trained PAR Transformer-XL.

The prompt is read once; then each new token is fed alone with the carried
state (XL memory or a linear attention's running sums), so a token costs
the same however long the text is. The text printed is the prompt and its
continuation, decoded with the SentencePiece model (end-of-line tokens
become line breaks; the tokenizer may have lowercased the prompt).

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
import json
import logging
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROG = "partf-generate"
logger = logging.getLogger("partf.cli.generate")

#: With --compile auto, fewer tokens than this run eagerly. Measured on the base
#: configuration (2 CPU cores): tracing the step as a graph takes about 5 s, an
#: eager step about 0.4 s and a graph step about 0.01 s, so a graph pays off
#: from about 12 tokens on. XLA compiled for 20 s and was no faster per step.
EAGER_BELOW = 16

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}


class UsageExit(Exception):
    """A command-line mistake: printed on one line, exit status 2."""


class RuntimeExit(Exception):
    """A failure while running: printed on one line, exit status 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + message
        raise UsageExit(f"{message}; see {PROG} --help")


def _parse_bool(text: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def build_parser() -> argparse.ArgumentParser:
    """The flags, `--name VALUE` and `--name=VALUE` alike."""
    parser = _Parser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model", required=True, help="a .keras file, or a run's checkpoints/<model_name> folder"
    )
    parser.add_argument(
        "--sp_model",
        help="SentencePiece .model file (or prefix without .model); default: the run's "
        "tokenizer from config.json",
    )
    parser.add_argument("--prompt", default="", help="text to continue (default: a new line)")
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
    parser.add_argument(
        "--verbose",
        nargs="?",
        const=True,
        default=False,
        type=_parse_bool,
        metavar="BOOL",
        help="debug logs, and tracebacks on errors",
    )
    parser.add_argument("--noverbose", dest="verbose", action="store_false", help=argparse.SUPPRESS)
    return parser


def _check_values(args: argparse.Namespace) -> None:
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


# --------------------------------------------------------------------- model
def _read_run_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's config.json ({"model": ..., "training": ...}), or None if absent."""
    path = run_dir / "config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise RuntimeExit(f"cannot read {path} ({e}); pass --sp_model and a .keras file") from None
    return config if isinstance(config, dict) else None


def _load_keras(path: Path) -> Any:
    import zipfile

    import keras

    import partf.models  # noqa: F401  (registers the classes the file names)
    from partf.models import PARTransformerXL

    if not zipfile.is_zipfile(path):
        # Keras answers "File not found" for a damaged archive; say what is wrong instead.
        raise RuntimeExit(
            f"cannot load {path}: not a readable .keras file (truncated or corrupt); pass another "
            "--model, or the run's checkpoints/<model_name> folder to use its newest checkpoint"
        )
    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as e:  # a damaged member, another Keras version, a foreign file
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RuntimeExit(f"cannot load {path}: {first}") from e
    if not isinstance(model, PARTransformerXL):
        raise UsageExit(f"{path} holds a {type(model).__name__}, not a partf PARTransformerXL")
    return model


def _load_checkpoint(run_dir: Path, run_config: dict[str, Any] | None) -> Any:
    from partf.models import ModelConfig, PARTransformerXL
    from partf.training.checkpoint import CheckpointError, CheckpointManager, restore_variables

    found = CheckpointManager(run_dir).load_latest()
    if found is None:
        raise UsageExit(
            f"{run_dir} holds no .keras file and no checkpoint; pass a .keras file or a "
            "run's checkpoints/<model_name> folder"
        )
    groups, meta, path = found
    model_fields = (run_config or {}).get("model") or meta.get("config", {}).get("model")
    if not model_fields:
        raise RuntimeExit(f"{path} has no model configuration and {run_dir} no config.json")
    model = PARTransformerXL(ModelConfig.from_dict(model_fields), name=run_dir.name)
    try:
        restore_variables(model.variables, groups["model"], "model")
    except (CheckpointError, KeyError) as e:
        raise RuntimeExit(f"cannot restore {path}: {e}") from e
    logger.info("loaded checkpoint %s (step %s)", path, meta.get("step"))
    return model


def load_model(path: str | os.PathLike) -> tuple[Any, Path]:
    """Loads a `.keras` file or a run folder.

    Args:
        path: a `.keras` file, or checkpoints/<model_name>: its
            <model_name>.keras (or its only .keras file), else its newest
            checkpoint rebuilt from config.json.

    Returns:
        (the PARTransformerXL, the folder where the run's config.json would be).

    Raises:
        UsageExit: the path does not exist or holds no model.
        RuntimeExit: the model file cannot be read.
    """
    path = Path(path)
    if path.is_file():
        return _load_keras(path), path.parent
    if not path.is_dir():
        raise UsageExit(
            f"--model {path} does not exist; pass a .keras file or a run's "
            "checkpoints/<model_name> folder"
        )
    preferred = path / f"{path.name}.keras"
    candidates = [preferred] if preferred.is_file() else sorted(path.glob("*.keras"))
    if len(candidates) > 1:
        names = ", ".join(p.name for p in candidates)
        raise UsageExit(f"{path} holds several .keras files ({names}); pass one of them")
    if candidates:
        return _load_keras(candidates[0]), path
    return _load_checkpoint(path, _read_run_config(path)), path


def find_sp_model(explicit: str | None, run_dir: Path) -> Path:
    """The SentencePiece model: --sp_model, or the one the run's config.json names.

    A relative path from config.json is tried from the current folder, then
    from the run folder and each folder above it (training may have run
    anywhere above its output).
    """
    from partf.data import model_path

    if explicit:
        path = model_path(explicit)
        if not path.is_file():
            raise UsageExit(f"--sp_model {path} does not exist; check the path")
        return path
    config = _read_run_config(run_dir)
    prefix = ((config or {}).get("training") or {}).get("sp_model_prefix")
    if not prefix:
        raise UsageExit(
            f"no tokenizer given and no config.json naming one beside the model in {run_dir}; "
            "pass --sp_model path/to/tokenizer.model"
        )
    relative = model_path(prefix)
    tried = (
        [relative]
        if relative.is_absolute()
        else [relative, *(d / relative for d in (run_dir.resolve(), *run_dir.resolve().parents))]
    )
    for candidate in tried:
        if candidate.is_file():
            return candidate
    raise UsageExit(
        f"the run's tokenizer {relative} was not found from here or above {run_dir}; "
        "pass --sp_model path/to/tokenizer.model"
    )


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
    from partf.data.errors import DataError, UsageError
    from partf.generation import Generator, Sampling, reconfigure

    model, run_dir = load_model(args.model)
    try:
        sp = load_sentencepiece(find_sp_model(args.sp_model, run_dir))
    except UsageError as e:
        raise UsageExit(str(e)) from e
    except DataError as e:
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
    return decode(sp, [*prompt[1:], *tokens.tolist()])


def run(argv: Sequence[str] | None = None) -> int:
    """Entry point of partf-generate; returns the exit status.

    Args:
        argv: arguments without the program name; default sys.argv[1:].
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(arg in ("--verbose", "--verbose=true", "--verbose=True") for arg in argv)

    def fail(message: str, status: int, error: BaseException | None = None) -> int:
        if verbose and error is not None:
            import traceback

            traceback.print_exception(error)
        print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
        return status

    try:
        args = build_parser().parse_args(argv)
        _check_values(args)
    except UsageExit as e:
        return fail(str(e), 2, e)
    if not args.verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("partf: %(message)s"))
    package_logger = logging.getLogger("partf")
    package_logger.addHandler(handler)
    old_level = package_logger.level
    package_logger.setLevel(logging.DEBUG if args.verbose else logging.INFO)
    try:
        text = _main(args)
    except UsageExit as e:
        return fail(str(e), 2, e)
    except RuntimeExit as e:
        return fail(str(e), 1, e)
    except KeyboardInterrupt as e:
        return fail("interrupted", 130, e)
    except Exception as e:  # anything else is a bug or an environment problem
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return fail(
            f"unexpected {type(e).__name__}: {first} (rerun with --verbose for the traceback)",
            1,
            e,
        )
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(old_level)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(run())
