"""partf-train's command line: the original's flags, absl spellings, errors on one line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from partf.cli.train import attention_options, build_parser, configs_from_args, main
from partf.training.config import TrainConfig


@pytest.fixture(scope="module")
def parser():
    return build_parser(attention_options())


def _config(parser, *argv) -> TrainConfig:
    return configs_from_args(parser.parse_args(list(argv)))


def test_defaults_are_the_base_configuration(parser):
    config = _config(parser)
    assert config.model == TrainConfig().model  # every model field at its default or preset
    assert (config.max_lr, config.warmup_steps, config.epochs) == (1e-4, 4000, 20)
    assert config.opt_name == "adam" and config.clipvalue == 0.0
    assert config.jit_compile is True and config.log_every == 100
    assert len(config.model_name) == len("20250101-120000")  # the current time, as the original


def test_repeated_and_comma_separated_cutoffs(parser):
    assert _config(parser, "--cutoffs=250", "--cutoffs=2500").model.cutoffs == (250, 2500)
    assert _config(parser, "--cutoffs", "250,2500").model.cutoffs == (250, 2500)
    assert _config(parser, "--cutoffs=").model.cutoffs == ()  # plain softmax
    assert _config(parser, "--proj_dims=32", "--proj_dims=8").model.proj_dims == (32, 8)


def test_every_original_flag_keeps_its_meaning(parser):
    # base_model.sh's command line for the original train.py, verbatim.
    config = _config(
        parser,
        "--train_directory=data/wikitext2_bsz32_seqlen32_tfrecords_train",
        "--valid_directory=data/wikitext2_bsz32_seqlen32_tfrecords_valid",
        "--test_directory=data/wikitext2_bsz32_seqlen32_tfrecords_test",
        "--sp_model_prefix=tokenizer/wiki2_12k",
        "--d_model=128",
        "--num_heads=4",
        "--d_ffn=512",
        "--num_layers=6",
        "--mem_len=16",
        "--dropout_rate=0.1",
        "--cutoffs=250",
        "--cutoffs=2500",
        "--proj_factor=4",
        "--warmup_steps=4000",
        "--tau_start=1.0",
        "--tau_end=0.1",
        "--tau_is_trainable=False",
        "--opt_name=adam",
        "--epochs=20",
        "--model_name=dmodel128_dffn512_blocks6",
        "--max_lr=1e-4",
        "--straight_through=False",
        "--clipvalue=0.5",
    )
    given = {
        "d_model": 128,
        "num_heads": 4,
        "d_ffn": 512,
        "num_layers": 6,
        "mem_len": 16,
        "dropout_rate": 0.1,
        "cutoffs": (250, 2500),
        "proj_factor": 4,
        "straight_through": False,
        "tau_start": 1.0,
        "tau_end": 0.1,
        "tau_is_trainable": False,
    }
    assert {name: getattr(config.model, name) for name in given} == given
    assert config.sp_model_prefix == "tokenizer/wiki2_12k"
    assert config.model_name == "dmodel128_dffn512_blocks6"
    assert (config.epochs, config.max_lr, config.clipvalue) == (20, 1e-4, 0.5)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--straight_through"], True),
        (["--straight_through=true"], True),
        (["--straight_through", "0"], False),
        (["--nostraight_through"], False),
        (["--straight_through=yes", "--nostraight_through"], False),
    ],
)
def test_absl_booleans(parser, argv, expected):
    assert _config(parser, *argv).model.straight_through is expected


def test_new_flags(parser):
    config = _config(
        parser,
        "--max_steps=200",
        "--steps_per_execution=8",
        "--nojit_compile",
        "--log_every=10",
        "--eval_every=50",
        "--ckpt_every=25",
        "--seed=3",
        "--candidates=attention,dense",
        "--attention=relative",
        "--eval_mode=expected",
        "--tau_schedule=linear",
        "--mixed_precision",
        "--output_dir=/tmp/out",
        "--arch_lr=1e-2",
        "--arch_weight_decay=5e-4",
        "--arch_freeze_steps=10000",
        "--lr_schedule=inverse_sqrt",
    )
    assert config.max_steps == 200 and config.steps_per_execution == 8
    assert config.jit_compile is False and config.mixed_precision is True
    assert (config.log_every, config.eval_every, config.ckpt_every, config.seed) == (10, 50, 25, 3)
    assert config.model.candidates == ("attention", "dense")
    assert config.model.eval_mode == "expected" and config.model.tau_schedule == "linear"
    assert (config.arch_lr, config.arch_weight_decay, config.arch_freeze_steps) == (
        1e-2,
        5e-4,
        10000,
    )
    assert config.output_dir == "/tmp/out" and config.lr_schedule == "inverse_sqrt"


def test_attention_options_become_flags(parser):
    options = attention_options()
    if not options:
        pytest.skip("no attention mechanism with options is importable yet")
    name, entry = sorted(options.items())[0]
    default = next(value for value in entry["default"].values() if value is not None)
    text = "true" if isinstance(default, bool) else str(default)
    config = _config(parser, f"--attn_{name}={text}")
    assert config.model.attention_options == {name: default}
    assert f"--attn_{name}" in parser.format_help()
    assert _config(parser).model.attention_options == {}  # unset options stay unset


def _run_main(capsys, *argv):
    status = main(list(argv))
    err = capsys.readouterr().err.strip()
    return status, err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--bogus_flag=1"], "unrecognized arguments: --bogus_flag=1"),
        (["--d_model=abc"], "argument --d_model: invalid int value: 'abc'"),
        (["--straight_through=maybe"], "expected true or false"),
        (["--cutoffs=ten"], "expected integers"),
        (["--d_model=130", "--num_heads=4"], "not divisible by num_heads=4"),
        (["--cutoffs=2500", "--cutoffs=250"], "cutoffs"),
        (["--mem_len=-1"], "mem_len must be >= 0"),
        (["--attention=nope"], "unknown attention 'nope'"),
        (["--eval_mode=best"], "eval_mode"),
        (["--epochs=0"], "--epochs must be >= 1"),
        (["--opt_name=adamx"], "unknown --opt_name 'adamx'"),
        (["--lr_schedule=linear"], "unknown --lr_schedule 'linear'"),
        (["--train_directory=/nonexistent/records"], "train records /nonexistent/records do not"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(capsys, tmp_path, argv, message):
    status, err = _run_main(capsys, *argv, f"--output_dir={tmp_path}", "--model_name=x")
    assert status == 2
    assert len(err.splitlines()) == 1, err
    assert err.startswith("partf-train: error: ") and message in err
    assert not (tmp_path / "logs").exists(), "nothing is written for bad input"


def test_verbose_shows_the_traceback(capsys, tmp_path):
    status, err = _run_main(capsys, "--d_model=130", "--num_heads=4", "--verbose")
    assert status == 2
    assert "Traceback" in err and err.splitlines()[-1].startswith("partf-train: error: ")


def test_module_entry_point():
    done = subprocess.run(
        [sys.executable, "-m", "partf.train", "--epochs=-3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip().splitlines()[-1] == "partf-train: error: --epochs must be >= 1, got -3."
    )


# ------------------------------------------------------------------ --from_search
def test_searched_architecture_is_argmax_without_identity():
    from partf.training.config import ConfigError
    from partf.training.search import searched_architecture

    pi = [[0.5, 0.3, 0.2], [0.1, 0.2, 0.7], [0.2, 0.6, 0.2], [0.4, 0.1, 0.5]]
    assert searched_architecture(pi, ["attention", "dense", "identity"]) == "A D"
    assert searched_architecture(pi[:1], ["linear", "dense", "identity"]) == "linear"
    with pytest.raises(ConfigError, match="identity in every block"):
        searched_architecture(pi[1:2], ["attention", "dense", "identity"])
    # A search stopped while pi was frozen has no choice to train: argmax would be block 1's
    # first candidate by default. Only the exactly uniform block is named.
    frozen = [[0.5, 0.3, 0.2], [1 / 3, 1 / 3, 1 / 3]]
    with pytest.raises(ConfigError, match=r"not decided block\(s\) 2: pi is still uniform"):
        searched_architecture(frozen, ["attention", "dense", "identity"])


@pytest.fixture(scope="module")
def tiny_records(tmp_path_factory):
    """Training records (vocabulary 60, 4 batches of 4 x 8) with metadata."""
    import numpy as np

    from partf.data import context_batches, write_tfrecords

    root = tmp_path_factory.mktemp("from_search")
    for name, batches in (("train", 4),):
        stream = np.random.default_rng(len(name)).integers(1, 60, batches * 32 + 1)
        write_tfrecords(
            context_batches(stream.astype(np.int32), 4, 8),
            root / name,
            vocab_size=60,
            num_tokens=len(stream),
            num_lines=10,
            num_words=20,
            num_chars=100,
        )
    return root


def test_from_search_trains_the_found_architecture(capsys, tiny_records):
    import json

    root = tiny_records
    common = [
        f"--train_directory={root / 'train'}",
        "--valid_directory=",  # nothing to score: only the architecture matters here
        "--test_directory=",
        "--sp_model_prefix=",
        f"--output_dir={root}",
        "--nojit_compile",
        "--steps_per_execution=2",
        "--log_every=2",
    ]
    search = [
        "--model_name=search",
        "--d_model=8",
        "--num_heads=2",
        "--d_ffn=16",
        "--num_layers=3",
        "--mem_len=4",
        "--cutoffs=20",
        "--epochs=1",
        "--max_lr=3e-3",
        "--warmup_steps=1",
    ]
    assert main(common + search) == 0
    found = json.loads((root / "checkpoints/search/results.json").read_text())
    # Make the search's choice unambiguous and mixed: A, I, D (the identity drops out).
    found["pi"] = [[0.8, 0.1, 0.1], [0.1, 0.1, 0.8], [0.1, 0.8, 0.1]]
    (root / "checkpoints/search/results.json").write_text(json.dumps(found))

    assert main([*common, f"--from_search={root / 'checkpoints/search'}", "--max_lr=1e-3"]) == 0
    fixed = json.loads((root / "checkpoints/search-fixed/results.json").read_text())
    model, training = fixed["config"]["model"], fixed["config"]["training"]
    assert model["architecture"] == "A D" and model["num_layers"] == 2
    assert (model["d_model"], model["d_ffn"], model["mem_len"]) == (8, 16, 4)  # as searched
    assert training["warmup_steps"] == 1 and training["epochs"] == 1  # as searched
    assert training["max_lr"] == 1e-3  # overridden here
    assert fixed["architecture"] == "A D" and fixed["candidates"] == ["attention", "dense"]


def test_from_search_without_a_finished_search_is_one_line(capsys, tmp_path):
    status, err = _run_main(capsys, f"--from_search={tmp_path}", f"--output_dir={tmp_path}")
    assert status == 2 and len(err.splitlines()) == 1
    assert "no finished search there" in err
