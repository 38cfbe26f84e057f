"""Positions in the model (`ModelConfig.position`): absolute sinusoidal and learned
positions added to the embeddings, rotary positions inside the attentions; positions
continue across segments, in generation too, and learned ones stop at their table."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.generation import Generator
from partf.models import ModelConfig, PARTransformerXL

V, B = 40, 2
TINY = dict(vocab_size=V, d_model=8, num_heads=2, d_ffn=16, mem_len=4, cutoffs=(), batch_size=B)
OPTIONS = dict(window_size=4, chunk_size=4, num_features=8, mem_chunks=3, low_rank=3, convolve=True)
#: Mechanisms a one-block model is built with; each carries exact state here (the
#: softmax memory and the windows cover what the text needs, or are exact by design).
MECHANISMS = ["softmax", "local", "diag", "linear", "norm", "performer", "eva", "fastformer"]
ROTARY = ["softmax", "local", "diag", "linear", "norm", "performer", "eva"]


def stream(length: int, seed: int = 0, pad_first: int = 0) -> np.ndarray:
    tokens = np.random.default_rng(seed).integers(1, V, size=(B, length)).astype("int32")
    tokens[0, :pad_first] = 0  # row 0 starts with padding: it takes no position
    return tokens


def one_block(name: str, position: str, **extra) -> PARTransformerXL:
    keras.utils.set_random_seed(5)
    config = ModelConfig(
        **{**TINY, "mem_len": 40 if name == "softmax" else 4},
        num_layers=1,
        architecture=name,
        position=position,
        dropout_rate=0.0,
        attention_options=OPTIONS,
        **extra,
    )
    return PARTransformerXL(config)


def segment_by_segment(model, tokens, cuts) -> np.ndarray:
    states, outputs = model.initial_state(B), []
    for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
        hidden, states = model.forward(tokens[:, start:stop], states)
        outputs.append(np.asarray(ops.convert_to_numpy(hidden)))
    return np.concatenate(outputs, axis=1)


CASES = [(name, "sinusoidal") for name in MECHANISMS]
CASES += [(name, "learned") for name in ("softmax", "linear", "fastformer", "primal")]
CASES += [(name, "rotary") for name in ROTARY]


@pytest.mark.parametrize("name,position", CASES)
def test_segments_with_carried_state_equal_one_pass(name, position):
    model = one_block(name, position)
    tokens = stream(29, pad_first=3)
    whole, _ = model.forward(tokens, model.initial_state(B))
    pieces = segment_by_segment(model, tokens, (0, 9, 10, 21, 29))
    np.testing.assert_allclose(pieces, ops.convert_to_numpy(whole), rtol=1e-4, atol=2e-5)


def embedded(model: PARTransformerXL, tokens: np.ndarray) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(model.embedding(tokens))) * math.sqrt(8)


def reference_sinusoid(position: int, dim: int) -> np.ndarray:
    angles = [position / 10000.0 ** (2.0 * k / dim) for k in range(dim // 2)]
    return np.concatenate([np.sin(angles), np.cos(angles)])


def test_sinusoidal_positions_are_added_to_the_embeddings_and_continue():
    """An identity block passes the embedded input through: the hidden state is
    E[token] sqrt(D) + the sinusoid of the token's position, positions counting the
    real tokens of earlier segments and skipping padding."""
    model = one_block("identity", "sinusoidal")
    tokens = stream(12, pad_first=2)
    hidden = segment_by_segment(model, tokens, (0, 5, 12))
    real = tokens != 0
    for b in range(B):
        position = 0
        for t in range(12):
            if not real[b, t]:
                continue
            want = embedded(model, tokens[b, t]) + reference_sinusoid(position, 8)
            np.testing.assert_allclose(hidden[b, t], want, rtol=1e-5, atol=1e-5)
            position += 1


def test_learned_positions_use_their_table_and_stop_at_its_end():
    model = one_block("identity", "learned", max_positions=10)
    table = np.random.default_rng(1).normal(size=(10, 8)).astype("float32")
    model.position_embedding.embeddings.assign(table)
    tokens = stream(10)
    hidden = segment_by_segment(model, tokens, (0, 4, 10))
    want = embedded(model, tokens) + table[None] * math.sqrt(8)
    np.testing.assert_allclose(hidden, want, rtol=1e-5, atol=1e-5)

    states = model.forward(tokens, model.initial_state(B))[1]
    with pytest.raises(ValueError, match="learned positions number 10 tokens"):
        model.forward(tokens[:, :1], states)  # position 10: past the table
    # Compiled, no error can be raised: the hidden states turn NaN, not a reused row.
    compiled = tf.function(lambda x, s: model.forward(x, s)[0])
    assert np.isnan(compiled(tokens[:, :1], states).numpy()).all()
    with pytest.raises(ValueError, match="set max_positions >= 11"):
        model.check_positions(11)
    model.check_positions(10)


def test_model_memory_carries_the_position_and_resets_it():
    model = one_block("identity", "sinusoidal")
    tokens = stream(6)
    first = model(tokens, training=False)
    second = model(tokens, training=False)  # positions 6..11 now
    assert not np.allclose(np.asarray(first), np.asarray(second))
    model.reset_state("eval")
    np.testing.assert_allclose(np.asarray(model(tokens, training=False)), np.asarray(first))
    assert [v.name for v in model.state_variables] == [
        "train_state_position",
        "eval_state_position",
    ]


@pytest.mark.parametrize("name,position", [("linear", "rotary"), ("softmax", "sinusoidal")])
def test_generation_with_carried_state_equals_recomputing(name, position):
    """The carried path continues positions token by token; the recompute path feeds
    the left-padded window from an empty state, whose padding takes no position."""
    model = one_block(name, position)
    tokens = stream(14, seed=3)
    carried = Generator(model, mode="carried", compiled=False).score(tokens)
    recomputed = Generator(model, mode="recompute", context_len=20, compiled=False).score(tokens)
    np.testing.assert_allclose(carried, recomputed, rtol=1e-4, atol=1e-4)


def test_a_saved_model_with_positions_loads_and_gives_the_same_outputs(tmp_path):
    model = one_block("linear", "learned", max_positions=64)
    tokens = stream(9)
    want = model(tokens, training=False)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.config.position == "learned" and loaded.config.max_positions == 64
    loaded.reset_state()  # the file holds the memory as it was: 9 tokens read
    np.testing.assert_allclose(np.asarray(loaded(tokens, training=False)), np.asarray(want))


# ------------------------------------------------------------------ the config
def test_auto_picks_each_mechanism_its_recommended_position():
    from partf.models.config import DATA_FIELDS
    from partf.training.resolve import resolve_model

    given = {name: value for name, value in TINY.items() if name not in DATA_FIELDS}

    def resolved(**fields):
        fields = {**given, "position": "auto", **fields}
        data = dict(vocab_size=V, batch_size=B, tau_steps=1)
        return resolve_model(fields, objective="causal", search="par", **data).position

    assert resolved() == "none"  # relative attention keeps its own encoding
    assert resolved(attention="performer") == "rotary"
    assert resolved(attention="fastformer") == "none"
    assert resolved(candidates=("relative", "linear", "dense")) == "rotary"
    assert resolved(candidates=("linear", "norm", "dense")) == "none"  # they differ
    assert resolved(architecture="D I", num_layers=2) == "none"
    assert ModelConfig(**TINY).position == "none"  # the default keeps today's model


def test_rotary_is_refused_where_it_is_not_defined():
    with pytest.raises(ValueError, match="not defined for fastformer attention"):
        ModelConfig(**TINY, attention="fastformer", position="rotary")
    with pytest.raises(ValueError, match="head width must be even"):
        ModelConfig(**{**TINY, "d_model": 6, "num_heads": 2}, attention="linear", position="rotary")
    with pytest.raises(ValueError, match="unknown position 'absolute'"):
        ModelConfig(**TINY, position="absolute")
    # Relative attention keeps its own encoding; the linear candidate is rotated.
    model = PARTransformerXL(
        ModelConfig(**TINY, num_layers=1, candidates=("relative", "linear"), position="rotary")
    )
    relative, linear = (layer for _, layer in model.blocks[0].attentions())
    assert not relative.rotary and linear.rotary
