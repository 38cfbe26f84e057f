"""Loading `.keras` and `.weights.h5` files whose models have since been restructured.

Why this is needed: Keras stores a model's weights by *position in its object tree*, not
by variable name. Its saving code (`keras.src.saving.saving_lib`) walks the model's
attributes in sorted order (`_walk_saveable`: `sorted(dir(obj))`, private names last);
a layer met through attribute `attr` is stored at `<parent path>/attr`, a layer met in a
list or dict at `<parent path>/attr/<snake_case(class name)>[_k]` (numbered per
container), and each layer's own variables at `<its path>/vars/<i>`, in the order of its
`save_own_variables`. Each object is saved once, at the first path the walk meets
(`Model.layers` is an attribute too, so a layer whose own attribute sorts after "layers"
lives under `layers/...`). Moving layers, say under a `backbone` layer, therefore moves
their weights in the file, and Keras refuses the older file ("A total of N objects could
not be loaded").

The mechanism: the first thing the loader does is the root model's
`load_own_variables(store)`, and for an `H5IOStore` the store it passes is the store
itself (`store.get("")` returns it). `LegacyLayoutLoading.load_own_variables` checks
for the marker group of the new layout (`NEW_LAYOUT_GROUP`); without it, it builds in
memory the same file in the new layout, swaps it in (`store.h5_file`), and lets Keras's
walk go on over the new paths as usual. That works for `keras.saving.load_model` and
`model.load_weights` alike, on every backend (the work is h5py and numpy).

The mapping is by variable identity. `variable_paths` mirrors Keras's walk (using its
own `_walk_saveable`, `_get_unique_name`, `_name_key` and each layer's own
`save_own_variables`), once over the model and once over a `LegacyView`: the attribute
tree the model had before the restructuring, whose leaves are the model's own (new)
layers. A variable is copied from its legacy path to its new one. `translate` checks
that every variable has a legacy dataset of its shape, and that every legacy dataset of
the groups the view claims is placed (so a wrong view fails loudly); the other groups
(the optimizer's, whose variables are stored by position in the order of
`model.trainable_variables`, and the metrics') are copied unchanged.

The walk uses private Keras functions; tests/models/test_legacy_layout.py pins
`variable_paths` against the files `model.save` writes, so a Keras release that
changes the walk fails there rather than in a user's load. Only single-file h5 stores
are translated (sharded and npz stores never held the legacy layouts).

Example (the model class):
    >>> class Encoder(LegacyLayoutLoading, keras.Model):
    ...     def legacy_view(self) -> LegacyView:
    ...         return LegacyView([("embedding", self.backbone.embedding), ...],
    ...                           own_variables(self))
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import h5py
import keras
from keras.src.saving import saving_lib
from keras.src.saving.keras_saveable import KerasSaveable
from keras.src.utils import naming

#: The top-level group of the new layout, which no file in a legacy layout has.
NEW_LAYOUT_GROUP = "backbone"


class LegacyView:
    """The attribute tree a model had in a legacy layout.

    Args:
        attrs: (attribute name, layer, LegacyView or list of them) pairs; None values
            are left out (Keras skips what is not saveable). Walked in Keras's order.
        own_variables: the root's own variables, in their saved order.
    """

    def __init__(self, attrs: list[tuple[str, Any]], own_variables: list[Any]) -> None:
        attrs = [(name, obj) for name, obj in attrs if obj is not None]
        self.attrs = sorted(attrs, key=lambda item: saving_lib._name_key(item[0]))
        self.own_variables = list(own_variables)


class _Recorder(dict):
    """A store that keeps what `save_own_variables` puts in it: the variables."""


def own_variables(obj: Any) -> list[Any]:
    """The variables `obj` saves as its own (`<path>/vars/<i>`), in that order."""
    if isinstance(obj, LegacyView):
        return obj.own_variables
    recorder = _Recorder()
    obj.save_own_variables(recorder)
    return [recorder[str(i)] for i in range(len(recorder))]


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, LegacyView):
        return iter(obj.attrs)
    return saving_lib._walk_saveable(obj)


def _join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


def variable_paths(root: Any) -> dict[int, tuple[str, Any]]:
    """Where Keras's walk saves each layer variable under `root` (a model or LegacyView).

    Returns:
        id(variable) -> (h5 dataset path, variable). The optimizer and metrics are not
        walked: their own layouts do not depend on the model's tree.
    """
    found: dict[int, tuple[str, Any]] = {}
    visited: set[int] = set()

    def visit(obj: Any, path: str) -> None:
        if id(obj) in visited:
            return
        visited.add(id(obj))
        for i, variable in enumerate(own_variables(obj)):
            found.setdefault(id(variable), (_join(path, f"vars/{i}"), variable))
        for attr, child in _children(obj):
            if isinstance(child, (keras.layers.Layer, LegacyView)):
                visit(child, _join(path, attr))
            elif isinstance(child, (list, tuple, dict)):
                container(child, _join(path, attr), set())

    def container(items: Any, path: str, seen: set[int]) -> None:
        if id(items) in seen:
            return
        seen.add(id(items))
        used: dict[str, int] = {}
        for item in list(items.values()) if isinstance(items, dict) else items:
            if isinstance(item, (KerasSaveable, LegacyView)):
                kind = naming.to_snake_case(item.__class__.__name__)
                name = saving_lib._get_unique_name(kind, used)
                if isinstance(item, (keras.layers.Layer, LegacyView)):
                    visit(item, _join(path, name))
            elif isinstance(item, (list, tuple, dict)):
                name = saving_lib._get_unique_name("container", used)
                container(item, _join(path, name), seen)

    visit(root, "")
    return found


def _datasets(group: h5py.Group, prefix: str) -> list[str]:
    names: list[str] = []
    group.visititems(
        lambda key, obj: names.append(f"{prefix}/{key}") if isinstance(obj, h5py.Dataset) else None
    )
    return names


def translate(h5_file: h5py.File, model: Any, view: LegacyView) -> h5py.File:
    """An in-memory h5 file holding `h5_file`'s values at `model`'s paths.

    Args:
        h5_file: a weights file in the layout `view` describes.
        model: the model to load it into.
        view: the model's legacy attribute tree (`legacy_view()`).

    Raises:
        ValueError: the view does not account for the file (a variable without a legacy
            dataset, a shape that differs, or a dataset it does not place).
    """
    legacy = variable_paths(view)
    new = variable_paths(model)
    missing = [variable.path for key, (_, variable) in new.items() if key not in legacy]
    if missing:
        raise ValueError(f"legacy weights layout: no legacy place for {missing}.")
    claimed = {path.split("/", 1)[0] for path, _ in legacy.values()}
    saved = {
        name for group in claimed if group in h5_file for name in _datasets(h5_file[group], group)
    }
    unplaced = saved - {path for path, _ in legacy.values()}
    if unplaced:
        raise ValueError(f"legacy weights layout: datasets not placed: {sorted(unplaced)}.")
    out = h5py.File(io.BytesIO(), "w")
    for key, (path, variable) in new.items():
        old = legacy[key][0]
        if old not in h5_file:
            raise ValueError(
                f"legacy weights layout: {old} (for {variable.path}) is not in the file."
            )
        data = h5_file[old][()]
        if tuple(data.shape) != tuple(variable.shape):
            raise ValueError(
                f"legacy weights layout: {old} has shape {data.shape} but {variable.path} "
                f"has {tuple(variable.shape)}."
            )
        out.create_dataset(path, data=data)
    for name in h5_file:  # the optimizer's and metrics' groups: unchanged
        if name not in claimed and name not in out:
            h5_file.copy(h5_file[name], out, name)
    return out


class LegacyLayoutLoading:
    """Mixin for a model: loads weights files in its legacy layout by translating them.

    The model provides `legacy_view() -> LegacyView`; a file that has the
    `NEW_LAYOUT_GROUP` group is loaded as it is.
    """

    def load_own_variables(self, store: Any) -> None:
        single_h5 = isinstance(store, saving_lib.H5IOStore) and not isinstance(
            store, saving_lib.ShardedH5IOStore
        )
        if single_h5 and NEW_LAYOUT_GROUP not in store.h5_file:
            old = store.h5_file
            store.h5_file = translate(old, self, self.legacy_view())
            old.close()
            store = store.get("")
        super().load_own_variables(store)
