"""TensorBoard logs on every backend: scalars and images, with or without TensorFlow.

On TensorFlow a run writes with `tf.summary`. Elsewhere (JAX, possibly without
TensorFlow) `EventFileWriter` writes the same files in Python: TFRecord-framed `Event`
protos in the form TensorFlow 2's `tf.summary.scalar` and `tf.summary.image` write, so
`tensorboard` reads them alike. Callbacks write through `write_scalars` and
`write_image`, which take either writer.
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from partf.data.tfrecord_format import (
    encode_bytes,
    encode_double,
    encode_int,
    encode_scalar_tensor,
    encode_string_tensor,
    frame,
)

_FILE_COUNTER = itertools.count()


def _metadata(plugin: str) -> bytes:
    """SummaryMetadata: plugin_data (1) {plugin_name (1)}, as TensorFlow writes it."""
    return encode_bytes(1, encode_bytes(1, plugin.encode()))


def _value(tag: str, tensor: bytes, plugin: str) -> bytes:
    """Summary.Value: tag (1), tensor (8), metadata (9)."""
    return (
        encode_bytes(1, tag.encode()) + encode_bytes(8, tensor) + encode_bytes(9, _metadata(plugin))
    )


class EventFileWriter:
    """Writes one TensorBoard event file in `folder` (created if needed), in Python.

    The file is named as TensorFlow names its own (`events.out.tfevents.<time>.<host>.
    <pid>.<n>.v2`), so several writers in one folder, or a resumed run's new file beside
    the old one, are all read.
    """

    def __init__(self, folder: str | os.PathLike) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        now = time.time()
        name = f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}"
        self.path = folder / f"{name}.{next(_FILE_COUNTER)}.v2"
        self._file = open(self.path, "ab")  # noqa: SIM115 (open for the writer's life)
        # Event: wall_time (1), file_version (3), source_metadata (10) {writer (1)}.
        first = encode_double(1, now) + encode_bytes(3, b"brain.Event:2")
        self._file.write(frame(first + encode_bytes(10, encode_bytes(1, b"partf"))))
        self._file.flush()

    def _write(self, step: int, values: list[bytes]) -> None:
        # Event: wall_time (1), step (2), summary (5) {value (1), ...}.
        summary = b"".join(encode_bytes(1, value) for value in values)
        event = encode_double(1, time.time()) + encode_int(2, step) + encode_bytes(5, summary)
        self._file.write(frame(event))

    def scalars(self, step: int, values: Mapping[str, float]) -> None:
        """One event at `step` holding each value as a float32 scalar ("scalars" plugin)."""
        if values:
            self._write(
                step,
                [_value(tag, encode_scalar_tensor(v), "scalars") for tag, v in values.items()],
            )

    def image(self, step: int, tag: str, png: bytes) -> None:
        """One PNG image at `step` ("images" plugin: [width, height, png] strings)."""
        if png[:8] != b"\x89PNG\r\n\x1a\n":
            raise ValueError("the image is not a PNG")
        width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk comes first
        tensor = encode_string_tensor([str(width).encode(), str(height).encode(), png])
        self._write(step, [_value(tag, tensor, "images")])

    def flush(self) -> None:
        """Hands what was written to the operating system."""
        self._file.flush()

    def close(self) -> None:
        """Flushes and closes the file."""
        if not self._file.closed:
            self._file.close()


def open_writer(folder: str | os.PathLike) -> Any:
    """A writer for `folder`: `tf.summary`'s on the TensorFlow backend, else an
    `EventFileWriter` (no TensorFlow needed)."""
    import keras

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.summary.create_file_writer(str(folder))
    return EventFileWriter(folder)


def write_scalars(writer: Any, step: int, values: Mapping[str, float]) -> None:
    """Writes scalars at `step` with either kind of writer (see the module docstring)."""
    if isinstance(writer, EventFileWriter):
        writer.scalars(step, {tag: float(value) for tag, value in values.items()})
        return
    import tensorflow as tf

    with writer.as_default(step=step):
        for tag, value in values.items():
            tf.summary.scalar(tag, value)


def write_image(writer: Any, step: int, tag: str, png: bytes) -> None:
    """Writes a PNG image at `step` with either kind of writer."""
    if isinstance(writer, EventFileWriter):
        writer.image(step, tag, png)
        return
    import tensorflow as tf

    with writer.as_default(step=step):
        tf.summary.image(tag, tf.io.decode_png(png, channels=3)[None])
