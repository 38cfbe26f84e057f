"""Training and evaluation: schedules, optimizer, callbacks, checkpoints, the trainer.

    >>> from partf.training import TrainConfig, train
    >>> results = train(TrainConfig(train_directory="data/train", model_name="base"))

The command line is `partf-train` (partf/cli/train.py); see `partf.training.trainer`
for what a run writes where.
"""

from partf.training.checkpoint import CheckpointError, CheckpointManager
from partf.training.config import ConfigError, TrainConfig
from partf.training.lr_schedules import InverseSqrt, WarmupCosine, build_schedule
from partf.training.optimizer import ArchSettings, ArchSplitOptimizer, build_optimizer
from partf.training.perplexity import Evaluator, SplitStats, perplexity_report
from partf.training.trainer import RunPaths, Trainer, TrainingError, TrainingInterrupted, train

__all__ = [
    "ArchSettings",
    "ArchSplitOptimizer",
    "CheckpointError",
    "CheckpointManager",
    "ConfigError",
    "Evaluator",
    "InverseSqrt",
    "RunPaths",
    "SplitStats",
    "TrainConfig",
    "Trainer",
    "TrainingError",
    "TrainingInterrupted",
    "WarmupCosine",
    "build_optimizer",
    "build_schedule",
    "perplexity_report",
    "train",
]
