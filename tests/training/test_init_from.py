"""partf.training.init_from (`--init_from`) and partf.training.drop_selection
(`--drop_attention`): weights copied from a finished run where the block types match,
blocks aligned, scores of the source kept, and the training-free drop chosen by the
validation loss computed directly.

The source is a tiny fixed Transformer-XL with random weights, saved as a finished run
writes it (results.json and <name>.keras); no XLA.
"""

from __future__ import annotations

import json
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from partf.models.config import ModelConfig
from partf.models.par_transformer_xl import PARTransformerXL
from partf.serialization import FORMAT_VERSION
from partf.training.config import ConfigError
from partf.training.drop_selection import select_dropped
from partf.training.evaluation.perplexity import Evaluator
from partf.training.init_from import block_alignment, init_weights, load_source
from partf.training.splits import Split

VOCAB, BATCH, LENGTH = 64, 2, 6
SIZES = dict(vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=24, mem_len=4, cutoffs=(20,))


def build(architecture: str, seed: int = 0, **changes) -> PARTransformerXL:
    keras.utils.set_random_seed(seed)
    layers = len(architecture.split())
    config = ModelConfig(
        **{**SIZES, **changes}, num_layers=layers, architecture=architecture, batch_size=BATCH
    )
    model = PARTransformerXL(config, name="par_transformer_xl")
    model.build((BATCH, LENGTH))
    return model


def finished_run(folder, model, name: str = "source"):
    """`folder` as a finished partf-train run leaves it: results.json and <name>.keras."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps({"format": FORMAT_VERSION, "model_name": name}))
    model.save(folder / f"{name}.keras")
    return folder


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A trained-looking source: `A D A D` with random weights, LayerNorms moved off their
    initial values so that a copied norm differs from a fresh one."""
    model = build("A D A D", seed=1)
    rng = np.random.default_rng(0)
    for variable in model.trainable_weights:
        if "gamma" in variable.path or "beta" in variable.path or "bias" in variable.path:
            variable.assign(rng.normal(size=variable.shape).astype("float32"))
    folder = finished_run(tmp_path_factory.mktemp("runs") / "source", model)
    return model, folder


@pytest.fixture(scope="module")
def valid_split():
    rng = np.random.default_rng(3)
    batches = rng.integers(1, VOCAB, size=(3, BATCH, LENGTH + 1)).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((batches[:, :, :-1], batches[:, :, 1:]))
    return Split(dataset, len(batches), BATCH, LENGTH, VOCAB, {})


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


def direct_loss(model, split, skip: int | None) -> float:
    """Mean loss per token over the split, memory carried, computed here block by block
    with block `skip` left out: the selection's score, written independently."""
    states = model.backbone.initial_state(BATCH)
    total, count = 0.0, 0
    for inputs, targets in split.dataset:
        x = model.embedding(inputs) * np.sqrt(model.config.d_model).astype("float32")
        new_states = []
        for b, (block, state) in enumerate(zip(model.blocks, states, strict=True)):
            y, state = block(x, states=state, mask=inputs != 0, training=False)
            new_states.append(state)
            if b != skip:
                x = y
        states = new_states
        nll = keras.ops.convert_to_numpy(model.token_nll(x, targets))
        total += float(nll.astype(np.float64).sum())
        count += nll.size
    return total / count


def test_the_drop_scores_are_the_validation_losses(source, valid_split):
    """Each score is the validation loss with that attention block alone replaced by the
    identity; the blocks dropped are those whose scores are lowest."""
    model, folder = source
    selection = select_dropped(folder, 1, valid_split, jit_compile=False)
    assert sorted(selection.losses) == [0, 2]
    for block, loss in selection.losses.items():
        assert loss == pytest.approx(direct_loss(model, valid_split, block), rel=1e-5)
    assert selection.baseline_loss == pytest.approx(direct_loss(model, valid_split, None), 1e-5)
    best = min(selection.losses, key=selection.losses.get)
    assert selection.dropped == (best,)
    tokens = ["A", "D", "A", "D"]
    tokens[best] = "I"
    assert selection.architecture == " ".join(tokens)
    with pytest.raises(ConfigError, match="has 2 attention blocks; give 1 to 2"):
        select_dropped(folder, 3, valid_split, jit_compile=False)
