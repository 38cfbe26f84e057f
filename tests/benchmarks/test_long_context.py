"""benchmarks/long_context.py: the stage-2 plan drawn from searches, and the report's
comparison with Transformer-XL, without training."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

# The trainer tests' record folders (8 x 16 batches: train 12, valid 3, test 3).
from tests.training.test_trainer import records  # noqa: F401 (a fixture)

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "long_context.py"
CANDIDATES = ["attention", "dense", "identity"]
A, D, IDENTITY = [0.9, 0.05, 0.05], [0.05, 0.9, 0.05], [0.05, 0.05, 0.9]


@pytest.fixture(scope="module")
def long_context():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("long_context_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def search(seed: int, pi: list[list[float]], candidates=CANDIDATES) -> dict:
    return {"seed": seed, "pi": pi, "candidates": candidates, "test": {}}


def test_stage2_trains_each_derived_architecture_once_per_seed(long_context):
    finished = {
        # Two searches of seed 0 that agree share one stage-2 run.
        "long_search_s0": search(0, [A, D, IDENTITY, A, D, D]),
        "long_cost0.1_s0": search(0, [A, D, A, IDENTITY, D, D]),
        # The same architecture with another seed is its own run.
        "long_search_s1": search(1, [A, D, A, D, D, IDENTITY]),
        # A search that found Transformer-XL itself needs no stage-2 run.
        "long_cost0.03_s1": search(1, [A, D, A, D, A, D]),
        "long_which_s0": search(
            0,
            [[0.1, 0.8, 0.1, 0, 0], [0, 0, 0, 1, 0]],
            ["relative", "norm", "linear", "dense", "identity"],
        ),
        # A search whose pi never moved (stopped while frozen) has nothing to train.
        "long_which_f25_s1": search(
            1, [[0.2] * 5, [0, 0, 0, 1, 0]], ["relative", "norm", "linear", "dense", "identity"]
        ),
        "long_txl_s0": search(0, [A, D]),  # not a search
        "short_par_s0": search(0, [A, D]),  # not the long context
    }
    specs = {spec["name"]: spec for spec in long_context.phase2(finished)}
    assert sorted(specs) == [
        "long_derived_cost0.1_s0",
        "long_derived_search_s1",
        "long_derived_which_s0",
    ]
    shared = specs["long_derived_cost0.1_s0"]
    assert shared["derived_from"] == ["long_cost0.1_s0", "long_search_s0"]
    assert shared["flags"] == ["--architecture=A D A D D", "--num_layers=5"]
    assert specs["long_derived_search_s1"]["seed"] == 1
    # The which-attention search keeps its linear mechanism's rotary positions.
    assert specs["long_derived_which_s0"]["flags"] == [
        "--architecture=norm D",
        "--num_layers=2",
        "--position=rotary",
    ]


def valid(*exact: float) -> list[dict]:
    return [{"epoch": i + 1, "exact": e, "original": e} for i, e in enumerate(exact)]


def test_report_compares_stage2_with_transformer_xl_at_the_last_common_epoch(
    long_context, tmp_path
):
    argv = ["--architecture=A D A D", "--num_layers=4"]
    runs = {
        "long_txl_s0": {
            "context": "long",
            "seed": 0,
            "valid": valid(100.0, 60.0, 50.0),
            "pi_frames": [],
            "argv": ["--architecture=A D A D A D"],
            "test": {"argmax": {"exact": 45.0}},
        },
        # Stopped after epoch 2: compared with Transformer-XL's epoch 2, no test figure.
        "long_derived_search_s0": {
            "context": "long",
            "seed": 0,
            "valid": valid(99.0, 61.2),
            "pi_frames": [],
            "argv": argv,
        },
        "long_search_s0": {
            "context": "long",
            "seed": 0,
            "valid": valid(150.0),
            "candidates": CANDIDATES,
            "pi_frames": [{"step": 10, "pi": [A, D, A, D, IDENTITY, IDENTITY]}],
        },
        # Still frozen: its pi is uniform and names no architecture.
        "long_which_s0": {
            "context": "long",
            "seed": 0,
            "valid": valid(170.0),
            "candidates": CANDIDATES,
            "pi_frames": [{"step": 5, "pi": [[1 / 3] * 3] * 6}],
        },
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": runs}))
    text = long_context.report([path])
    curves, rest = text.split("Searches:")
    searches, stage2 = rest.split("Stage 2")
    # The curves table holds each run's validation per epoch.
    assert "| long_derived_search_s0 | 99.00 | 61.20 | - | - |" in curves
    row = next(line for line in stage2.splitlines() if line.startswith("| long_derived_search_s0"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:7] == ["A D A D", "0", "2", "61.20", "60.00", "+2.0%"]
    assert cells[7] == "-"
    # Four of the six blocks of Transformer-XL: fewer block FLOPs, by the model's costs.
    flops = long_context.long_flops("A D A D")["blocks"]
    txl = long_context.long_flops("A D A D A D")["blocks"]
    assert flops == pytest.approx(txl * 2 / 3)
    assert f"({100 * (flops / txl - 1):+.0f}%)" in cells[8]
    search_row = next(line for line in searches.splitlines() if line.startswith("| long_search_s0"))
    assert "| A D A D |" in search_row
    which_row = next(line for line in searches.splitlines() if line.startswith("| long_which_s0"))
    assert "pi not yet learning" in which_row


def test_a_search_is_decided_from_the_first_frame_after_which_pi_stays_settled(long_context):
    uniform = [[1 / 3] * 3] * 2
    weak = [[0.85, 0.1, 0.05], D]  # block 1's largest pi below 0.9
    other = [D, D]  # settled, but on another argmax than the end's
    frames = [
        {"step": step, "pi": pi}
        for step, pi in [(1, uniform), (2, [A, D]), (3, weak), (4, [A, D]), (5, [A, D])]
    ]
    assert long_context.decided_step(frames) == 4
    assert long_context.decided_step(frames, threshold=0.95) is None
    frames[3]["pi"] = other
    assert long_context.decided_step(frames) == 5
    frames[4]["pi"] = weak
    assert long_context.decided_step(frames) is None
    assert long_context.decided_step([]) is None


def finished(seed: int, exact: list[float], test: float, architecture: str) -> dict:
    return {
        "context": "long",
        "seed": seed,
        "valid": valid(*exact),
        "pi_frames": [],
        "argv": [f"--architecture={architecture}"],
        "test": {"argmax": {"exact": test}},
    }


def test_report_gives_mean_and_range_over_seeds_of_finished_stage2_runs(long_context):
    runs = {
        "long_txl_s0": finished(0, [80.0, 50.0], 40.0, "A D A D A D"),
        "long_txl_s1": finished(1, [81.0, 52.0], 42.0, "A D A D A D"),
        # The seeds derived different architectures: FLOPs are their mean.
        "long_derived_cost0.05_s0": finished(0, [79.0, 51.0], 41.0, "A D A D"),
        "long_derived_cost0.05_s1": finished(1, [82.0, 53.0], 43.0, "A D"),
        # One seed finished, the other stopped after epoch 1: no summary row.
        "long_derived_search_s0": finished(0, [79.0, 51.0], 41.0, "A D A D"),
        "long_derived_search_s1": {
            **finished(1, [82.0], 43.0, "A D A D"),
            "test": {},
        },
    }
    text = long_context.report([], runs)
    summary = text.split("Stage 2 over seeds")[1]
    rows = [line for line in summary.splitlines() if line.startswith("| long_derived")]
    assert len(rows) == 1
    cells = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert cells[:3] == ["long_derived_cost0.05", "0 1", "A D A D / A D"]
    assert cells[3:6] == [
        "52.00 (51.00-53.00)",
        "51.00 (50.00-52.00)",
        f"{100 * (52 / 51 - 1):+.1f}%",
    ]
    assert cells[6:9] == [
        "42.00 (41.00-43.00)",
        "41.00 (40.00-42.00)",
        f"{100 * (42 / 41 - 1):+.1f}%",
    ]
    blocks = np.mean([long_context.long_flops(a)["blocks"] for a in ("A D A D", "A D")])
    txl = long_context.long_flops("A D A D A D")["blocks"]
    assert cells[9].startswith(f"{blocks / 1e6:.2f} ({100 * (blocks / txl - 1):+.0f}%)")
    # With a single finished seed there is nothing to summarise.
    del runs["long_derived_cost0.05_s1"]
    assert "Stage 2 over seeds" not in long_context.report([], runs)


def test_pi_gif_has_one_frame_per_recorded_pi_up_to_a_limit(long_context, tmp_path):
    from PIL import Image

    frames = [{"step": 10, "pi": [[1 / 3] * 3] * 2}, {"step": 20, "pi": [A, IDENTITY]}]
    run = {"steps": 20, "candidates": CANDIDATES, "pi_frames": frames}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": {"long_search_s0": run}}))
    gif = tmp_path / "pi.gif"
    loaded = long_context.load_runs([path])["long_search_s0"]
    assert long_context.pi_gif(loaded, "long_search_s0", gif) == 2
    with Image.open(gif) as image:
        assert image.n_frames == 2
    # partf-train logs pi every --log_every steps: 9 frames become 4, the last kept.
    many = [{"step": 10 * k, "pi": [A, D if k == 9 else IDENTITY]} for k in range(1, 10)]
    assert long_context.pi_gif({**run, "pi_frames": many}, "x", gif, most=4) == 4
    with Image.open(gif) as image:
        image.seek(3)
        last = np.asarray(image.convert("RGB"))
    long_context.pi_gif({**run, "pi_frames": many[-1:]}, "x", gif)
    with Image.open(gif) as image:
        np.testing.assert_array_equal(np.asarray(image.convert("RGB")), last)


def test_train_tf_runs_a_plan_entry_with_its_flags_on_the_exported_records(
    long_context, tmp_path, monkeypatch
):
    from partf.cli.train import parse_args

    monkeypatch.setenv("PARTF_SHARED_DATA", str(tmp_path / "shared"))
    spec = long_context.plan_spec("long_cost0.05_s1")
    command = long_context.tf_command(spec, tmp_path / "records", tmp_path / "runs")
    assert command[1:3] == ["-m", "partf.cli.train"]
    config, _ = parse_args(command[3:])
    assert config.train_directory == str(tmp_path / "records" / "long_train")
    assert config.test_directory == str(tmp_path / "records" / "long_test")
    model = config.model_config(12_000, 8, 100)
    assert (model.mem_len, config.epochs, config.seed, config.search) == (256, 6, 1, "par")
    assert model.search_cost_weight == 0.05 and model.architecture is None
    assert config.output_dir == str(tmp_path / "runs") and config.ckpt_every == 256
    # A stage-2 run: the fixed architecture's depth, rotary positions for a which one.
    fixed = long_context.plan_spec("long_derived_which_s0", "A D D", seed=0)
    config, _ = parse_args(long_context.tf_command(fixed, tmp_path, tmp_path)[3:])
    model = config.model_config(12_000, 8, 100)
    assert (model.architecture, model.num_layers, model.position) == ("A D D", 3, "rotary")
    assert config.jit_compile
    for seed in (0, 1):  # the sampled search, with both seeds as the mixture's
        sampled = long_context.plan_spec(f"long_sampled_s{seed}")
        config, _ = parse_args(long_context.tf_command(sampled, tmp_path, tmp_path)[3:])
        assert config.model_config(12_000, 8, 100).search_estimator == "sampled"
        assert config.seed == seed
        assert not config.jit_compile  # TensorFlow's XLA bridge does not compile it
    with pytest.raises(SystemExit, match="no run 'long_nothing' in the plan"):
        long_context.plan_spec("long_nothing")


def test_report_reads_a_train_tf_run_back_from_partf_trains_folder(
    long_context,
    records,  # noqa: F811 (the fixture imported above)
    tmp_path,
):
    """A real (tiny) partf-train search, read back the way `report --train_tf` reads it:
    a validation per epoch, marked where pi was frozen, pi from TensorBoard, test from
    results.json."""
    from partf.training.trainer import train
    from tests.training.test_trainer import _config

    out = tmp_path / "runs"
    # 2 epochs of 12 batches, pi logged every 4 steps (one execution), a validation every 10.
    config = _config(
        records,
        out,
        model_name="long_search_s3",
        seed=3,
        search="par",  # pi frozen for the first half: epoch 1
        jit_compile=False,
    )
    results = train(config)
    run = long_context.train_tf_run(out, "long_search_s3")
    assert (run["seed"], run["steps"], run["candidates"]) == (3, 24, CANDIDATES)
    # The validations at steps 10 and 20 are mid-epoch ones, left out.
    assert [(row["epoch"], row["step"]) for row in run["valid"]] == [(1, 12), (2, 24)]
    # Epoch 1 was scored with the expected mixture (pi frozen), epoch 2 with argmax, which
    # is the figure results.json holds for the run's end.
    assert [row["block_weights"] for row in run["valid"]] == ["expected", None]
    assert run["valid"][-1]["exact"] == pytest.approx(results["valid"]["perplexity"], abs=0.01)
    assert run["test"]["argmax"]["exact"] == results["test"]["perplexity"]
    expected_test = results["expected_weights"]["test"]["perplexity"]
    assert run["test"]["expected"]["exact"] == expected_test
    # pi every 4 steps; uniform while frozen, then the run's own final pi.
    assert [frame["step"] for frame in run["pi_frames"]] == list(range(4, 25, 4))
    np.testing.assert_allclose(run["pi_frames"][0]["pi"], np.full((2, 3), 1 / 3), atol=1e-6)
    np.testing.assert_allclose(run["pi_frames"][-1]["pi"], results["pi"], atol=1e-6)
    assert not np.allclose(run["pi_frames"][-1]["pi"], 1 / 3, atol=1e-3)
    text = long_context.report([], {"long_search_s3": run})
    assert "| long_search_s3 | 0 |" not in text  # seed 3, not 0
    curve = next(line for line in text.splitlines() if line.startswith("| long_search_s3 | "))
    assert curve.split("|")[2].strip().endswith("*") and "TensorFlow" in curve
    with pytest.raises(SystemExit, match="no partf-train run 'elsewhere'"):
        long_context.train_tf_run(out, "elsewhere")


def test_ctrl_c_on_train_tf_lets_the_child_finish_its_checkpoint(tmp_path):
    """Ctrl-C reaches the whole process group: the wrapper must wait while partf-train
    (here a stand-in that takes a second to "checkpoint") finishes, not kill it."""
    import os
    import signal
    import subprocess
    import textwrap
    import time

    marker = tmp_path / "checkpoint"
    child = textwrap.dedent(
        f"""
        import signal, sys, time
        def stop(*_):
            time.sleep(1.0)  # longer than subprocess.run's 0.25 s grace
            open({str(marker)!r}, "w").write("saved")
            sys.exit(130)
        signal.signal(signal.SIGINT, stop)
        print("ready", flush=True)
        time.sleep(60)
        """
    )
    wrapper = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(SCRIPT.parent)!r})
        import long_context
        sys.exit(long_context.run_child([sys.executable, "-c", {child!r}]))
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", wrapper],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal's job
    )
    assert process.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    assert process.wait(timeout=30) == 130
    assert marker.read_text() == "saved"
