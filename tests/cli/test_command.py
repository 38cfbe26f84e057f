"""partf.cli.command: the parser, the true/false flags and the statuses of run_command."""

from __future__ import annotations

import argparse

import pytest

from partf.cli.command import model_parser, run_command
from partf.cli.flags import add_bool_flag, parse_bool
from partf.cli.loading import RuntimeExit, UsageExit

DOC = """partf-x: do a thing.

More words for the epilog."""


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = model_parser("partf-x", DOC)
    add_bool_flag(parser, "verbose", "tracebacks", default=False)
    add_bool_flag(parser, "fast", "go fast", default=True)
    return parser.parse_args(argv)


def test_the_parser_takes_model_and_bool_flags():
    args = _parse(["--model", "m"])
    assert (args.model, args.verbose, args.fast) == ("m", False, True)
    args = _parse(["--model=m", "--verbose", "--fast=no"])
    assert (args.verbose, args.fast) == (True, False)
    assert _parse(["--model", "m", "--nofast"]).fast is False
    parser = model_parser("partf-x", DOC)
    assert parser.description == "partf-x: do a thing."
    assert parser.epilog == "More words for the epilog."


def test_parse_bool_spellings():
    assert parse_bool("Yes") and parse_bool("1") and not parse_bool("off")
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false"):
        parse_bool("maybe")


def test_a_parsing_mistake_is_one_line_naming_help(capsys):
    argv = ["--model", "m", "--bogus"]
    assert run_command("partf-x", argv, _parse, lambda args: "never") == 2
    captured = capsys.readouterr()
    assert captured.err == "partf-x: error: unrecognized arguments: --bogus; see partf-x --help\n"
    assert captured.out == ""


def test_the_result_is_printed_with_status_zero(capsys):
    assert run_command("partf-x", ["--model", "m"], _parse, lambda args: f"ran {args.model}") == 0
    assert capsys.readouterr().out == "ran m\n"


def _raise(error: BaseException):
    def main(args: argparse.Namespace) -> str:
        raise error

    return main


@pytest.mark.parametrize(
    ("error", "status", "line"),
    [
        (UsageExit("bad flag"), 2, "partf-x: error: bad flag\n"),
        (RuntimeExit("broken file"), 1, "partf-x: error: broken file\n"),
        (KeyboardInterrupt(), 130, "partf-x: error: interrupted\n"),
    ],
)
def test_foreseen_failures_are_one_line_and_a_status(capsys, error, status, line):
    assert run_command("partf-x", ["--model", "m"], _parse, _raise(error)) == status
    captured = capsys.readouterr()
    assert captured.err == line and captured.out == ""


def test_an_unforeseen_error_points_at_verbose(capsys):
    status = run_command("partf-x", ["--model", "m"], _parse, _raise(ValueError("oops\nmore")))
    assert status == 1
    err = capsys.readouterr().err
    assert err.startswith("partf-x: error: unexpected ValueError: oops") and "--verbose" in err
    assert "Traceback" not in err


def test_verbose_shows_the_traceback_first(capsys):
    argv = ["--model", "m", "--verbose"]
    assert run_command("partf-x", argv, _parse, _raise(RuntimeExit("broken"))) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().splitlines()[-1] == "partf-x: error: broken"
