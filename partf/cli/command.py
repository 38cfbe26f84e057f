"""What partf-evaluate and partf-generate share as commands over a trained model: a parser
that reports a mistake in one line (`UsageExit`), `--model` first, partf-train's
true/false flags, and `run_command`, which parses, does the work with partf's log records
on stderr and prints the result. A failure is one line on stderr and an exit status: 2
bad usage (`UsageExit`), 1 a failure while running (`RuntimeExit` or any error no
command foresaw), 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from partf.cli import exits
from partf.cli.exits import wants_verbose
from partf.cli.loading import RuntimeExit, UsageExit


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose mistakes raise `UsageExit`: one line, not the usage."""

    def error(self, message: str) -> None:
        raise UsageExit(f"{message}; see {self.prog} --help")


def model_parser(prog: str, doc: str) -> argparse.ArgumentParser:
    """The command's parser, its help made of `doc` (the first paragraph the
    description, the rest the epilog), with the `--model` flag."""
    parser = OneLineParser(
        prog=prog,
        description=doc.split("\n\n")[0],
        epilog=doc.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model", required=True, help="a .keras file, or a run's checkpoints/<model_name> folder"
    )
    return parser


def run_command(
    prog: str,
    argv: Sequence[str] | None,
    parse: Callable[[list[str]], argparse.Namespace],
    main: Callable[[argparse.Namespace], str],
) -> int:
    """Runs command `prog` on `argv` (default sys.argv[1:]); returns its exit status.
    `parse` gives the checked flags (with `verbose`) or raises `UsageExit`; `main` does the
    work and returns the text to print, or raises `UsageExit` or `RuntimeExit`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    # Read before parsing, so that a parsing error shows its traceback too.
    verbose = wants_verbose(argv)

    def fail(message: str, status: int, error: BaseException | None = None) -> int:
        return exits.fail(prog, message, status, error, verbose)

    try:
        args = parse(argv)
    except UsageExit as e:
        return fail(str(e), 2, e)
    exits.quiet_tensorflow(args.verbose)

    try:
        with exits.package_logging(args.verbose):
            text = main(args)
    except UsageExit as e:
        return fail(str(e), 2, e)
    except RuntimeExit as e:
        return fail(str(e), 1, e)
    except KeyboardInterrupt as e:
        return fail("interrupted", 130, e)
    except Exception as e:  # anything else is a bug or an environment problem
        return fail(exits.unexpected(e), 1, e)
    print(text)
    return 0
