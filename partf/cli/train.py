"""partf-train: train a PAR Transformer-XL (also `python -m partf.train`).

Every flag of the original project's train.py works with the same meaning, in its absl
spellings too (`--cutoffs=250 --cutoffs=2500`, `--notau_is_trainable`); the model
defaults are base_model.sh's, not the original train.py's. Mechanism options are
`--attn_<option>` (every chosen mechanism that takes it) and `--attn_<mechanism>_<option>`
(that one alone, winning over the shared flag). The flags are generated from the
settings' fields (partf/cli/flags.py), read from the source (partf/cli/settings_source.py)
so that `--help` and a mistyped flag answer without Keras; model flags stay unset unless
given, so that ModelConfig's default applies.

Exit status: 0 done, 1 failure while running, 2 bad usage, 128 + N stopped by signal N
(after a checkpoint; the same command resumes).
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from partf.cli import exits, flags, settings_source
from partf.cli.exits import wants_verbose

PROG = "partf-train"

#: --help sections of the parser, in order: a setting's `group` names one of them
#: (ModelConfig's settings all go to "model"; "attention" holds the --attn_<option> flags).
SECTIONS = {
    "data": "data (flags of the original train.py)",
    "model": "model (defaults: base configuration)",
    "attention": "attention mechanism options (--attn_<option>)",
    "optimization": "optimization",
    "run": "run",
}


class UsageExit(Exception):
    """A command-line mistake: printed on one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageExit(f"{message} (see {self.prog} --help)")


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


def attention_options(
    mechanisms: Mapping[str, Mapping[str, tuple[Any, str]]] | None = None,
) -> dict[str, dict[str, Any]]:
    """option -> {"default": {mechanism: default}, "help": text}: each shared option, and
    each `<mechanism>_<option>` that sets it for one mechanism only, of `mechanisms` (name
    -> option -> (default, help); default: `settings_source.mechanism_options()`)."""
    if mechanisms is None:
        mechanisms = settings_source.mechanism_options()
    found: dict[str, dict[str, Any]] = {}
    own_flags: dict[str, dict[str, Any]] = {}
    # Options the model sets from its own flags (--mem_len, --clamp_len) are not repeated.
    own = {setting.name for setting in settings_source.model_settings()}
    for name, options in sorted(mechanisms.items()):
        for option, (default, help_text) in options.items():
            if option in own:
                continue
            entry = found.setdefault(option, {"default": {}, "help": help_text})
            entry["default"][name] = default
            own_flags[f"{name}_{option}"] = {
                "default": {name: default},
                "help": f"{help_text}; {name} only",
            }
    clashes = sorted(set(found) & set(own_flags))
    if clashes:  # a mechanism's option named like another's mechanism-prefixed one
        raise RuntimeError(f"attention option names clash: {', '.join(clashes)}")
    return {**found, **own_flags}


def _option_type(defaults: dict[str, Any]):
    kinds = {type(value) for value in defaults.values() if value is not None}
    if kinds == {bool}:
        return flags.parse_bool
    if kinds == {int}:
        return int
    if kinds <= {int, float} and kinds:
        return float
    if kinds == {str}:
        return str
    return _literal


def build_parser(attn_options: dict[str, dict[str, Any]] | None = None) -> argparse.ArgumentParser:
    """The argument parser: a flag per setting of `TrainConfig` and `ModelConfig`, plus
    --from_search, --verbose and the --attn_<option> flags of `attn_options` (as from
    `attention_options()`). The settings are read from the source
    (`partf.cli.settings_source`), so building the parser imports neither Keras nor
    TensorFlow.
    """
    train_settings = settings_source.train_settings()
    model_settings = settings_source.model_settings()
    parser = _Parser(
        prog=PROG,
        description="Train a PAR Transformer-XL on context-batched TFRecords.",
        formatter_class=flags.HelpFormatter,
        allow_abbrev=False,
    )
    # Groups list their flags in --help in the order they are made; the usage line lists
    # all flags in the order they are added, so each section is filled in turn.
    groups = {name: parser.add_argument_group(title) for name, title in SECTIONS.items()}
    flags.add_flags(groups["data"], train_settings, group="data")

    # Model flags stay None unless given, so that ModelConfig's own default applies.
    flags.add_flags(groups["model"], model_settings, unset=True)
    groups["model"].add_argument(
        "--from_search",
        metavar="DIR",
        help="train the architecture a finished search found (checkpoints/NAME: argmax of pi "
        "per block, identity blocks dropped) as a fixed model, with that run's settings "
        "unless given here",
    )
    for option, entry in sorted((attn_options or {}).items()):
        defaults = ", ".join(f"{name}={value!r}" for name, value in entry["default"].items())
        groups["attention"].add_argument(
            f"--attn_{option}",
            dest=f"attn_{option}",
            type=_option_type(entry["default"]),
            default=None,
            metavar="VALUE",
            help=f"{entry['help']} (defaults: {defaults})",
        )

    flags.add_flags(groups["optimization"], train_settings, group="optimization")
    # A run is named after the time it starts, as in the original train.py.
    flags.add_flags(
        groups["run"],
        train_settings,
        group="run",
        defaults={"model_name": (None, "the current time")},
    )
    flags.add_bool_flag(groups["run"], "verbose", "show tracebacks and debug logs", default=False)
    return parser


def model_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The ModelConfig fields the parsed flags give (those not given left out, so that
    ModelConfig's default or a preset applies), the --attn_* flags as attention_options."""
    model = flags.flag_values(args, settings_source.model_settings(), unset=True)
    options = {
        key[len("attn_") :]: value
        for key, value in vars(args).items()
        if key.startswith("attn_") and value is not None
    }
    if options:
        model["attention_options"] = options
    return model


def training_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields the parsed flags give, model_name the current time unless
    given (as the original train.py names a run)."""
    values = flags.flag_values(args, settings_source.train_settings())
    values["model_name"] = values["model_name"] or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return values


def configs_from_args(args: argparse.Namespace):
    """TrainConfig from parsed flags (its model made from the model flags given)."""
    from partf.training.config import TrainConfig

    return TrainConfig(**training_flags(args), model=model_flags(args))


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


#: The candidate kinds besides attention names (`partf.layers.candidates.BUILTIN_CANDIDATES`;
#: tests/cli/test_quiet.py checks the copy).
CANDIDATE_KINDS = ("attention", "dense", "identity")


def check_mechanism_names(args: argparse.Namespace) -> None:
    """UsageExit for an unknown --attention or --candidates name, with ModelConfig's
    message, from the mechanisms the source declares (partf's own, the only ones a command
    line can name), so that the mistake is answered before the configurations and
    TensorFlow load."""
    mechanisms = settings_source.mechanism_options()
    names = ", ".join(sorted(mechanisms))
    if args.attention is not None and args.attention not in mechanisms:
        raise UsageExit(f"unknown attention {args.attention!r}; valid names: {names}.")
    for name in args.candidates or ():
        if name not in CANDIDATE_KINDS and name not in mechanisms:
            raise UsageExit(
                f"unknown candidate {name!r}; use one of {', '.join(CANDIDATE_KINDS)} "
                f"or an attention name: {names}."
            )


def parse_args(argv: Sequence[str] | None = None):
    """Parses `argv` into a `TrainConfig` and the --verbose flag: UsageExit for an unknown
    flag or a bad value, ConfigError for values that do not go together or a
    --from_search folder without a finished search."""
    parser = build_parser(attention_options())
    args = parser.parse_args(argv)
    check_mechanism_names(args)
    # Only now: the configurations import Keras, and the mistakes above are answered
    # without it (tests/cli/test_quiet.py).
    from partf.training.config import TrainConfig
    from partf.training.drop_selection import IDENTITY
    from partf.training.resolve import model_error

    if args.from_search:
        from partf.training.search import config_from_search

        # The model flags are checked with the search's model fields they join.
        given = TrainConfig(**training_flags(args))
        explicit = _explicit_flags(parser, argv)
        config = config_from_search(args.from_search, given, explicit, model=model_flags(args))
    else:
        config = configs_from_args(args)
    try:
        # The model ignores an option no chosen mechanism takes; on the command line
        # it is a mistyped or misplaced flag. --drop_attention_to's mechanism is chosen
        # too: its options shape the blocks it replaces (TrainConfig refuses it without
        # --drop_attention).
        replacing = config.drop_attention_to
        config.model.check_attention_options(() if replacing == IDENTITY else (replacing,))
    except ValueError as e:
        raise model_error(e) from None
    return config, bool(args.verbose)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command; returns the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = wants_verbose(argv)
    exits.quiet_tensorflow(verbose)

    def fail(message: str, status: int, error: BaseException | None = None) -> int:
        return exits.fail(PROG, message, status, error, verbose)

    try:
        config, verbose = parse_args(argv)
    except (UsageExit, ValueError) as e:  # ValueError: ConfigError and the model's own checks
        return fail(str(e), 2, e)

    from partf.errors import DataError, UsageError, os_error_message
    from partf.training.checkpoint import CheckpointError
    from partf.training.trainer import TrainingError, TrainingInterrupted, train

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    package_logger = logging.getLogger("partf")
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.DEBUG if verbose else logging.INFO)
    package_logger.propagate = False
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
        fix = "free some space or choose another --output_dir, then run the same command again"
        return fail(os_error_message(e, "while writing output", f"{fix} to resume") + ".", 1, e)
    except Exception as e:  # anything else is a bug or an environment problem
        return fail(exits.unexpected(e), 1, e)
    finally:
        package_logger.removeHandler(handler)
    return 0


def run() -> NoReturn:
    """Console entry point `partf-train`."""
    sys.exit(main())


if __name__ == "__main__":
    run()
