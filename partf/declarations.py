"""What partf's modules declare about their classes, read from the source without
importing it.

A class declares itself with its decorator, and nothing else lists it: `@register`
(`partf.serialization`: saved in a `.keras` file as "partf>ClassName") or
`@register_attention("name", position="rotary")` (`partf.attention.registry`: also a
mechanism, named "name" in configs and flags). The registry must find a mechanism's
module without importing every mechanism, and Keras must know every partf class before
a file is loaded without `import partf` importing Keras (`partf.keras_objects`), so this
module reads the decorators with `ast` (stdlib only, a few milliseconds); a mechanism's
name must be a literal. Adding a mechanism is writing its module under `PACKAGES` with
the decorator, and its tests (docs/development.md).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path

#: (package, its folder): the source read for declarations. Tests append a package of
#: their own to show a mechanism added by one module.
PACKAGES: list[tuple[str, Path]] = [("partf", Path(__file__).parent)]

#: The decorators read: `register` saves a class, `register_attention` also names it.
SAVE, MECHANISM = "register", "register_attention"


@dataclasses.dataclass(frozen=True)
class Declarations:
    """Everything declared in `PACKAGES`."""

    saved: dict[str, str]  # class name -> its module, for every saved class
    mechanisms: dict[str, str]  # mechanism name -> the module of its class


def declared() -> Declarations:
    """The declarations of `PACKAGES` as their source says now (read once per set of
    packages)."""
    return _read(tuple(PACKAGES))


def mechanism_name(decorator: ast.expr, where: str) -> str | None:
    """The name a `register_attention("name", ...)` decorator gives (ValueError: not a
    string literal); None for another decorator."""
    if not (isinstance(decorator, ast.Call) and called(decorator.func) == MECHANISM):
        return None
    first = decorator.args[0] if decorator.args else None
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        raise ValueError(f"{where}: {MECHANISM}() must name the mechanism by a literal")
    return first.value


def called(node: ast.expr) -> str | None:
    """The name a decorator calls or is (`register`, `registry.register_attention`)."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


@functools.cache
def _read(packages: tuple[tuple[str, Path], ...]) -> Declarations:
    return read(packages)


def read(
    packages: tuple[tuple[str, Path], ...],
    parse: Callable[[Path, str], ast.Module] | None = None,
    *,
    mechanisms_only: bool = False,
) -> Declarations:
    """The declarations of `packages`, read now.

    Args:
        parse: file, its text -> its syntax tree; lets a reader of more than the
            declarations parse each file once (`partf.cli.settings_source`).
        mechanisms_only: parse only the files that declare a mechanism (half the time),
            so that `saved` holds only the mechanisms' classes.
    """
    marker = f"@{MECHANISM}" if mechanisms_only else f"@{SAVE}"
    saved: dict[str, str] = {}
    mechanisms: dict[str, str] = {}
    for package, folder in packages:
        for path in sorted(folder.rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            if marker not in text:
                continue
            parts = path.relative_to(folder).with_suffix("").parts
            module = ".".join((package, *parts)).removesuffix(".__init__")
            tree = ast.parse(text, str(path)) if parse is None else parse(path, text)
            for node in tree.body:
                if not isinstance(node, ast.ClassDef):
                    continue
                where = f"{module}.{node.name}"
                for decorator in node.decorator_list:
                    name = mechanism_name(decorator, where)
                    if name is None and called(decorator) != SAVE:
                        continue
                    if saved.setdefault(node.name, module) != module:
                        raise ValueError(f"{where}: {node.name} is saved by two modules")
                    if name is not None:
                        if name in mechanisms:
                            raise ValueError(f"{where}: attention name {name!r} is taken")
                        mechanisms[name] = module
    return Declarations(saved, mechanisms)
