"""The loss-spike guard inside a compiled multi-step execution: a skipped step leaves the
weights exactly as if its batch had not been there; "stop" drops every later step."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from partf.models.train_step import TrainStep
from partf.training.callbacks.monitoring import SpikeMonitor
from partf.training.run_state import RunProgress
from partf.training.spike_guard import SpikeGuard

BATCH, STEPS, SPIKE, NAN = 8, 12, 6, 9


class Linear(TrainStep, keras.Sequential):
    """A linear regression that trains with partf's step (`compile(spike_guard=...)`)."""


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 4)).astype("float32")
    y = x @ rng.normal(size=(4, 1)).astype("float32")
    y[SPIKE * BATCH : (SPIKE + 1) * BATCH] *= 1000.0  # an injected loss spike
    y[NAN * BATCH] = np.nan  # and a NaN loss
    return x, y


def _fit(batches, guard=None, monitor=False):
    """SGD (constant rate: the step counter does not matter) on the given batch indices,
    4 steps per XLA-compiled execution. Returns the model, the history and the
    `SpikeMonitor` (None without `monitor`)."""
    x, y = _data()
    rows = np.concatenate([np.arange(b * BATCH, (b + 1) * BATCH) for b in batches])
    keras.utils.set_random_seed(1)
    model = Linear([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.02),
        loss="mse",
        jit_compile=True,
        steps_per_execution=4,
        spike_guard=guard,
    )
    callbacks, spike_monitor = [], None
    if guard is not None and monitor:
        progress = RunProgress(
            batches_per_epoch=len(batches), total_steps=len(batches), tokens_per_batch=BATCH
        )
        spike_monitor = SpikeMonitor(progress, tf.summary.create_noop_writer(), guard, 4)
        callbacks.append(spike_monitor)
    history = model.fit(
        x[rows], y[rows], batch_size=BATCH, shuffle=False, verbose=0, callbacks=callbacks
    )
    return model, history, spike_monitor


@pytest.fixture(scope="module")
def clean():
    """The reference: the spiky and NaN batches left out."""
    model, _, _ = _fit([b for b in range(STEPS) if b not in (SPIKE, NAN)])
    return [w.numpy() for w in model.weights]


def test_skip_drops_exactly_the_spiky_steps(clean, caplog):
    guard = SpikeGuard("skip", factor=3.0, warmup=3)
    with caplog.at_level("WARNING", logger="partf.training"):
        model, history, monitor = _fit(range(STEPS), guard, monitor=True)
    assert monitor.skipped == 2 and monitor.outcome is None
    assert "loss spike guard: 2 step(s) skipped" in caplog.text  # reported at the epoch end
    for got, want in zip(model.weights, clean, strict=True):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
    assert int(guard.skipped.numpy()) == 2 and int(guard.accepted.numpy()) == STEPS - 2
    assert np.isfinite(history.history["loss"][-1])  # the skipped losses are not averaged


def test_stop_drops_every_later_step(clean):
    guard = SpikeGuard("stop", factor=3.0, warmup=3)
    model, _, monitor = _fit(range(STEPS), guard, monitor=True)
    assert monitor.outcome is not None and monitor.outcome.kind == "spike"  # told to stop
    before, _, _ = _fit(range(SPIKE))
    for got, want in zip(model.weights, before.weights, strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    # The host stops after the execution (4 steps) holding the spike; its later steps
    # were dropped inside the compiled function.
    assert int(guard.skipped.numpy()) == 4 - SPIKE % 4


def test_without_the_guard_the_spike_is_applied(clean):
    model, _, _ = _fit(range(SPIKE + 1))
    partial, _, _ = _fit(range(SPIKE))
    moved = max(
        float(np.max(np.abs(a.numpy() - b.numpy())))
        for a, b in zip(model.weights, partial.weights, strict=True)
    )
    assert moved > 1.0  # one spiky step moves the weights far: the guard has work to do


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="unknown spike guard mode"):
        SpikeGuard("sometimes")
    with pytest.raises(ValueError, match="factor must be > 0"):
        SpikeGuard("skip", factor=0.0)
    with pytest.raises(ValueError, match="choose one of skip, stop"):
        SpikeGuard("off")  # no guard is None, not a guard that judges nothing


# ------------------------------------------------------------ in the trainer
@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Random tokens (vocabulary 60), 12 batches of 4 x 8."""
    from partf.data import context_batches, write_tfrecords

    root = tmp_path_factory.mktemp("spike_records")
    stream = np.random.default_rng(0).integers(1, 60, size=12 * 4 * 8 + 1).astype(np.int32)
    write_tfrecords(
        context_batches(stream, 4, 8), root / "train", vocab_size=60, num_tokens=len(stream)
    )
    return root / "train"


def _argv(records, out, *extra):
    return [
        f"--train_directory={records}",
        "--valid_directory=",
        "--test_directory=",
        "--d_model=8",
        "--num_heads=2",
        "--d_ffn=16",
        "--num_layers=1",
        "--mem_len=4",
        "--cutoffs=",
        "--epochs=1",
        "--nojit_compile",
        "--steps_per_execution=2",
        "--log_every=2",
        "--lr_schedule=constant",
        "--warmup_steps=0",
        f"--output_dir={out}",
        "--model_name=spiky",
        # A factor below 1 makes every judged step a spike: deterministic "spikes".
        "--spike_factor=0.5",
        "--spike_warmup=3",
        *extra,
    ]


@pytest.mark.slow
def test_trainer_skip_counts_and_logs(records, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from partf.cli.train import main

    assert main(_argv(records, tmp_path, "--spike_guard=skip")) == 0
    log = (tmp_path / "logs" / "spiky" / "training.log").read_text()
    assert "loss spike guard: " in log and "(9 in all;" in log  # 12 steps, 3 accepted
    events = EventAccumulator(str(tmp_path / "logs" / "spiky" / "train"))
    events.Reload()
    assert "skipped_steps" in events.Tags()["tensors"]


@pytest.mark.slow
def test_trainer_stop_exits_1_with_a_message(records, tmp_path, capsys):
    from partf.cli.train import main

    assert main(_argv(records, tmp_path, "--spike_guard=stop")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("partf-train: error: the training loss spiked")
    assert "at step 4" in err[-1] and "--spike_guard=skip" in err[-1]
