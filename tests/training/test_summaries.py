"""The TensorBoard writer without TensorFlow: its files read back with tensorboard's
EventAccumulator exactly as the files `tf.summary` writes."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from partf.training.summaries import EventFileWriter, write_image, write_scalars

SCALARS = {
    3: {"loss": 4.25, "lr": 1e-3, "pi/block_0/attention": 0.5},
    7: {"loss": 3.5, "lr": 2e-3, "pi/block_0/attention": 0.625},
    12: {"loss": float("nan"), "tau": 0.1},
}


def _read(folder) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    accumulator.Reload()
    return accumulator


def _scalars(accumulator: EventAccumulator) -> dict[str, list[tuple[int, float]]]:
    return {
        tag: [(e.step, float(tf.make_ndarray(e.tensor_proto))) for e in accumulator.Tensors(tag)]
        for tag in accumulator.Tags()["tensors"]
        if accumulator.SummaryMetadata(tag).plugin_data.plugin_name == "scalars"
    }


def _png(width: int, height: int) -> bytes:
    pixels = np.random.default_rng(0).integers(0, 256, size=(height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The same scalars and image written by `tf.summary` and by `EventFileWriter`, in two
    writer sessions each (a resumed run opens a second file in the same folder)."""
    root = tmp_path_factory.mktemp("summaries")
    png = _png(5, 4)
    for name, open_writer in (
        ("tf", lambda folder: tf.summary.create_file_writer(str(folder))),
        ("python", EventFileWriter),
    ):
        for part in ((3, 7), (12,)):
            writer = open_writer(root / name)
            for step in part:
                write_scalars(writer, step, SCALARS[step])
            if part == (3, 7):
                write_image(writer, 7, "pi", png)
            writer.flush()
            writer.close()
    return root, png


def test_scalars_read_back_as_tf_summary_writes_them(written):
    root, _ = written
    ours, theirs = _scalars(_read(root / "python")), _scalars(_read(root / "tf"))
    assert sorted(ours) == sorted(theirs) == ["loss", "lr", "pi/block_0/attention", "tau"]
    for tag, events in theirs.items():
        assert [step for step, _ in ours[tag]] == [step for step, _ in events]
        np.testing.assert_array_equal([v for _, v in ours[tag]], [v for _, v in events])
    # The values themselves, as float32 scalars.
    assert ours["loss"][:2] == [(3, 4.25), (7, 3.5)] and np.isnan(ours["loss"][2][1])
    assert ours["lr"][0] == (3, pytest.approx(1e-3, rel=1e-7))


def test_the_image_reads_back_as_a_png(written):
    root, png = written
    accumulator = _read(root / "python")
    assert accumulator.SummaryMetadata("pi").plugin_data.plugin_name == "images"
    (event,) = accumulator.Tensors("pi")
    width, height, encoded = tf.make_ndarray(event.tensor_proto)
    assert (event.step, width, height) == (7, b"5", b"4")
    assert encoded == png
    theirs = tf.make_ndarray(_read(root / "tf").Tensors("pi")[0].tensor_proto)
    assert list(theirs[:2]) == [b"5", b"4"]


def test_files_are_named_as_tensorflow_names_them(written):
    root, _ = written
    names = sorted(p.name for p in (root / "python").iterdir())
    assert len(names) == 2 and all(n.startswith("events.out.tfevents.") for n in names)
    assert all(n.endswith(".v2") for n in names)


def test_a_non_png_image_is_refused(tmp_path):
    writer = EventFileWriter(tmp_path)
    with pytest.raises(ValueError, match="not a PNG"):
        writer.image(1, "pi", b"GIF89a")
    writer.close()
