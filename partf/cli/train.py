"""partf-train: train a PAR Transformer-XL (also `python -m partf.train`).

Every flag of the original project's train.py works with the same meaning, in its absl
spellings too (`--cutoffs=250 --cutoffs=2500`, `--straight_through=False`,
`--notau_is_trainable`). Model defaults are the base configuration of base_model.sh
(d_model 128, 4 heads, d_ffn 512, 6 blocks, mem_len 16, cutoffs 250 and 2500, tau 1.0 to
0.1), not the larger defaults of the original train.py. `--cutoffs=` (empty) selects a
plain softmax. Mechanism options appear as `--attn_<option>` (see --help).

Exit status: 0 done, 1 failure while running, 2 bad usage, 128 + N stopped by signal N
(after a checkpoint; the same command resumes).

Example:
    partf-train --train_directory data/train --valid_directory data/valid \\
        --test_directory data/test --model_name base --epochs 20
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

PROG = "partf-train"

_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}

#: Flags that become ModelConfig fields (flag name == field name).
MODEL_FLAGS = (
    "d_model",
    "num_heads",
    "d_ffn",
    "num_layers",
    "mem_len",
    "dropout_rate",
    "cutoffs",
    "proj_factor",
    "proj_dims",
    "tie_embeddings",
    "straight_through",
    "clamp_len",
    "attention",
    "candidates",
    "architecture",
    "eval_mode",
    "sample_per_example",
    "tau_start",
    "tau_end",
    "tau_schedule",
    "tau_is_trainable",
)


class UsageExit(Exception):
    """A command-line mistake: printed on one line, exit status 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" only where the flag has a default of its own; model flags
    name the ModelConfig default in brackets instead."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageExit(f"{message} (see {self.prog} --help)")


def parse_bool(text: str) -> bool:
    """absl-style booleans: true/false, 1/0, yes/no, on/off (any case)."""
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _int_list(text: str) -> list[int]:
    """'250' or '250,2500' -> ints; '' -> [] (used to clear a list)."""
    parts = [part for part in text.replace(",", " ").split() if part]
    try:
        return [int(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers, got {text!r}") from None


def _name_list(text: str) -> list[str]:
    return [part for part in text.replace(",", " ").split() if part]


def _literal(text: str) -> Any:
    """An option value of unknown type: int, float, bool or string."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return text


class _Extend(argparse.Action):
    """Repeatable list flag; each occurrence may hold one or several comma-separated values.

    An empty value (`--cutoffs=`) clears the list, so `--cutoffs=` alone means "none".
    """

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None) or []
        setattr(namespace, self.dest, current + list(values) if values else [])


def _add_bool(group: argparse._ArgumentGroup, name: str, help_text: str, default=None) -> None:
    """--name, --name=VALUE and --noname, as absl accepts them."""
    group.add_argument(
        f"--{name}",
        nargs="?",
        const=True,
        default=default,
        type=parse_bool,
        metavar="BOOL",
        help=help_text,
    )
    group.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def attention_options() -> dict[str, dict[str, Any]]:
    """option -> {"default": {mechanism: default}, "help": text} over every attention
    mechanism that can be imported now (the `options` of each registered class)."""
    from partf.attention import attention_names, get_attention_class

    found: dict[str, dict[str, Any]] = {}
    # Options the model sets from its own flags (--mem_len, --clamp_len) are not repeated.
    own = set(MODEL_FLAGS)
    for name in attention_names():
        try:
            cls = get_attention_class(name)
        except Exception:  # a mechanism not written yet, or failing to import
            continue
        for option, (default, help_text) in getattr(cls, "options", {}).items():
            if option in own:
                continue
            entry = found.setdefault(option, {"default": {}, "help": help_text})
            entry["default"][name] = default
    return found


def _option_type(defaults: dict[str, Any]):
    kinds = {type(value) for value in defaults.values() if value is not None}
    if kinds == {bool}:
        return parse_bool
    if kinds == {int}:
        return int
    if kinds <= {int, float} and kinds:
        return float
    if kinds == {str}:
        return str
    return _literal


def build_parser(attn_options: dict[str, dict[str, Any]] | None = None) -> argparse.ArgumentParser:
    """The argument parser; `attn_options` as from `attention_options()`."""
    parser = _Parser(
        prog=PROG,
        description="Train a PAR Transformer-XL on context-batched TFRecords.",
        formatter_class=_HelpFormatter,
        allow_abbrev=False,
    )
    data = parser.add_argument_group("data (flags of the original train.py)")
    data.add_argument(
        "--train_directory",
        default="data/wikitext2_bsz32_seqlen32_tfrecords_train",
        help="folder of training .tfrecords",
    )
    data.add_argument(
        "--valid_directory",
        default="data/wikitext2_bsz32_seqlen32_tfrecords_valid",
        help="folder of validation .tfrecords ('' to skip validation)",
    )
    data.add_argument(
        "--test_directory",
        default="data/wikitext2_bsz32_seqlen32_tfrecords_test",
        help="folder of test .tfrecords ('' to skip the test)",
    )
    data.add_argument(
        "--sp_model_prefix",
        default="data/tokenizer/wiki2_12k",
        help="SentencePiece model prefix; gives the vocabulary size when the records carry "
        "no metadata.json",
    )

    model = parser.add_argument_group("model (defaults: base configuration)")
    model.add_argument("--d_model", type=int, help="embedding and hidden width [128]")
    model.add_argument("--num_heads", type=int, help="attention heads [4]")
    model.add_argument("--d_ffn", type=int, help="feed-forward inner width [512]")
    model.add_argument("--num_layers", type=int, help="stochastic blocks [6]")
    model.add_argument("--mem_len", type=int, help="XL memory length [16]")
    model.add_argument("--dropout_rate", type=float, help="dropout rate [0.1]")
    model.add_argument(
        "--cutoffs",
        type=_int_list,
        action=_Extend,
        help="adaptive softmax cutoff, repeatable or comma-separated, without the vocabulary "
        "size [250 2500]; --cutoffs= for a plain softmax",
    )
    model.add_argument(
        "--proj_factor", type=int, help="tail cluster i projects to d_model/proj_factor**i [4]"
    )
    model.add_argument(
        "--proj_dims",
        type=_int_list,
        action=_Extend,
        help="explicit tail projection widths, one per cluster (repeatable)",
    )
    _add_bool(model, "straight_through", "straight-through Gumbel-softmax [false]")
    _add_bool(model, "tie_embeddings", "tie output and input embeddings (plain softmax) [false]")
    model.add_argument("--clamp_len", type=int, help="largest relative distance encoded")
    model.add_argument(
        "--attention", help="attention mechanism of the 'attention' candidate [relative]"
    )
    model.add_argument(
        "--candidates",
        type=_name_list,
        action=_Extend,
        help="per-block choices, comma-separated or repeated [attention,dense,identity]",
    )
    model.add_argument(
        "--architecture", help="fixed architecture such as 'A A D D D I' (no search)"
    )
    model.add_argument(
        "--from_search",
        metavar="DIR",
        help="train the architecture a finished search found (checkpoints/NAME: argmax of pi "
        "per block, identity blocks dropped) as a fixed model, with that run's settings "
        "unless given here",
    )
    model.add_argument(
        "--eval_mode", help="block weights at evaluation: argmax, expected or sample [argmax]"
    )
    _add_bool(model, "sample_per_example", "one Gumbel sample per example [false]")
    model.add_argument("--tau_start", type=float, help="initial Gumbel temperature [1.0]")
    model.add_argument("--tau_end", type=float, help="final Gumbel temperature [0.1]")
    model.add_argument(
        "--tau_schedule",
        help="tau annealing: exponential, linear, cosine or constant [exponential]",
    )
    _add_bool(model, "tau_is_trainable", "learn tau [false]")

    attn = parser.add_argument_group("attention mechanism options (--attn_<option>)")
    for option, entry in sorted((attn_options or {}).items()):
        defaults = ", ".join(f"{name}={value!r}" for name, value in entry["default"].items())
        attn.add_argument(
            f"--attn_{option}",
            dest=f"attn_{option}",
            type=_option_type(entry["default"]),
            default=None,
            metavar="VALUE",
            help=f"{entry['help']} (defaults: {defaults})",
        )

    learn = parser.add_argument_group("optimization")
    learn.add_argument("--max_lr", type=float, default=1e-4, help="peak learning rate")
    learn.add_argument("--warmup_steps", type=int, default=4000, help="linear warm-up steps")
    learn.add_argument(
        "--lr_schedule",
        default="cosine",
        help="cosine (warm-up then cosine to zero), inverse_sqrt or constant",
    )
    learn.add_argument("--epochs", type=int, default=20, help="passes over the training data")
    learn.add_argument(
        "--max_steps", type=int, default=None, help="stop after this many steps (default: all)"
    )
    learn.add_argument("--opt_name", default="adam", help="Keras optimizer name")
    learn.add_argument(
        "--clipvalue", type=float, default=0.0, help="gradient clipping value (0: none)"
    )
    learn.add_argument("--weight_decay", type=float, default=None, help="decoupled weight decay")
    learn.add_argument(
        "--arch_lr",
        type=float,
        default=None,
        help="own learning rate of the architecture logits (PAR paper: 1e-2; default: shared)",
    )
    learn.add_argument(
        "--arch_weight_decay",
        type=float,
        default=None,
        help="own weight decay of the architecture logits (PAR paper: 5e-4)",
    )
    learn.add_argument(
        "--arch_freeze_steps",
        type=int,
        default=0,
        help="steps before the architecture logits learn (PAR paper: 10000)",
    )

    run = parser.add_argument_group("run")
    run.add_argument(
        "--model_name",
        default=None,
        help="name of the run's logs, checkpoints and plots (default: the current time)",
    )
    run.add_argument("--output_dir", default=".", help="root of logs/, checkpoints/, plots/")
    run.add_argument(
        "--steps_per_execution", type=int, default=32, help="train steps per compiled call"
    )
    _add_bool(run, "jit_compile", "compile the train step with XLA", default=True)
    _add_bool(run, "mixed_precision", "float16 (GPU) / bfloat16 (CPU) compute", default=False)
    run.add_argument("--seed", type=int, default=0, help="random seed")
    run.add_argument(
        "--distribution_strategy",
        default="default",
        choices=("default", "mirrored", "multi_worker", "tpu"),
        help="tf.distribute strategy: mirrored (local devices), multi_worker (TF_CONFIG), "
        "tpu; each replica keeps its own rows and memory (docs/scaling.md)",
    )
    run.add_argument("--log_every", type=int, default=100, help="steps between logged losses")
    run.add_argument(
        "--eval_every", type=int, default=0, help="steps between validations (0: each epoch)"
    )
    run.add_argument(
        "--ckpt_every", type=int, default=0, help="steps between checkpoints (0: each epoch)"
    )
    run.add_argument("--plot_every", type=int, default=1000, help="steps between pi heatmaps")
    run.add_argument(
        "--keep_checkpoints", type=int, default=5, help="how many newest checkpoints to keep"
    )
    _add_bool(
        run,
        "overwrite",
        "discard this model_name's logs, checkpoints and plots instead of resuming",
        default=False,
    )
    run.add_argument(
        "--spike_guard",
        default="off",
        choices=("off", "skip", "stop"),
        help="a step whose loss is a spike (> --spike_factor x running mean, or NaN): "
        "skip it, or stop the run; counted in training.log and TensorBoard",
    )
    run.add_argument(
        "--spike_factor", type=float, default=2.0, help="loss spike threshold over the mean"
    )
    run.add_argument(
        "--spike_warmup", type=int, default=100, help="steps before the spike guard judges"
    )
    _add_bool(run, "verbose", "show tracebacks and debug logs", default=False)
    return parser


def configs_from_args(args: argparse.Namespace):
    """TrainConfig from parsed flags (model fields only where given)."""
    from partf.training.config import TrainConfig

    model: dict[str, Any] = {}
    for name in MODEL_FLAGS:
        value = getattr(args, name)
        if value is None:
            continue
        model[name] = tuple(value) if isinstance(value, list) else value
    options = {
        key[len("attn_") :]: value
        for key, value in vars(args).items()
        if key.startswith("attn_") and value is not None
    }
    if options:
        model["attention_options"] = options
    model_name = args.model_name or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return TrainConfig(
        train_directory=args.train_directory,
        valid_directory=args.valid_directory,
        test_directory=args.test_directory,
        sp_model_prefix=args.sp_model_prefix,
        model_name=model_name,
        output_dir=args.output_dir,
        epochs=args.epochs,
        max_steps=args.max_steps,
        max_lr=args.max_lr,
        warmup_steps=args.warmup_steps,
        lr_schedule=args.lr_schedule,
        opt_name=args.opt_name,
        clipvalue=args.clipvalue,
        weight_decay=args.weight_decay,
        arch_lr=args.arch_lr,
        arch_weight_decay=args.arch_weight_decay,
        arch_freeze_steps=args.arch_freeze_steps,
        steps_per_execution=args.steps_per_execution,
        jit_compile=args.jit_compile,
        mixed_precision=args.mixed_precision,
        seed=args.seed,
        distribution_strategy=args.distribution_strategy,
        log_every=args.log_every,
        eval_every=args.eval_every,
        ckpt_every=args.ckpt_every,
        plot_every=args.plot_every,
        keep_checkpoints=args.keep_checkpoints,
        overwrite=args.overwrite,
        spike_guard=args.spike_guard,
        spike_factor=args.spike_factor,
        spike_warmup=args.spike_warmup,
        model=model,
    )


def _explicit_flags(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> set[str]:
    """Destinations of the flags `argv` gives (not those left at their defaults)."""
    saved = {action: action.default for action in parser._actions}
    try:
        for action in parser._actions:
            action.default = argparse.SUPPRESS
        return set(vars(parser.parse_args(argv)))
    finally:
        for action, default in saved.items():
            action.default = default


def parse_args(argv: Sequence[str] | None = None):
    """Parses `argv` into a `TrainConfig` and the --verbose flag.

    Raises:
        UsageExit: an unknown flag or a bad value.
        ConfigError: values that do not go together, or a --from_search folder
            without a finished search.
    """
    parser = build_parser(attention_options())
    args = parser.parse_args(argv)
    config = configs_from_args(args)
    if args.from_search:
        from partf.training.search import config_from_search

        config = config_from_search(args.from_search, config, _explicit_flags(parser, argv))
    return config, bool(args.verbose)


def _check_model_fields(config) -> None:
    """Validates the model flags early (before data is read), with stand-in sizes."""
    from partf.models.config import ModelConfig
    from partf.training.config import ConfigError

    fields = dict(config.model)
    cutoffs = fields.get("cutoffs", ModelConfig.__dataclass_fields__["cutoffs"].default)
    # The real vocabulary size comes from the data; a size past every cutoff lets the
    # other checks run now.
    stand_in = max([0, *cutoffs]) + 2
    try:
        ModelConfig(vocab_size=stand_in, **fields)
    except (TypeError, ValueError) as e:
        raise ConfigError(str(e)) from None


def _setup_logging(verbose: bool) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    root = logging.getLogger("partf")
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.propagate = False
    return handler


def _os_error_message(error: OSError) -> str:
    """One line for a failed write or read, with the fix for the usual causes."""
    from partf.data.errors import os_error_message

    message = os_error_message(
        error,
        "while writing output",
        "free some space or choose another --output_dir, then run the same command again to resume",
    )
    return message + "."


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = any(arg in ("--verbose", "--verbose=true", "--verbose=True") for arg in argv)
    if not verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    def fail(message: str, status: int, error: BaseException | None = None) -> int:
        if verbose and error is not None:
            import traceback

            traceback.print_exception(error)
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return status

    try:
        config, verbose = parse_args(argv)
        _check_model_fields(config)
    except UsageExit as e:
        return fail(str(e), 2, e)
    except ValueError as e:  # ConfigError and the model's own validation
        return fail(str(e), 2, e)

    from partf.data.errors import DataError, UsageError
    from partf.training.checkpoint import CheckpointError
    from partf.training.trainer import TrainingError, TrainingInterrupted, train

    handler = _setup_logging(verbose)
    try:
        train(config)
    except UsageError as e:  # includes ConfigError
        return fail(str(e), 2, e)
    except TrainingInterrupted as e:
        return fail(str(e), 128 + e.signum, e)
    except (DataError, CheckpointError, TrainingError) as e:
        return fail(str(e), 1, e)
    except KeyboardInterrupt as e:
        return fail("interrupted.", 130, e)
    except OSError as e:
        return fail(_os_error_message(e), 1, e)
    except Exception as e:  # anything else is a bug or an environment problem
        return fail(
            f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
            "(rerun with --verbose for the traceback).",
            1,
            e,
        )
    finally:
        logging.getLogger("partf").removeHandler(handler)
    return 0


def run() -> NoReturn:
    """Console entry point `partf-train`."""
    sys.exit(main())


if __name__ == "__main__":
    run()
