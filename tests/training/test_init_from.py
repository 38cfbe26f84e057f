"""partf.training.init_from (`--init_from`): weights copied from a finished run where the
block types match, blocks aligned, and scores of the source kept.

The source is a tiny fixed Transformer-XL with random weights, saved as a finished run
writes it (results.json and <name>.keras; tests/training/conftest.py); no XLA.
"""

from __future__ import annotations

import logging

import keras
import numpy as np
import pytest

from partf.training.config import ConfigError
from partf.training.evaluation.perplexity import Evaluator
from partf.training.init_from import block_alignment, init_weights, load_source
from tests.training.helpers import build, finished_run


def values(layer) -> dict[str, np.ndarray]:
    """A layer's trainable weights by their path inside the layer."""
    return {
        v.path.split(f"/{layer.name}/", 1)[-1]: keras.ops.convert_to_numpy(v)
        for v in layer.trainable_weights
    }


def assert_same(a, b) -> None:
    got, want = values(a), values(b)
    assert got.keys() == want.keys()
    for name in got:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_the_same_architecture_takes_every_weight(source):
    model, folder = source
    target = build("A D A D", seed=2)
    report = init_weights(target, folder)
    for a, b in zip(target.blocks, model.blocks, strict=True):
        for x, y in zip(a.sublayers + a.norms, b.sublayers + b.norms, strict=True):
            assert_same(x, y)
    assert_same(target.embedding, model.embedding)
    np.testing.assert_array_equal(
        *(
            [keras.ops.convert_to_numpy(v) for v in m.trainable_weights if "adaptive" in v.path][0]
            for m in (target, model)
        )
    )
    assert report.fresh_blocks == ()
    assert "adaptive_softmax/head" in report.shared and "backbone/embedding" in report.shared


def test_a_copy_scores_the_source_validation_loss(source, valid_split):
    """A fresh model of the source's architecture, started from it, scores what the
    source scores before any step."""
    model, folder = source
    target = build("A D A D", seed=5)
    before = Evaluator(target, jit_compile=False).evaluate(valid_split.dataset)
    init_weights(target, folder)
    want = Evaluator(model, jit_compile=False).evaluate(valid_split.dataset)
    got = Evaluator(target, jit_compile=False).evaluate(valid_split.dataset)
    assert got.total_nll == want.total_nll
    assert got.num_tokens == want.num_tokens
    assert before.total_nll != want.total_nll


def test_a_type_mismatch_starts_fresh_and_is_logged(source, caplog):
    model, folder = source
    target = build("D D A D", seed=2)
    fresh = {n: v.copy() for n, v in values(target.blocks[0].sublayers[0]).items()}
    with caplog.at_level(logging.INFO, logger="partf.training"):
        report = init_weights(target, folder)
    assert report.fresh_blocks == (0,)
    assert "block 0 <- block 0: dense fresh" in caplog.text
    assert "blocks starting fresh: 0" in caplog.text
    for name, value in values(target.blocks[0].sublayers[0]).items():
        np.testing.assert_array_equal(value, fresh[name])
    assert_same(target.blocks[2].sublayers[0], model.blocks[2].sublayers[0])


def test_a_searched_block_takes_its_own_candidate(source):
    model, folder = source
    target = build("A|I D|I A|I D", seed=2)
    init_weights(target, folder)
    for a, b in zip(target.blocks, model.blocks, strict=True):
        assert_same(a.sublayers[0], b.sublayers[0])
        assert_same(a.norms[0], b.norms[0])
        if a.arch_logits is not None:  # the search starts undecided
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(a.arch_logits), [0, 0])


def test_linear_attention_takes_the_projections(source, caplog):
    model, folder = source
    target = build("relative|norm|I D norm D", seed=2)
    with caplog.at_level(logging.INFO, logger="partf.training"):
        init_weights(target, folder)
    relative = values(model.blocks[0].sublayers[0])
    for block, candidate in ((0, 1), (2, 0)):
        norm = values(target.blocks[block].sublayers[candidate])
        for name in ("query/kernel", "key/kernel", "value/kernel", "output/kernel"):
            want = values(model.blocks[block].sublayers[0])[name]
            np.testing.assert_array_equal(norm[name], want)
        assert_same(target.blocks[block].norms[candidate], model.blocks[block].norms[0])
    assert set(relative) - {"query/kernel", "key/kernel", "value/kernel", "output/kernel"}
    assert "norm from relative (query/kernel, key/kernel, value/kernel, output/kernel" in (
        caplog.text
    )


def test_a_derived_model_aligns_with_the_kept_blocks(tmp_path, source):
    """A search that chose the identity in block 1: its derived model `A A D` takes
    blocks 0, 2 and 3."""
    model, _ = source
    search = build("A|I D|I A|I D|I", seed=3)
    search.blocks[1].arch_logits.assign([-2.0, 2.0])  # identity
    for b in (0, 2, 3):
        search.blocks[b].arch_logits.assign([2.0, -2.0])
    folder = finished_run(tmp_path / "search", search, "search")
    loaded = load_source(folder)
    target = build("A A D", seed=4)
    assert block_alignment(loaded, target) == [0, 2, 3]
    init_weights(target, folder)
    assert_same(target.blocks[1].sublayers[0], search.blocks[2].sublayers[0])
    assert_same(target.blocks[2].sublayers[0], search.blocks[3].sublayers[0])
    with pytest.raises(ConfigError, match="as many as it kept"):
        block_alignment(loaded, build("A D", seed=4))


def test_another_width_or_no_finished_run_is_refused(tmp_path, source):
    _, folder = source
    with pytest.raises(ConfigError, match="d_model is 16 but this run's 8"):
        init_weights(build("A D A D", d_model=8, d_ffn=8), folder)
    with pytest.raises(ConfigError, match="no finished run there"):
        init_weights(build("A D A D"), tmp_path / "nothing")
