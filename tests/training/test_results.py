"""What a finished run leaves (`partf.training.results`): results.json's figures, the
saved model that scores the same, and, for a run cut by --max_steps, what it ran."""

from __future__ import annotations

import math
from pathlib import Path

import keras
import numpy as np
import pytest

from partf.training.evaluation.perplexity import Evaluator
from partf.training.trainer import RunPaths, train
from tests.training.helpers import tensorboard_scalars, train_config


def test_results_hold_every_figure(trained_run):
    config, results, _ = trained_run
    assert results["steps"] == 24
    assert results["wall_time_seconds"] > 0
    assert math.isfinite(results["train"]["loss"])
    for split in ("valid", "test"):
        report = results[split]
        assert report["num_tokens"] == 3 * 8 * 16 and report["num_batches"] == 3
        assert report["perplexity"] == pytest.approx(math.exp(report["loss"]))
        # Equal batches: the mean of exp(batch loss) is at least exp(mean loss) (Jensen).
        assert report["perplexity_original"] >= report["perplexity"]
        # Word-level and per-character figures from the records' metadata.json.
        words, chars = 3 * (80 + 40), 3 * 600
        total_nll = report["loss"] * report["num_tokens"]
        assert report["word_perplexity"] == pytest.approx(math.exp(total_nll / words))
        assert report["bits_per_character"] == pytest.approx(total_nll / chars / math.log(2))
    # The search (argmax evaluation) is also scored with the expected mixture of pi.
    for split in ("valid", "test"):
        mixture, argmax = results["expected_weights"][split], results[split]
        assert mixture["num_tokens"] == argmax["num_tokens"]
        assert mixture["loss"] != pytest.approx(argmax["loss"], rel=1e-6)
    pi = np.array(results["pi"])
    assert pi.shape == (2, 3)
    np.testing.assert_allclose(pi.sum(axis=1), 1.0, rtol=1e-5)
    assert len(results["architecture"].split()) == 2
    assert results["tau"] == pytest.approx(0.1, rel=1e-4)
    assert results["config"]["model"]["tau_steps"] == 24
    # The model config is stored once, resolved: the training settings do not repeat it.
    assert results["config"]["training"] == config.training_dict()
    assert "model" not in results["config"]["training"]


def test_saved_model_loads_and_scores_the_same(trained_run, trainer_records):
    _, results, paths = trained_run
    model = keras.saving.load_model(paths.folder.model_file)
    np.testing.assert_allclose(model.pi(), results["pi"], rtol=1e-6)
    root, _ = trainer_records
    from partf.data import load_tfrecords

    stats = Evaluator(model, jit_compile=False).evaluate(load_tfrecords(root / "test"))
    assert stats.total_nll / stats.num_tokens == pytest.approx(results["test"]["loss"], rel=1e-5)


def test_a_run_cut_by_max_steps_says_what_it_ran(trainer_records, tmp_path, capfd):
    """results.json: "epochs" is what was asked; epochs_run, epochs_completed and steps
    what ran. The heatmap of the last step is written though no plot_every multiple came.
    The console says what is compiled before the first step."""
    config = train_config(
        trainer_records, tmp_path, train_directory=str(trainer_records[0] / "train6"),
        valid_directory="", test_directory="", jit_compile=False, steps_per_execution=3,
        max_steps=9, ckpt_every=0, eval_every=0, log_every=3, plot_every=100,
    )  # fmt: skip
    results = train(config)
    assert (results["steps"], results["epochs"], results["max_steps"]) == (9, 2, 9)
    assert (results["epochs_run"], results["epochs_completed"]) == (1.5, 1)
    paths = RunPaths(Path(config.output_dir), "tiny")
    assert [p.name for p in paths.plots.glob("step*.png")] == ["step9.png"]
    assert [step for step, _ in tensorboard_scalars(paths.logs / "train")["pi"]] == [9]
    notice = "partf: compiling the train step (graph, no XLA, 3 steps per execution) before "
    assert notice + "step 0 of 9;" in capfd.readouterr().err
