"""partf-build-data: text -> SentencePiece tokenizer -> context-batched TFRecords.

Accepts the original project's build_data.py flags, absl spellings included
(`--nolowercase`, `--overwrite=false`). Typical uses:

    # WikiText-2 (partf's copy, or downloaded where it has none), checked, then records:
    partf-build-data --source=wikitext-2 --train_tokenizer
    # a folder with train.txt, valid.txt, test.txt:
    partf-build-data --text_file=path/to/folder --from_directory --train_tokenizer
    # one file into one record folder, with an existing tokenizer:
    partf-build-data --text_file=notes.txt --tfrecords_directory=data/notes_tfrecords \
        --sp_model_prefix=data/tokenizer/wiki2_12k

Outputs: `<sp_model_prefix>.model/.vocab` when training a tokenizer, and
`<tfrecords_directory>_{train,valid,test}/` for a folder (or
`<tfrecords_directory>/` for one file), each with shards and metadata.json.

--task=<name> writes the splits of a synthetic task instead (partf.tasks: mqar, copy,
...), each `<tfrecords_directory>_{train,valid,test}/` with its `<name>.json`, from
--seq_len, --batch_size, --vocab_size and the task's own `--<name>_<setting>` flags:

    partf-build-data --task=mqar --seq_len=256 --mqar_pairs=4,8,16

Never prompts: outputs that exist need --overwrite. Errors print one line; the
exit status is 2 for a bad command line (bad values, missing paths, outputs in
the way) and 1 for problems found while working (empty or non-UTF-8 text,
too little text, no network). --verbose adds the traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from partf.cli import exits
from partf.cli.command import OneLineParser
from partf.cli.flags import HelpFormatter, add_bool_flag, add_flags, settings_of
from partf.cli.loading import UsageExit
from partf.tasks.base import SHARED

PROG = "partf-build-data"


class _Help(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """The module docstring as written, and each flag's default."""


def build_parser() -> argparse.ArgumentParser:
    """The flags every task shares, then each task's own (partf.tasks)."""
    from partf import tasks

    parser = OneLineParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=_Help,
        allow_abbrev=False,
    )
    parser.add_argument(
        "--task",
        default=tasks.records_task().name,
        choices=list(tasks.all_tasks()),
        help="What to build: "
        + "; ".join(f"{t.name}: {t.help}" for t in tasks.all_tasks().values()),
    )
    parser.add_argument(
        "--batch_size", type=int, default=32, help="Rows per batch (parallel streams)."
    )
    parser.add_argument(
        "--seq_len",
        type=int,
        default=32,
        help="Tokens per row per batch (each record holds seq_len + 1).",
    )
    parser.add_argument(
        "--vocab_size",
        type=int,
        help="Pieces in a newly trained tokenizer (default 12000), or a task's vocabulary "
        "(default: the task's own).",
    )
    parser.add_argument(
        "--tfrecords_directory",
        help="Record folder for one file, or prefix of the _train/_valid/_test folders. "
        "Default: data/wikitext2_bsz<batch_size>_seqlen<seq_len>_tfrecords, or a task's own.",
    )
    add_bool_flag(parser, "overwrite", "Replace outputs that exist.", False)
    add_bool_flag(parser, "verbose", "Debug logging, and tracebacks on errors.", False)
    for task in tasks.all_tasks().values():
        group = parser.add_argument_group(f"--task={task.name}: {task.help}")
        add_flags(group, _flags_of(task), unset=True)
    return parser


def _flags_of(task: Any) -> list[Any]:
    """A task's own flags (partf.tasks.base.Task.options), named with its prefix."""
    return [
        item._replace(name=task.flag_prefix + item.name)
        for item in settings_of(task.options)
        if item.name not in SHARED
    ]


def options_of(task: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The settings of `task` that the flags `args` give (by setting name): the shared
    ones (--vocab_size only when given) and the task's own where given; the others keep
    the defaults of its options."""
    fields = {field.name for field in dataclasses.fields(task.options)}
    values = {key: getattr(args, key) for key in SHARED if key in fields}
    for item in _flags_of(task):
        values[item.name.removeprefix(task.flag_prefix)] = getattr(args, item.name)
    return {
        key: tuple(value) if isinstance(value, list) else value
        for key, value in values.items()
        if value is not None
    }


def _check_values(args: argparse.Namespace) -> None:
    from partf import tasks

    for name in ("batch_size", "seq_len"):
        if getattr(args, name) < 1:
            raise UsageExit(
                f"--{name} must be a positive integer, got {getattr(args, name)}; e.g. --{name}=32"
            )
    task = tasks.get(args.task)
    task.check_build(options_of(task, args))


def run(argv: list[str] | None = None) -> int:
    """Entry point of partf-build-data: the exit status of a run on `argv` (the arguments
    without the program name; default sys.argv[1:])."""
    from partf.errors import DataError, UsageError, os_error_message

    argv = sys.argv[1:] if argv is None else list(argv)
    verbose = exits.wants_verbose(argv)

    def fail(message: str, status: int, error: BaseException | None = None) -> int:
        return exits.fail(PROG, message, status, error, verbose)

    try:
        args = build_parser().parse_args(argv)
        verbose = args.verbose
        _check_values(args)
    except (UsageExit, UsageError) as e:
        return fail(str(e), 2)
    except SystemExit as e:  # --help
        return int(e.code or 0)

    exits.quiet_tensorflow(verbose)
    from partf import tasks

    try:
        with exits.package_logging(verbose):
            task = tasks.get(args.task)
            task.build(options_of(task, args), args.tfrecords_directory, args.overwrite)
    except UsageError as e:
        return fail(str(e), 2, e)
    except DataError as e:
        return fail(str(e), 1, e)
    except KeyboardInterrupt:
        return fail("interrupted; outputs were left as they were", 130)
    except OSError as e:  # a full disk, a folder that cannot be written
        fix = "nothing was kept: free some space and run the same command again"
        return fail(os_error_message(e, "while writing the outputs", fix), 1, e)
    except Exception as e:  # one line for anything unforeseen, the traceback on request
        return fail(exits.unexpected(e), 1, e)
    return 0


if __name__ == "__main__":
    sys.exit(run())
