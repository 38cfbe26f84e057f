"""partf-train's flags, generated from the configuration dataclasses, against the flags it
accepted before they were generated: the literal tables below were recorded from the
hand-written parser (the compatibility contract), so a change here is a change of the
command line's interface."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from partf.cli import flags
from partf.cli.train import UsageExit, attention_options, build_parser, configs_from_args, main
from partf.models.config import ModelConfig
from partf.settings import setting
from partf.training.config import TrainConfig

_RECORDS = "data/wikitext2_bsz32_seqlen32_tfrecords"

#: Every option string -> (destination, kind, default[, choices]) as the hand-written
#: parser had them. Kinds: str, int, float, bool (--x, --x=VALUE), bool= (--x=VALUE only),
#: ints / names (a list; "+" repeatable), false (the --nox of a bool), help.
RECORDED_FLAGS = {
    "-h": ("help", "help"),
    "--help": ("help", "help"),
    "--train_directory": ("train_directory", "str", f"{_RECORDS}_train"),
    "--valid_directory": ("valid_directory", "str", f"{_RECORDS}_valid"),
    "--test_directory": ("test_directory", "str", f"{_RECORDS}_test"),
    "--sp_model_prefix": ("sp_model_prefix", "str", "data/tokenizer/wiki2_12k"),
    "--d_model": ("d_model", "int", None),
    "--num_heads": ("num_heads", "int", None),
    "--d_ffn": ("d_ffn", "int", None),
    "--num_layers": ("num_layers", "int", None),
    "--mem_len": ("mem_len", "int", None),
    "--dropout_rate": ("dropout_rate", "float", None),
    "--cutoffs": ("cutoffs", "ints+", None),
    "--proj_factor": ("proj_factor", "int", None),
    "--proj_dims": ("proj_dims", "ints+", None),
    "--straight_through": ("straight_through", "bool", None),
    "--nostraight_through": ("straight_through", "false"),
    "--tie_embeddings": ("tie_embeddings", "bool", None),
    "--notie_embeddings": ("tie_embeddings", "false"),
    "--clamp_len": ("clamp_len", "int", None),
    "--attention": ("attention", "str", None),
    "--candidates": ("candidates", "names+", None),
    "--architecture": ("architecture", "str", None),
    "--from_search": ("from_search", "str", None),
    "--eval_mode": ("eval_mode", "str", None),
    "--sample_per_example": ("sample_per_example", "bool", None),
    "--nosample_per_example": ("sample_per_example", "false"),
    "--tau_start": ("tau_start", "float", None),
    "--tau_end": ("tau_end", "float", None),
    "--tau_schedule": ("tau_schedule", "str", None),
    "--tau_is_trainable": ("tau_is_trainable", "bool", None),
    "--notau_is_trainable": ("tau_is_trainable", "false"),
    "--attn_alpha_coeff": ("attn_alpha_coeff", "float", None),
    "--attn_attention_dropout_rate": ("attn_attention_dropout_rate", "float", None),
    "--attn_chunk_size": ("attn_chunk_size", "int", None),
    "--attn_diag_activation": ("attn_diag_activation", "str", None),
    "--attn_eta": ("attn_eta", "float", None),
    "--attn_feature_map": ("attn_feature_map", "str", None),
    "--attn_low_rank": ("attn_low_rank", "int", None),
    "--attn_mem_chunks": ("attn_mem_chunks", "int", None),
    "--attn_norm_type": ("attn_norm_type", "str", None),
    "--attn_num_features": ("attn_num_features", "int", None),
    "--attn_num_landmarks": ("attn_num_landmarks", "int", None),
    "--attn_redraw": ("attn_redraw", "bool=", None),
    "--attn_window_size": ("attn_window_size", "int", None),
    "--max_lr": ("max_lr", "float", 0.0001),
    "--warmup_steps": ("warmup_steps", "int", 4000),
    "--lr_schedule": ("lr_schedule", "str", "cosine"),
    "--epochs": ("epochs", "int", 20),
    "--max_steps": ("max_steps", "int", None),
    "--opt_name": ("opt_name", "str", "adam"),
    "--clipvalue": ("clipvalue", "float", 0.0),
    "--weight_decay": ("weight_decay", "float", None),
    "--arch_lr": ("arch_lr", "float", None),
    "--arch_weight_decay": ("arch_weight_decay", "float", None),
    "--arch_freeze_steps": ("arch_freeze_steps", "int", 0),
    "--model_name": ("model_name", "str", None),
    "--output_dir": ("output_dir", "str", "."),
    "--steps_per_execution": ("steps_per_execution", "int", 32),
    "--jit_compile": ("jit_compile", "bool", True),
    "--nojit_compile": ("jit_compile", "false"),
    "--mixed_precision": ("mixed_precision", "bool", False),
    "--nomixed_precision": ("mixed_precision", "false"),
    "--seed": ("seed", "int", 0),
    "--distribution_strategy": (
        "distribution_strategy",
        "str",
        "default",
        ("default", "mirrored", "multi_worker", "tpu"),
    ),
    "--log_every": ("log_every", "int", 100),
    "--eval_every": ("eval_every", "int", 0),
    "--ckpt_every": ("ckpt_every", "int", 0),
    "--plot_every": ("plot_every", "int", 1000),
    "--keep_checkpoints": ("keep_checkpoints", "int", 5),
    "--overwrite": ("overwrite", "bool", False),
    "--nooverwrite": ("overwrite", "false"),
    "--spike_guard": ("spike_guard", "str", "off", ("off", "skip", "stop")),
    "--spike_factor": ("spike_factor", "float", 2.0),
    "--spike_warmup": ("spike_warmup", "int", 100),
    "--verbose": ("verbose", "bool", False),
    "--noverbose": ("verbose", "false"),
}

#: TrainConfig.to_dict() of `--model_name=run` alone, as the hand-written parser gave it.
#: Flags added after the hand-written parser was recorded, described the same way.
ADDED_FLAGS = {
    # A floor under --ckpt_every for plans shared by CPUs and GPUs (issue 35).
    "--ckpt_min_seconds": ("ckpt_min_seconds", "float", 0.0),
    # Starting from a trained model: conversions (issue 47).
    "--init_from": ("init_from", "str", None),
    "--drop_attention": ("drop_attention", "int", 0),
    # What the blocks --drop_attention chooses become: a linear attention (issue 65).
    "--drop_attention_to": ("drop_attention_to", "str", "identity"),
    "--search_estimator": ("search_estimator", "str", None, ("mixture", "sampled")),
    "--search_cost_weight": ("search_cost_weight", "float", None),
    # The fixed-depth search priced by measured time (issue 65).
    "--search_cost": ("search_cost", "str", None, ("flops", "time")),
    "--arch_freeze_fraction": ("arch_freeze_fraction", "float", None),
    "--search": ("search", "str", "original", ("original", "par")),
    # Recall beside perplexity: MQAR mixed into text, and scored at the end (issue 65).
    "--mix_directory": ("mix_directory", "str", None),
    "--mix_every": ("mix_every", "int", 1),
    "--recall_directory": ("recall_directory", "str", None),
    # The speed options of issue 49: chunked causal scores, the compiled JAX loop.
    "--attn_query_chunk": ("attn_query_chunk", "int", None),
    "--attn_relative_query_chunk": ("attn_relative_query_chunk", "int", None),
    "--compiled_loop": ("compiled_loop", "bool", False),
    "--nocompiled_loop": ("compiled_loop", "false"),
    # Positions, the seed papers' options, per-mechanism options (issue 15).
    "--position": ("position", "str", None, ("none", "sinusoidal", "learned", "rotary", "auto")),
    "--max_positions": ("max_positions", "int", None),
    "--attn_adaptive_proj": ("attn_adaptive_proj", "str", None),
    "--attn_convolve": ("attn_convolve", "bool=", None),
    "--attn_diag_diag_activation": ("attn_diag_diag_activation", "str", None),
    "--attn_diag_norm_type": ("attn_diag_norm_type", "str", None),
    "--attn_diag_window_size": ("attn_diag_window_size", "int", None),
    "--attn_eva_adaptive_proj": ("attn_eva_adaptive_proj", "str", None),
    "--attn_eva_chunk_size": ("attn_eva_chunk_size", "int", None),
    "--attn_eva_mem_chunks": ("attn_eva_mem_chunks", "int", None),
    "--attn_eva_overlap_window": ("attn_eva_overlap_window", "bool=", None),
    "--attn_eva_use_t5_rpe": ("attn_eva_use_t5_rpe", "bool=", None),
    "--attn_eva_window_size": ("attn_eva_window_size", "int", None),
    "--attn_fastformer_chunk_size": ("attn_fastformer_chunk_size", "int", None),
    "--attn_fastformer_convolve": ("attn_fastformer_convolve", "bool=", None),
    "--attn_fastformer_groups": ("attn_fastformer_groups", "int", None),
    "--attn_fastformer_kernel_size": ("attn_fastformer_kernel_size", "int", None),
    "--attn_groups": ("attn_groups", "int", None),
    "--attn_kernel_size": ("attn_kernel_size", "int", None),
    "--attn_lara_alpha_coeff": ("attn_lara_alpha_coeff", "float", None),
    "--attn_lara_num_landmarks": ("attn_lara_num_landmarks", "int", None),
    "--attn_linear_chunk_size": ("attn_linear_chunk_size", "int", None),
    "--attn_local_window_size": ("attn_local_window_size", "int", None),
    "--attn_norm_chunk_size": ("attn_norm_chunk_size", "int", None),
    "--attn_norm_feature_map": ("attn_norm_feature_map", "str", None),
    "--attn_norm_norm_type": ("attn_norm_norm_type", "str", None),
    "--attn_overlap_window": ("attn_overlap_window", "bool=", None),
    "--attn_performer_chunk_size": ("attn_performer_chunk_size", "int", None),
    "--attn_performer_num_features": ("attn_performer_num_features", "int", None),
    "--attn_performer_redraw": ("attn_performer_redraw", "bool=", None),
    "--attn_primal_eta": ("attn_primal_eta", "float", None),
    "--attn_primal_low_rank": ("attn_primal_low_rank", "int", None),
    "--attn_relative_attention_dropout_rate": (
        "attn_relative_attention_dropout_rate",
        "float",
        None,
    ),
    "--attn_use_t5_rpe": ("attn_use_t5_rpe", "bool=", None),
    # Masked language modelling (issue 16).
    "--objective": ("objective", "str", "causal", ("causal", "mlm")),
    # The original project's architecture parameters and attention choices.
    "--arch_parameterization": (
        "arch_parameterization",
        "str",
        None,
        ("logits", "probabilities"),
    ),
    "--attn_compat": ("attn_compat", "str", None),
    "--attn_relative_compat": ("attn_relative_compat", "str", None),
    "--attn_rms_form": ("attn_rms_form", "str", None),
    "--attn_diag_rms_form": ("attn_diag_rms_form", "str", None),
    "--attn_norm_rms_form": ("attn_norm_rms_form", "str", None),
    "--attn_chunk_mask": ("attn_chunk_mask", "str", None),
    "--attn_eva_chunk_mask": ("attn_eva_chunk_mask", "str", None),
    "--attn_conv_form": ("attn_conv_form", "str", None),
    "--attn_fastformer_conv_form": ("attn_fastformer_conv_form", "str", None),
}

#: TrainConfig settings added since, at their defaults (the recorded behaviour).
ADDED_DEFAULTS = {
    "arch_freeze_fraction": None,
    "search": "original",
    "objective": "causal",
    "init_from": None,
    "drop_attention": 0,
    "drop_attention_to": "identity",
    "compiled_loop": False,
    "mix_directory": None,
    "mix_every": 1,
    "recall_directory": None,
}

RECORDED_DEFAULTS = {
    "train_directory": f"{_RECORDS}_train",
    "valid_directory": f"{_RECORDS}_valid",
    "test_directory": f"{_RECORDS}_test",
    "sp_model_prefix": "data/tokenizer/wiki2_12k",
    "model_name": "run",
    "output_dir": ".",
    "epochs": 20,
    "max_steps": None,
    "max_lr": 0.0001,
    "warmup_steps": 4000,
    "lr_schedule": "cosine",
    "opt_name": "adam",
    "clipvalue": 0.0,
    "weight_decay": None,
    "arch_lr": None,
    "arch_weight_decay": None,
    "arch_freeze_steps": 0,
    "steps_per_execution": 32,
    "jit_compile": True,
    "mixed_precision": False,
    "seed": 0,
    "distribution_strategy": "default",
    "log_every": 100,
    "eval_every": 0,
    "ckpt_every": 0,
    "ckpt_min_seconds": 0.0,
    "plot_every": 1000,
    "keep_checkpoints": 5,
    "overwrite": False,
    "spike_guard": "off",
    "spike_factor": 2.0,
    "spike_warmup": 100,
    "model": {},
}

#: Command lines in the original's spellings -> what differs from RECORDED_DEFAULTS in the
#: TrainConfig the hand-written parser made of them.
RECORDED_CONFIGS = [
    (  # base_model.sh
        [
            f"--train_directory={_RECORDS}_train",
            f"--valid_directory={_RECORDS}_valid",
            f"--test_directory={_RECORDS}_test",
            "--sp_model_prefix=data/tokenizer/wiki2_12k",
            "--d_model=128",
            "--num_heads=4",
            "--d_ffn=512",
            "--num_layers=6",
            "--mem_len=16",
            "--dropout_rate=0.1",
            "--cutoffs=250",
            "--cutoffs=2500",
            "--proj_factor=4",
            "--straight_through=False",
            "--max_lr=1e-4",
            "--warmup_steps=4000",
            "--tau_start=1.0",
            "--tau_end=0.1",
            "--tau_is_trainable=False",
            "--eval_mode=expected",
            "--opt_name=adam",
            "--epochs=20",
            "--model_name=dmodel128_dffn512_blocks6",
            "--output_dir=.",
            "--steps_per_execution=32",
            "--log_every=100",
            "--max_steps=200",
        ],
        {
            "model_name": "dmodel128_dffn512_blocks6",
            "max_steps": 200,
            "model": {
                "d_model": 128,
                "num_heads": 4,
                "d_ffn": 512,
                "num_layers": 6,
                "mem_len": 16,
                "dropout_rate": 0.1,
                "cutoffs": (250, 2500),
                "proj_factor": 4,
                "straight_through": False,
                "eval_mode": "expected",
                "tau_start": 1.0,
                "tau_end": 0.1,
                "tau_is_trainable": False,
            },
        },
    ),
    (["--model_name=run"], {}),
    (
        [
            "--model_name=run",
            "--max_steps=5",
            "--weight_decay=0.01",
            "--spike_guard=skip",
            "--spike_factor=3",
            "--spike_warmup=10",
            "--distribution_strategy=mirrored",
            "--clipvalue=1",
            "--keep_checkpoints=2",
            "--plot_every=10",
            "--seed=7",
            "--output_dir=out",
            "--nojit_compile",
            "--mixed_precision=true",
            "--overwrite",
            "--arch_lr=1e-2",
            "--arch_weight_decay=5e-4",
            "--arch_freeze_steps=10000",
            "--lr_schedule=inverse_sqrt",
            "--eval_every=50",
            "--ckpt_every=25",
            "--valid_directory=",
            "--test_directory",
            "",
        ],
        {
            "valid_directory": "",
            "test_directory": "",
            "output_dir": "out",
            "max_steps": 5,
            "lr_schedule": "inverse_sqrt",
            "clipvalue": 1.0,
            "weight_decay": 0.01,
            "arch_lr": 0.01,
            "arch_weight_decay": 0.0005,
            "arch_freeze_steps": 10000,
            "jit_compile": False,
            "mixed_precision": True,
            "seed": 7,
            "distribution_strategy": "mirrored",
            "eval_every": 50,
            "ckpt_every": 25,
            "plot_every": 10,
            "keep_checkpoints": 2,
            "overwrite": True,
            "spike_guard": "skip",
            "spike_factor": 3.0,
            "spike_warmup": 10,
        },
    ),
    (
        [
            "--model_name",
            "run",
            "--d_model",
            "64",
            "--num_heads",
            "2",
            "--straight_through",
            "--tie_embeddings",
            "yes",
            "--cutoffs=",
            "--clamp_len",
            "64",
            "--attention",
            "linear",
            "--architecture",
            "A A D D D I",
            "--eval_mode",
            "sample",
            "--tau_schedule",
            "cosine",
            "--sample_per_example=0",
            "--tau_is_trainable",
        ],
        {
            "model": {
                "d_model": 64,
                "num_heads": 2,
                "cutoffs": (),
                "tie_embeddings": True,
                "straight_through": True,
                "clamp_len": 64,
                "attention": "linear",
                "architecture": "A A D D D I",
                "eval_mode": "sample",
                "sample_per_example": False,
                "tau_schedule": "cosine",
                "tau_is_trainable": True,
            }
        },
    ),
    (
        [
            "--model_name=run",
            "--cutoffs=250",
            "--cutoffs=",
            "--cutoffs=100,1000",
            "--cutoffs",
            "5000",
            "--proj_dims=32,8",
            "--proj_dims=4",
            "--candidates",
            "attention,dense",
            "--candidates=identity",
            "--nostraight_through",
        ],
        {
            "model": {
                "cutoffs": (100, 1000, 5000),
                "proj_dims": (32, 8, 4),
                "straight_through": False,
                "candidates": ("attention", "dense", "identity"),
            }
        },
    ),
    (
        [
            "--model_name=run",
            "--attn_window_size=64",
            "--attn_redraw=true",
            "--attn_norm_type=layer",
            "--attn_eta=0.5",
            "--attn_chunk_size",
            "16",
        ],
        {
            "model": {
                "attention_options": {
                    "chunk_size": 16,
                    "eta": 0.5,
                    "norm_type": "layer",
                    "redraw": True,
                    "window_size": 64,
                }
            }
        },
    ),
]

#: Bad command lines -> the hand-written parser's message (before " (see partf-train --help)").
RECORDED_ERRORS = {
    "--spike_guard=x": "argument --spike_guard: invalid choice: 'x' "
    "(choose from 'off', 'skip', 'stop')",
    "--distribution_strategy=gpu": "argument --distribution_strategy: invalid choice: 'gpu' "
    "(choose from 'default', 'mirrored', 'multi_worker', 'tpu')",
    "--d_model=abc": "argument --d_model: invalid int value: 'abc'",
    "--straight_through=maybe": "argument --straight_through: expected true or false, got 'maybe'",
    "--cutoffs=ten": "argument --cutoffs: expected integers, got 'ten'",
    "--candidates": "argument --candidates: expected one argument",
    "--nojit_compile=1": "argument --nojit_compile: ignored explicit argument '1'",
    "--bogus": "unrecognized arguments: --bogus",
    "--max_lr=fast": "argument --max_lr: invalid float value: 'fast'",
    "--attn_window_size=big": "argument --attn_window_size: invalid int value: 'big'",
    "--attn_redraw=maybe": "argument --attn_redraw: expected true or false, got 'maybe'",
    "--epochs": "argument --epochs: expected one argument",
    "--jit": "unrecognized arguments: --jit",
}


@pytest.fixture(scope="module")
def parser():
    return build_parser(attention_options())


def _kind(action: argparse.Action) -> str:
    if isinstance(action, argparse._HelpAction):
        return "help"
    if isinstance(action, argparse._StoreFalseAction):
        return "false"
    names = {
        None: "str",
        str: "str",
        int: "int",
        float: "float",
        flags.parse_bool: "bool",
        flags.int_list: "ints",
        flags.name_list: "names",
    }
    kind = names[action.type]
    if kind == "bool" and action.nargs != "?":
        kind += "="  # a value is needed: --attn_redraw=true, not --attn_redraw
    return kind + ("+" if isinstance(action, flags.ExtendAction) else "")


def _describe(action: argparse.Action) -> tuple:
    kind = _kind(action)
    if kind in ("help", "false"):
        return (action.dest, kind)
    if action.choices:
        return (action.dest, kind, action.default, tuple(action.choices))
    return (action.dest, kind, action.default)


def test_the_same_flags_as_the_hand_written_parser(parser):
    """Every recorded flag keeps its meaning; flags added since are exactly ADDED_FLAGS."""
    found = {
        option: _describe(action) for action in parser._actions for option in action.option_strings
    }
    assert {option: found.get(option) for option in RECORDED_FLAGS} == RECORDED_FLAGS
    added = {option: entry for option, entry in found.items() if option not in RECORDED_FLAGS}
    assert added == ADDED_FLAGS


def test_an_empty_command_line_parses_to_the_recorded_defaults(parser):
    expected = {
        entry[0]: entry[2]
        for entry in {**RECORDED_FLAGS, **ADDED_FLAGS}.values()
        if entry[1] not in ("help", "false")
    }
    assert vars(parser.parse_args([])) == expected


@pytest.mark.parametrize(("argv", "changes"), RECORDED_CONFIGS)
def test_original_command_lines_give_the_recorded_configs(parser, argv, changes):
    expected = {**RECORDED_DEFAULTS, **ADDED_DEFAULTS, **changes}
    # The recorded model fields are those given: TrainConfig makes its ModelConfig of them.
    expected["model"] = TrainConfig(**expected).model.to_dict()
    assert configs_from_args(parser.parse_args(argv)).to_dict() == expected


@pytest.mark.parametrize(("flag", "message"), sorted(RECORDED_ERRORS.items()))
def test_bad_flags_give_the_recorded_messages(parser, flag, message):
    with pytest.raises(UsageExit) as raised:
        parser.parse_args([flag])
    assert str(raised.value) == f"{message} (see partf-train --help)"


@pytest.mark.parametrize(
    "flag", sorted(entry[0] for entry in RECORDED_FLAGS.values() if entry[1] == "bool")
)
def test_every_bool_flag_has_the_absl_spellings(parser, flag):
    def parsed(*argv):
        return getattr(parser.parse_args(list(argv)), flag)

    assert parsed(f"--{flag}") is True
    assert parsed(f"--{flag}=False") is False
    assert parsed(f"--{flag}", "yes") is True
    assert parsed(f"--{flag}", f"--no{flag}") is False


def test_help_lists_every_flag_but_the_no_forms(parser, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    for option, entry in RECORDED_FLAGS.items():
        if entry[1] == "false":
            assert f"[{option}]" not in shown
        else:
            assert option in shown, option
    # Model defaults come from ModelConfig, in brackets; training defaults from TrainConfig.
    assert "embedding and hidden width [128]" in shown
    assert "[250,2500]" in shown and "[attention,dense,identity]" in shown
    assert "(default: the current time)" in shown and "(default: 4000)" in shown


@pytest.mark.parametrize("cls", [TrainConfig, ModelConfig])
def test_every_setting_is_a_flag(parser, cls):
    # A setting with a `group` that names no --help section would be left out.
    destinations = {action.dest for action in parser._actions}
    missing = [f.name for f in flags.flag_fields(cls) if f.name not in destinations]
    assert not missing


# --------------------------------------------------------------- the generic helper
@dataclasses.dataclass(frozen=True)
class _Toy:
    """A configuration as a new setting would extend it: each flag is one field."""

    width: int = setting(8, "how wide")
    rate: float | None = setting(None, "a rate (default: none)")
    names: tuple[str, ...] = setting(("a", "b"), "names, comma-separated or repeated")
    sizes: tuple[int, ...] = setting((1, 2), "sizes")
    fast: bool = setting(True, "go fast")
    mode: str = setting("x", "the mode", group="other", choices=("x", "y"))
    hidden: int = 3  # not a flag: no setting


def _toy_parser(unset: bool) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(formatter_class=flags.HelpFormatter)
    flags.add_flags(parser, _Toy, unset=unset)
    return parser


def test_settings_become_flags_with_their_defaults():
    parser = _toy_parser(unset=False)
    assert flags.flag_values(parser.parse_args([]), _Toy) == {
        "width": 8,
        "rate": None,
        "names": ("a", "b"),
        "sizes": (1, 2),
        "fast": True,
        "mode": "x",
    }
    argv = ["--width=3", "--rate", "0.5", "--names=c,d", "--names", "e", "--sizes="]
    argv += ["--nofast", "--mode=y"]
    values = flags.flag_values(parser.parse_args(argv), _Toy)
    assert _Toy(**values) == _Toy(3, 0.5, ("c", "d", "e"), (), False, "y")
    assert "how wide (default: 8)" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode=z"])  # not among the choices


def test_unset_settings_stay_out_and_show_the_default_in_brackets():
    parser = _toy_parser(unset=True)
    assert flags.flag_values(parser.parse_args([]), _Toy, unset=True) == {}
    assert flags.flag_values(parser.parse_args(["--fast=0"]), _Toy, unset=True) == {"fast": False}
    shown = parser.format_help()
    for text in ("how wide [8]", "[a,b]", "go fast [true]", "a rate (default: none)\n"):
        assert text in shown, text


def test_groups_and_command_line_defaults():
    parser = argparse.ArgumentParser(formatter_class=flags.HelpFormatter)
    added = flags.add_flags(parser, _Toy, group="other", defaults={"mode": (None, "chosen later")})
    assert added == ["mode"]
    assert parser.parse_args([]).mode is None
    assert "the mode (default: chosen later)" in parser.format_help()


def test_a_setting_without_a_flag_spelling_is_refused():
    @dataclasses.dataclass
    class Odd:
        table: dict = setting(None, "no flag spelling for a dict")

    with pytest.raises(TypeError, match="no flag spelling"):
        flags.add_flags(argparse.ArgumentParser(), Odd)
