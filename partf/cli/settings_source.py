"""partf-train's settings and the attention mechanisms' options, read from the source.

partf-train makes a flag of each `TrainConfig` and `ModelConfig` setting and an
`--attn_*` flag of each option of every declared mechanism (`partf.declarations`).
Importing the classes would import Keras and TensorFlow, and `--help` or a mistyped flag
would wait seconds for them, so this module reads the same values from the source with
`ast` (stdlib only, tens of milliseconds); tests/cli/test_quiet.py checks that they
equal what the imported classes say.

What is read must be made of literals (strings, numbers, bools, None; tuples, lists and
dicts of them, with unpacking; f-strings; `tuple(...)` of one) or name a module-level
constant holding one, here or imported from a module under `declarations.PACKAGES`.
Class attributes and constructor defaults are looked up along the bases in Python's
order. Anything else is an error naming its file and line.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from partf import declarations
from partf.cli.flags import Setting

#: (module, class) of the dataclasses whose settings are partf-train's flags.
TRAIN_CONFIG = ("partf.training.config", "TrainConfig")
MODEL_CONFIG = ("partf.models.config", "ModelConfig")

#: The call that declares a setting (`partf.settings.setting`) and its parameters.
SETTING, SETTING_PARAMETERS = "setting", ("default", "help", "group", "choices", "metavar")

#: Setting.kind of an annotation: a plain type, or tuple[<element>, ...].
_KINDS = {"bool": "bool", "int": "int", "float": "float", "str": "str"}
_LIST_KINDS = {"int": "ints", "str": "names"}


@functools.cache
def train_settings() -> tuple[Setting, ...]:
    """TrainConfig's settings, in order, as `flags.settings_of(TrainConfig)` gives them."""
    return _Source(tuple(declarations.PACKAGES)).settings(*TRAIN_CONFIG)


@functools.cache
def model_settings() -> tuple[Setting, ...]:
    """ModelConfig's settings, in order, as `flags.settings_of(ModelConfig)` gives them."""
    return _Source(tuple(declarations.PACKAGES)).settings(*MODEL_CONFIG)


def mechanism_options() -> dict[str, dict[str, tuple[Any, str]]]:
    """Mechanism name -> its options (option -> (default, help)), as the `options` of its
    class, for every mechanism declared in `declarations.PACKAGES` (read once per set of
    packages; do not change the result). ValueError naming the file and line for a help
    text or default not made of literals, or an option no constructor gives a default.
    """
    return _mechanism_options(tuple(declarations.PACKAGES))


@functools.cache
def _mechanism_options(
    packages: tuple[tuple[str, Path], ...],
) -> dict[str, dict[str, tuple[Any, str]]]:
    source = _Source(packages)
    # The declarations as `declarations.declared()` reads them, from the trees read here.
    mechanisms = declarations.read(packages, source.parse, mechanisms_only=True).mechanisms
    found = {}
    for name, module_name in sorted(mechanisms.items()):
        module = source.module(module_name)
        cls = next(
            node
            for node in module.tree.body
            if isinstance(node, ast.ClassDef)
            and any(
                declarations.mechanism_name(decorator, module.where(node)) == name
                for decorator in node.decorator_list
            )
        )
        found[name] = {
            option: (source.constructor_default(module, cls, option), help_text)
            for option, help_text in source.class_attribute(module, cls, "option_help").items()
        }
    return found


def _assignments(body: list[ast.stmt]) -> Iterator[tuple[ast.expr, ast.expr]]:
    """(target, value) of each assignment with a value among the statements `body`."""
    for node in body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                yield target, node.value


class _Import(NamedTuple):
    """A name a module imports: `from <module> import <name>`."""

    module: str
    name: str


class _Module:
    """One module's source: its syntax tree and what its top level binds to each name."""

    def __init__(self, name: str, path: Path, tree: ast.Module) -> None:
        self.name, self.path, self.tree = name, path, tree
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        #: name -> a class, the value assigned to it, or where it is imported from.
        self.names: dict[str, ast.AST | _Import] = {}
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef):
                self.names[node.name] = node
            elif isinstance(node, ast.ImportFrom):
                origin = node.module or ""
                if node.level:  # relative: from this package, level - 1 packages up
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join([*parts, *([node.module] if node.module else [])])
                for alias in node.names:
                    self.names[alias.asname or alias.name] = _Import(origin, alias.name)
            for target, value in _assignments([node]):
                if isinstance(target, ast.Name):
                    self.names[target.id] = value
                elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                    # A, B = "a", "b"
                    for item, item_value in zip(target.elts, value.elts, strict=False):
                        if isinstance(item, ast.Name):
                            self.names[item.id] = item_value

    def where(self, node: ast.AST) -> str:
        return f"{self.path}:{getattr(node, 'lineno', 1)}"


class _Source:
    """The modules of `packages`, parsed when first needed, and the values they hold."""

    def __init__(self, packages: tuple[tuple[str, Path], ...]) -> None:
        self.packages = packages
        self.modules: dict[str, _Module | None] = {}
        self.trees: dict[Path, ast.Module] = {}

    def parse(self, path: Path, text: str | None = None) -> ast.Module:
        """The syntax tree of file `path` (whose text is `text`, if read already)."""
        if path not in self.trees:
            text = path.read_text(encoding="utf-8") if text is None else text
            self.trees[path] = ast.parse(text, filename=str(path))
        return self.trees[path]

    def module(self, name: str) -> _Module | None:
        """Module `name`; None for one outside `packages` (Keras, typing)."""
        if name not in self.modules:
            self.modules[name] = None
            for package, folder in self.packages:
                if name != package and not name.startswith(f"{package}."):
                    continue
                parts = name[len(package) + 1 :].split(".") if name != package else []
                paths = [folder.joinpath(*parts, "__init__.py")]
                if parts:
                    paths.append(folder.joinpath(*parts[:-1], f"{parts[-1]}.py"))
                path = next((path for path in paths if path.is_file()), None)
                if path is not None:
                    self.modules[name] = _Module(name, path, self.parse(path))
                    break
        return self.modules[name]

    def lookup(self, module: _Module, name: str) -> tuple[_Module, ast.AST] | None:
        """What `name` is at the top level of `module`, followed through imports: the
        module that defines it and its class or value; None for a name from elsewhere
        (a module outside `packages`, a builtin)."""
        bound = module.names.get(name)
        if isinstance(bound, _Import):
            origin = self.module(bound.module)
            return None if origin is None else self.lookup(origin, bound.name)
        return None if bound is None else (module, bound)

    def value(self, module: _Module, node: ast.AST) -> Any:
        """The value expression `node` of `module` stands for, if made of literals;
        ValueError naming the file and line for anything else."""
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Tuple | ast.List):
            items: list[Any] = []
            for item in node.elts:
                if isinstance(item, ast.Starred):
                    items.extend(self.value(module, item.value))
                else:
                    items.append(self.value(module, item))
            return tuple(items) if isinstance(node, ast.Tuple) else items
        if isinstance(node, ast.Dict):
            found: dict[Any, Any] = {}
            for key, item in zip(node.keys, node.values, strict=True):
                if key is None:  # {**other}
                    found.update(self.value(module, item))
                else:
                    found[self.value(module, key)] = self.value(module, item)
            return found
        if isinstance(node, ast.JoinedStr) and all(
            isinstance(part, ast.Constant) or (part.conversion == -1 and not part.format_spec)
            for part in node.values
        ):
            return "".join(
                part.value
                if isinstance(part, ast.Constant)
                else str(self.value(module, part.value))
                for part in node.values
            )
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            operand = self.value(module, node.operand)
            if isinstance(operand, int | float) and not isinstance(operand, bool):
                return -operand
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "tuple"
            and len(node.args) == 1
            and not node.keywords
        ):
            return tuple(self.value(module, node.args[0]))
        if isinstance(node, ast.Name):
            found_at = self.lookup(module, node.id)
            if found_at is not None and not isinstance(found_at[1], ast.ClassDef):
                return self.value(*found_at)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found_at = self.lookup(module, node.value.id)
            if found_at is not None and isinstance(found_at[1], ast.ClassDef):
                return self.class_attribute(*found_at, node.attr)
        raise ValueError(
            f"{module.where(node)}: {ast.unparse(node)} is not made of literals; partf-train "
            "reads it from the source without importing it (partf/cli/settings_source.py), "
            "so write it as a literal or the name of a module-level one"
        )

    def bases(self, module: _Module, cls: ast.ClassDef) -> list[tuple[_Module, ast.ClassDef]]:
        """The classes `cls` is based on, in its method resolution order (C3), itself
        first; bases outside `packages` (Keras's layer, object) are left out."""
        direct = []
        for base in cls.bases:
            found = self.lookup(module, base.id) if isinstance(base, ast.Name) else None
            if found is not None and isinstance(found[1], ast.ClassDef):
                direct.append(found)
        pending = [self.bases(*base) for base in direct] + [direct]
        order = [(module, cls)]
        while pending := [line for line in pending if line]:
            for line in pending:
                head = line[0]
                if not any(head in other[1:] for other in pending):
                    break
            else:
                raise ValueError(
                    f"{module.where(cls)}: {cls.name}'s bases have no consistent order"
                )
            order.append(head)
            pending = [line[1:] if line[0] == head else line for line in pending]
        return order

    def class_attribute(self, module: _Module, cls: ast.ClassDef, name: str) -> Any:
        """Attribute `name` of class `cls`: the value the first of its bases (itself
        first) assigns it in its body."""
        for owner, klass in self.bases(module, cls):
            assigned = [
                value
                for target, value in _assignments(klass.body)
                if isinstance(target, ast.Name) and target.id == name
            ]
            if assigned:
                return self.value(owner, assigned[-1])
        raise ValueError(f"{module.where(cls)}: no class of {cls.name}'s bases sets {name}")

    def constructor_default(self, module: _Module, cls: ast.ClassDef, name: str) -> Any:
        """The default of constructor argument `name` of `cls`, from the first of its bases
        whose own `__init__` declares it with one (as `partf.attention.base.
        constructor_default` finds it in the imported class)."""
        for owner, klass in self.bases(module, cls):
            inits = [
                node
                for node in klass.body
                if isinstance(node, ast.FunctionDef) and node.name == "__init__"
            ]
            if not inits:
                continue
            arguments = inits[-1].args
            positional = [*arguments.posonlyargs, *arguments.args]
            given = positional[len(positional) - len(arguments.defaults) :]
            defaults = {
                arg.arg: default for arg, default in zip(given, arguments.defaults, strict=True)
            }
            for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
                if default is not None:
                    defaults[arg.arg] = default
            if name in defaults:
                return self.value(owner, defaults[name])
        raise ValueError(
            f"{module.where(cls)}: {cls.name} lists option {name!r} but no constructor "
            "declares it with a default"
        )

    def settings(self, module_name: str, class_name: str) -> tuple[Setting, ...]:
        """The settings of dataclass `class_name`: its fields declared with `setting`, in
        a dataclass's order (inherited ones first; a redeclared field keeps its base's
        place and takes its own value)."""
        module = self.module(module_name)
        found = None if module is None else self.lookup(module, class_name)
        if found is None or not isinstance(found[1], ast.ClassDef):
            raise ValueError(f"no class {class_name} in {module_name}")
        fields: dict[str, Setting] = {}
        for owner, klass in reversed(self.bases(*found)):
            for statement in klass.body:
                if (
                    isinstance(statement, ast.AnnAssign)
                    and isinstance(statement.target, ast.Name)
                    and isinstance(statement.value, ast.Call)
                    and declarations.called(statement.value.func) == SETTING
                ):
                    fields[statement.target.id] = self.setting(owner, statement)
        return tuple(fields.values())

    def setting(self, module: _Module, statement: ast.AnnAssign) -> Setting:
        """The `Setting` of one field declared `name: type = setting(...)`."""
        call, where = statement.value, module.where(statement)
        assert isinstance(call, ast.Call) and isinstance(statement.target, ast.Name)
        given = dict(zip(SETTING_PARAMETERS, call.args, strict=False))
        for keyword in call.keywords:
            if keyword.arg is None:
                raise ValueError(f"{where}: name the arguments of {SETTING}() one by one")
            given[keyword.arg] = keyword.value
        values = {key: self.value(module, node) for key, node in given.items()}
        choices = values.get("choices")
        return Setting(
            name=statement.target.id,
            kind=_kind(statement.annotation, where),
            default=values["default"],
            help=values["help"],
            group=values.get("group"),
            choices=None if choices is None else tuple(choices),
            metavar=values.get("metavar"),
        )


def _kind(annotation: ast.expr, where: str) -> str:
    """The `Setting.kind` of a field's annotation (as `flags._kind` gives it of the type)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        annotation = ast.parse(annotation.value, mode="eval").body  # a quoted annotation
    if isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        # `X | None`: None only means "unset", which the flag expresses by being absent.
        inner = [
            side
            for side in (annotation.left, annotation.right)
            if not (isinstance(side, ast.Constant) and side.value is None)
        ]
        if len(inner) == 1:
            annotation = inner[0]
    if (
        isinstance(annotation, ast.Subscript)
        and declarations.called(annotation.value) == "tuple"
        and isinstance(annotation.slice, ast.Tuple)
        and len(annotation.slice.elts) == 2
        and isinstance(annotation.slice.elts[1], ast.Constant)
        and annotation.slice.elts[1].value is Ellipsis
    ):
        element = declarations.called(annotation.slice.elts[0])
        if element in _LIST_KINDS:
            return _LIST_KINDS[element]
    if isinstance(annotation, ast.Name) and annotation.id in _KINDS:
        return _KINDS[annotation.id]
    raise ValueError(f"{where}: no flag spelling for a setting of type {ast.unparse(annotation)}")
