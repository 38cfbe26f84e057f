"""--objective=mlm through the trainer pipeline: results, TensorBoard, .keras, resume.

Records of a learnable Markov stream (tests/training/helpers.py's) whose metadata
names a mask id; an uninterrupted run of 2 epochs of 6 batches beside one stopped by
SIGINT mid-epoch and resumed. No XLA, to stay cheap.
"""

from __future__ import annotations

import math
from pathlib import Path

import keras
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from partf.data import Masking, load_tfrecords
from partf.training.build import build_model
from partf.training.config import ConfigError, TrainConfig
from partf.training.evaluation.perplexity import Evaluator
from partf.training.optimizer import ArchSplitOptimizer, is_arch_variable
from partf.training.splits import load_data
from partf.training.trainer import RunPaths, TrainingInterrupted, train
from tests.training.helpers import SigintAt, markov_stream, resolved

VOCAB = 200
MASK_ID = 5
ENCODER = {
    "d_model": 16,
    "num_heads": 2,
    "d_ffn": 32,
    "num_layers": 2,
    "architecture": "A D",
    "attention": "linear",
    "position": "sinusoidal",
}


#: The encoder's PAR search: the blocks choose among these non-causal candidates.
SEARCH = {
    **{k: v for k, v in ENCODER.items() if k != "architecture"},
    "candidates": ("attention", "dense", "identity"),
}


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """train (6 batches of 8 x 16), valid and test (2 each), metadata with mask_id 5;
    and train_nomask, the same without a mask id (records built before --mask_symbol;
    every causal test trains on such records)."""
    from partf.data import context_batches, write_tfrecords

    root = tmp_path_factory.mktemp("mlm_records")
    for name, num_batches, seed, mask_id in (
        ("train", 6, 0, MASK_ID),
        ("valid", 2, 1, MASK_ID),
        ("test", 2, 2, MASK_ID),
        ("train_nomask", 6, 0, None),
    ):
        stream = markov_stream(num_batches * 8 * 16 + 1, seed)
        write_tfrecords(
            context_batches(stream, 8, 16),
            root / name,
            vocab_size=VOCAB,
            num_tokens=len(stream),
            mask_id=mask_id,
        )
    return root


def _config(root: Path, out: Path, **changes) -> TrainConfig:
    values = dict(
        train_directory=str(root / "train"),
        valid_directory=str(root / "valid"),
        test_directory=str(root / "test"),
        sp_model_prefix="",
        model_name="mlm",
        output_dir=str(out),
        objective="mlm",
        epochs=2,
        max_lr=3e-3,
        warmup_steps=2,
        jit_compile=False,
        steps_per_execution=2,
        log_every=2,
        ckpt_every=0,
        model=dict(ENCODER),
    )
    values.update(changes)
    return TrainConfig(**values)


@pytest.fixture(scope="module")
def runs(records, tmp_path_factory):
    """(whole config, whole results, resumed config, resumed results, interruption)."""
    whole = _config(records, tmp_path_factory.mktemp("whole"))
    whole_results = train(whole)
    split = _config(records, tmp_path_factory.mktemp("split"))
    with pytest.raises(TrainingInterrupted) as stopped:
        train(split, callbacks=[SigintAt(batch=1)])
    return whole, whole_results, split, train(split), stopped.value


def test_results_report_the_masked_perplexity(runs):
    whole, results, _, _, _ = runs
    assert results["objective"] == "mlm" and results["steps"] == 12
    assert results["architecture"] == "A D" and results["tau"] is None
    for split in ("valid", "test"):
        report = results[split]
        assert report["perplexity"] == pytest.approx(math.exp(report["loss"]))
        # Only the chosen positions count: about 15% of the 2 x 8 x 16 tokens.
        assert 0.08 * 256 < report["num_tokens"] < 0.25 * 256
        assert report["word_perplexity"] is None
        assert math.isfinite(report["perplexity"])
    paths = RunPaths(Path(whole.output_dir), "mlm")
    assert paths.folder.results_path.is_file() and paths.folder.model_file.is_file()
    assert (paths.logs / "train").is_dir() and (paths.logs / "valid").is_dir()


def test_saved_model_loads_and_scores_the_same(runs, records):
    whole, results, _, _, _ = runs
    model = keras.saving.load_model(RunPaths(Path(whole.output_dir), "mlm").folder.model_file)
    assert type(model).__name__ == "MaskedLanguageModel"
    masking = Masking(MASK_ID, VOCAB)
    test = masking.evaluation_batches(load_tfrecords(records / "test"), "test")
    stats = Evaluator(model, jit_compile=False).evaluate(test)
    assert stats.total_nll / stats.num_tokens == pytest.approx(results["test"]["loss"], rel=1e-5)
    assert stats.num_tokens == results["test"]["num_tokens"]


def test_resumed_run_ends_like_an_uninterrupted_one(runs):
    whole, whole_results, split, resumed_results, stopped = runs
    assert stopped.signum > 0
    assert resumed_results["steps"] == whole_results["steps"]
    assert resumed_results["train"]["loss"] == pytest.approx(
        whole_results["train"]["loss"], rel=1e-6
    )
    assert resumed_results["test"]["loss"] == pytest.approx(whole_results["test"]["loss"], rel=1e-6)
    a, _, _ = RunPaths(Path(whole.output_dir), "mlm").folder.newest_checkpoint()
    b, _, _ = RunPaths(Path(split.output_dir), "mlm").folder.newest_checkpoint()
    for group in ("model", "optimizer"):
        for x, y in zip(a[group], b[group], strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)


def test_training_logs_no_temperature(runs):
    whole, _, _, _, _ = runs
    log = RunPaths(Path(whole.output_dir), "mlm").training_log.read_text()
    assert "step 12/12 epoch 2: loss" in log and "tau" not in log.split("model summary")[-1]


def test_records_without_a_mask_id_are_refused(records, tmp_path):
    config = _config(records, tmp_path, train_directory=str(records / "train_nomask"))
    with pytest.raises(ConfigError, match="--mask_symbol"):
        train(config)
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({**ENCODER, "attention": "primal"}, "causal only"),
        ({**SEARCH, "candidates": ("softmax", "primal")}, r"'primal' \(from candidates\)"),
        ({**SEARCH, "search_estimator": "sampled"}, "search_estimator=sampled is for"),
        ({**SEARCH, "search_cost_weight": 0.1}, "search_cost_weight is for the causal model"),
        ({**ENCODER, "position": "learned", "max_positions": 8}, "max_positions"),
    ],
)
def test_bad_model_settings_are_refused_before_anything_is_written(
    records, tmp_path, model, message
):
    with pytest.raises(ConfigError, match=message):
        train(_config(records, tmp_path, model=model))
    assert not any(tmp_path.iterdir())


# ----------------------------------------------------------------- the search
@pytest.fixture(scope="module")
def searched(records, tmp_path_factory):
    """(config, results) of a PAR search over non-causal blocks: one epoch of 6 steps,
    --search=par (the logits frozen for the first 3 steps)."""
    config = _config(
        records, tmp_path_factory.mktemp("search"), model=dict(SEARCH), epochs=1, search="par"
    )
    return config, train(config)


def test_a_search_reports_its_architecture_pi_and_tau(searched):
    config, results = searched
    assert results["objective"] == "mlm" and results["steps"] == 6
    assert results["candidates"] == ["attention", "dense", "identity"]
    pi = np.asarray(results["pi"])
    assert pi.shape == (2, 3)
    np.testing.assert_allclose(pi.sum(axis=1), 1.0, rtol=1e-5)
    # The architecture is each block's most likely candidate, in --architecture's tokens.
    assert results["architecture"] == " ".join("ADI"[i] for i in pi.argmax(axis=1))
    assert 0.1 <= results["tau"] < 1.0  # annealed over the run's 6 steps
    search = results["search"]
    assert search["preset"] == "par" and search["estimator"] == "mixture"
    assert search["arch_lr"] == 3e-2 and search["arch_freeze_steps"] == 3
    assert search["expected_flops_per_token"] is None
    assert results["config"]["model"]["architecture"] is None
    assert math.isfinite(results["test"]["perplexity"])


def test_a_search_logs_pi_and_tau(searched):
    config, _ = searched
    paths = RunPaths(Path(config.output_dir), "mlm")
    events = EventAccumulator(str(paths.logs / "train"))
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {"tau", "pi/block_0/attention", "pi/block_1/identity"} <= tags
    assert "tau" in paths.training_log.read_text().split("model summary")[-1]


def test_the_searched_model_loads_with_its_pi(searched):
    config, results = searched
    model = keras.saving.load_model(RunPaths(Path(config.output_dir), "mlm").folder.model_file)
    assert type(model).__name__ == "MaskedLanguageModel" and model.is_search
    np.testing.assert_allclose(model.pi(), results["pi"], rtol=1e-6)
    assert model.architecture_string() == results["architecture"]


def test_the_search_logits_get_their_own_optimizer(records, tmp_path):
    """--search=par (or --arch_*) routes the encoder's logits as it does the causal model's."""
    config = _config(records, tmp_path, model=dict(SEARCH), arch_lr=1e-2, arch_freeze_steps=4)
    data = load_data(config)
    built = build_model(config, resolved(config, data, data.train.batch_size), data, None)
    optimizer = built.model.optimizer
    assert isinstance(optimizer, ArchSplitOptimizer)
    arch = built.model.arch_variables
    assert len(arch) == 2 and all(is_arch_variable(v) for v in arch)
    assert sum(is_arch_variable(v) for v in built.model.trainable_variables) == 2
    # Frozen for 4 steps, then the own rate.
    rate = optimizer.arch._learning_rate  # the schedule (`learning_rate` reads its value now)
    assert rate.value_at(3) == 0.0 and rate.value_at(4) == pytest.approx(1e-2)


@pytest.mark.slow  # about 7 s more: two partial runs
def test_a_resumed_search_ends_like_an_uninterrupted_one(searched, records, tmp_path):
    """The encoder's step counter (tau) and Gumbel generators come back from the checkpoint."""
    whole, whole_results = searched
    split = _config(records, tmp_path, model=dict(SEARCH), epochs=1, search="par")
    with pytest.raises(TrainingInterrupted):
        train(split, callbacks=[SigintAt(batch=1)])
    resumed = train(split)
    np.testing.assert_allclose(resumed["pi"], whole_results["pi"], rtol=1e-6)
    assert resumed["tau"] == pytest.approx(whole_results["tau"], rel=1e-6)
    assert resumed["test"]["loss"] == pytest.approx(whole_results["test"]["loss"], rel=1e-6)
    a, _, _ = RunPaths(Path(whole.output_dir), "mlm").folder.newest_checkpoint()
    b, _, _ = RunPaths(tmp_path, "mlm").folder.newest_checkpoint()
    for x, y in zip(a["model"], b["model"], strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
