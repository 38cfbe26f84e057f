"""partf-train's attention flags: --attn_<mechanism>_<option> reaches that mechanism
only, and an option that no chosen mechanism takes stops the command with one line."""

from __future__ import annotations

from partf.cli.train import attention_options, build_parser, configs_from_args, main, parse_args


def test_mechanism_flags_set_their_own_option_next_to_the_shared_one():
    parser = build_parser(attention_options())
    args = parser.parse_args(
        ["--model_name=r", "--attn_window_size=32", "--attn_eva_window_size=64"]
    )
    options = configs_from_args(args).model.attention_options
    assert options == {"window_size": 32, "eva_window_size": 64}
    assert "eva only" in parser.format_help()


def test_an_option_no_chosen_mechanism_takes_is_a_usage_error(capsys):
    status = main(["--attention=linear", "--attn_window_size=8", "--model_name=r"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and "Traceback" not in err[0]
    assert "'window_size' (--attn_window_size) is taken by none of the chosen mechanisms" in err[0]
    assert "(linear); options they take: chunk_size, linear_chunk_size" in err[0]


def test_a_preset_and_positions_parse(capsys):
    parser = build_parser(attention_options())
    args = parser.parse_args(["--model_name=r", "--architecture=transnormer", "--position=auto"])
    model = configs_from_args(args).model
    # The preset is written out; "auto" waits for the data (resolve_model resolves it).
    assert model.architecture == "diag D diag D norm D" and model.position == "auto"
    status = main(["--attention=fastformer", "--position=rotary", "--model_name=r"])
    assert status == 2
    assert "not defined for fastformer attention" in capsys.readouterr().err


def test_the_mechanism_drop_attention_to_puts_in_takes_its_options(capsys):
    """--drop_attention_to=local builds sliding-window blocks, so its window is an option
    of the run; without them the same flag is refused in one line."""
    common = ["--model_name=r", "--init_from=runs/softmax", "--attn_local_window_size=16"]
    config, _ = parse_args([*common, "--drop_attention=3", "--drop_attention_to=local"])
    assert config.model.attention_options["local_window_size"] == 16
    status = main([*common, "--drop_attention=3", "--drop_attention_to=norm"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert "'local_window_size' (--attn_local_window_size) is taken by none" in err[0]
