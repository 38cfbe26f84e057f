"""The shared command endings: one error line, the status, the traceback on request."""

import logging

from partf.cli import exits


def test_fail_prints_one_line_and_returns_the_status(capsys):
    error = ValueError("first\nsecond")
    status = exits.fail("partf-x", "bad   value\n given", 2, error, verbose=False)
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err == "partf-x: error: bad value given\n"


def test_verbose_fail_shows_the_traceback_first(capsys):
    try:
        raise KeyError("k")
    except KeyError as error:
        exits.fail("partf-x", "broken", 1, error, verbose=True)
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err
    assert err.rstrip().splitlines()[-1] == "partf-x: error: broken"


def test_unexpected_names_the_type_and_the_first_line():
    message = exits.unexpected(RuntimeError("went wrong\nmore detail"))
    assert message.startswith("unexpected RuntimeError: went wrong ")
    assert "more detail" not in message and "--verbose" in message
    assert exits.unexpected(RuntimeError()).startswith("unexpected RuntimeError: ")


def test_wants_verbose_reads_the_raw_arguments():
    assert exits.wants_verbose(["--a=1", "--verbose"])
    assert exits.wants_verbose(["--verbose=True"])
    assert not exits.wants_verbose(["--verbose=false", "--model", "m"])


def test_package_logging_is_undone_even_on_errors(capsys):
    package_logger = logging.getLogger("partf")
    handlers, level = list(package_logger.handlers), package_logger.level
    try:
        with exits.package_logging(verbose=True):
            logging.getLogger("partf.cli.test").debug("shown")
            raise OSError("disk full")
    except OSError:
        pass
    assert package_logger.handlers == handlers and package_logger.level == level
    assert "partf: shown" in capsys.readouterr().err
