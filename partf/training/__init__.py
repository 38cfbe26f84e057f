"""Training and evaluation: schedules, optimizer, callbacks, checkpoints, the trainer.

    >>> from partf.training import TrainConfig, train
    >>> results = train(TrainConfig(train_directory="data/train", model_name="base"))

The command line is `partf-train` (partf/cli/train.py); see `partf.training.trainer`
for what a run writes where.
"""

from partf.lazy import lazy_exports

# Imported on first use, so that what needs no TensorFlow loads without it (partf.lazy).
_WHERE = {
    "CheckpointError": "checkpoint",
    "CheckpointManager": "checkpoint",
    "ConfigError": "config",
    "TrainConfig": "config",
    "InverseSqrt": "lr_schedules",
    "WarmupCosine": "lr_schedules",
    "build_schedule": "lr_schedules",
    "ArchSettings": "optimizer",
    "ArchSplitOptimizer": "optimizer",
    "build_optimizer": "optimizer",
    "Evaluator": "evaluation.perplexity",
    "SplitStats": "evaluation.perplexity",
    "perplexity_report": "evaluation.perplexity",
    "RunPaths": "trainer",
    "Trainer": "trainer",
    "TrainingError": "trainer",
    "TrainingInterrupted": "trainer",
    "train": "trainer",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
