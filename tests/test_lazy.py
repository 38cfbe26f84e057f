"""partf.data and partf.training import their modules on first use (partf/lazy.py), so
the model, optimizer, schedules, configurations, the JAX evaluator and, on the JAX
backend, the trainer load where TensorFlow is not installed (a JAX-only GPU machine)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import pytest

import partf.data
import partf.training

WITHOUT_TENSORFLOW = textwrap.dedent(
    """
    import sys
    sys.modules["tensorflow"] = None  # any import of it now fails
    import partf.errors, partf.models, partf.training
    from partf.training import ArchSettings, TrainConfig, build_optimizer, build_schedule
    from partf.training.evaluation.jax_evaluator import JaxEvaluator
    from partf.models import PARTransformerXL
    model = PARTransformerXL(vocab_size=50, d_model=8, num_heads=2, d_ffn=16, num_layers=1,
                             mem_len=4, cutoffs=(20,), batch_size=2)
    build_optimizer("adam", build_schedule("cosine", 1e-3, 10, 100))
    partf.training.Trainer  # on JAX the trainer needs no TensorFlow either
    print("trainer loads")
    """
)


def test_model_and_optimizer_load_without_tensorflow():
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    pytest.importorskip("jax")
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "trainer loads"


def test_names_resolve_to_their_modules():
    from partf.data.tfrecords import load_tfrecords
    from partf.training.trainer import train

    assert partf.data.load_tfrecords is load_tfrecords
    assert partf.training.train is train
    assert set(partf.data.__all__) <= set(dir(partf.data))
    for name in partf.data.__all__ + partf.training.__all__:
        package = partf.data if name in partf.data.__all__ else partf.training
        assert getattr(package, name) is not None
    # Functions named like their module stay functions once the module is imported.
    importlib.import_module("partf.data.download")
    importlib.import_module("partf.data.text_stats")
    assert callable(partf.data.download) and callable(partf.data.text_stats)
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        partf.data.missing  # noqa: B018
