"""The optimizer: any Keras optimizer by name, and separate settings for architecture logits.

By default every variable shares one optimizer, as in the original project. The PAR
paper (Mandava et al., 2020, section 4) trains the architecture parameters with learning
rate 1e-2, weight decay 5e-4, frozen for the first 10k steps; any of `--arch_lr`,
`--arch_weight_decay`, `--arch_freeze_steps` routes the logits to their own optimizer of
the same kind (`ArchSplitOptimizer`).

Example:
    >>> opt = build_optimizer("adam", learning_rate=1e-3,
    ...                       arch=ArchSettings(lr=1e-2, freeze_steps=100))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import keras

from partf.serialization import register
from partf.training.lr_schedules import Constant, Delayed

#: Substring of the path of every architecture-logit variable (see MODEL_CONTRACT).
ARCH_VARIABLE_MARK = "arch_logits"

#: Names accepted by --opt_name (Keras's own names).
OPTIMIZERS = (
    "adadelta",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamw",
    "ftrl",
    "lamb",
    "lion",
    "nadam",
    "rmsprop",
    "sgd",
)


def is_arch_variable(variable: keras.Variable) -> bool:
    """Whether `variable` is an architecture logit (its path contains "arch_logits")."""
    return ARCH_VARIABLE_MARK in variable.path


@register
class ArchSplitOptimizer(keras.optimizers.Optimizer):
    """Routes architecture logits to one optimizer and every other variable to another.

    Both optimizers step once per update, so their step counts, and hence their learning
    rate schedules, stay aligned. `iterations` and `learning_rate` are the main one's;
    `arch` takes the variables whose path contains "arch_logits".
    """

    def __init__(
        self,
        main: keras.optimizers.Optimizer,
        arch: keras.optimizers.Optimizer,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(main, dict):
            main = keras.optimizers.deserialize(main)
        if isinstance(arch, dict):
            arch = keras.optimizers.deserialize(arch)
        super().__init__(learning_rate=0.0, name=name, **kwargs)
        self.main = main
        self.arch = arch

    @staticmethod
    def _split(items: Sequence[Any], variables: Sequence[keras.Variable]):
        main, arch = [], []
        for item, variable in zip(items, variables, strict=True):
            (arch if is_arch_variable(variable) else main).append(item)
        return main, arch

    def build(self, var_list: Sequence[keras.Variable]) -> None:
        main_vars, arch_vars = self._split(var_list, var_list)
        self.main.build(main_vars)
        self.arch.build(arch_vars)
        super().build(var_list)

    @property
    def variables(self) -> list[keras.Variable]:
        return self._variables + self.main.variables + self.arch.variables

    def apply(self, grads: Sequence[Any], trainable_variables: Sequence[Any] | None = None):
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        trainable_variables = list(trainable_variables)
        if not self.built:
            self.build(trainable_variables)
        main_grads, arch_grads = self._split(grads, trainable_variables)
        main_vars, arch_vars = self._split(trainable_variables, trainable_variables)
        self.main.apply(main_grads, main_vars)
        if arch_vars:
            self.arch.apply(arch_grads, arch_vars)

    @property
    def iterations(self) -> keras.Variable:
        return self.main.iterations

    @property
    def learning_rate(self) -> Any:
        return self.main.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        # The base constructor sets a placeholder rate before `main` exists.
        if "main" in self.__dict__:
            self.main.learning_rate = value
        else:
            keras.optimizers.Optimizer.learning_rate.fset(self, value)

    def finalize_variable_values(self, var_list: Sequence[keras.Variable]) -> None:
        main_vars, arch_vars = self._split(var_list, var_list)
        self.main.finalize_variable_values(main_vars)
        self.arch.finalize_variable_values(arch_vars)

    def get_config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "main": keras.optimizers.serialize(self.main),
            "arch": keras.optimizers.serialize(self.arch),
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects=None) -> ArchSplitOptimizer:
        return cls(**config)


@dataclasses.dataclass(frozen=True)
class ArchSettings:
    """Optimizer settings of the architecture logits, None sharing the model's: a constant
    `lr` (None: the model's schedule), a decoupled `weight_decay`, and `freeze_steps`,
    updates during which the logits do not move."""

    lr: float | None = None
    weight_decay: float | None = None
    freeze_steps: int = 0

    @property
    def shared(self) -> bool:
        """True when the logits simply share the model's optimizer."""
        return self.lr is None and self.weight_decay is None and not self.freeze_steps


def _make(opt_name: str, learning_rate: Any, clipvalue: float, weight_decay: float | None):
    config: dict[str, Any] = {"learning_rate": learning_rate}
    if clipvalue:
        config["clipvalue"] = float(clipvalue)
    if weight_decay is not None:
        config["weight_decay"] = float(weight_decay)
    return keras.optimizers.get({"class_name": opt_name, "config": config})


def build_optimizer(
    opt_name: str,
    learning_rate: float | Callable[[Any], Any],
    clipvalue: float = 0.0,
    weight_decay: float | None = None,
    arch: ArchSettings | None = None,
) -> keras.optimizers.Optimizer:
    """The Keras optimizer `opt_name` (`OPTIMIZERS`, case-insensitive); an
    `ArchSplitOptimizer` when `arch` asks for separate architecture-logit settings (None
    or `ArchSettings()` shares). `clipvalue` 0 does not clip; `weight_decay` None is the
    optimizer's default (none except for AdamW).
    """
    name = opt_name.lower()
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown opt_name {opt_name!r}; valid names: {', '.join(OPTIMIZERS)}.")
    if clipvalue < 0:
        raise ValueError(f"clipvalue must be >= 0 (0 disables clipping), got {clipvalue}.")
    main = _make(name, learning_rate, clipvalue, weight_decay)
    if arch is None or arch.shared:
        return main
    if arch.freeze_steps < 0:
        raise ValueError(f"arch_freeze_steps must be >= 0, got {arch.freeze_steps}.")
    if arch.lr is not None:
        arch_rate: Any = Constant(arch.lr, delay_steps=arch.freeze_steps)
    elif arch.freeze_steps:
        if not isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            learning_rate = Constant(float(learning_rate))
        arch_rate = Delayed(learning_rate, arch.freeze_steps)
    else:
        arch_rate = learning_rate
    decay = arch.weight_decay if arch.weight_decay is not None else weight_decay
    arch_opt = _make(name, arch_rate, clipvalue, decay)
    return ArchSplitOptimizer(main, arch_opt, name=f"{name}_arch_split")
