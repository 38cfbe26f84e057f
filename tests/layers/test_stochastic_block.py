"""PAR stochastic block: candidate outputs, mixing weights, gradients, states."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.attention import Attention, register_attention
from partf.layers.candidates import candidate_kind
from partf.layers.stochastic_block import BlockSettings, StochasticBlock
from partf.serialization import FormatError
from tests.layer_checks import assert_close, assert_config_round_trip

#: The settings of the blocks these tests make, unless a test gives others (the rest at
#: the model's defaults): no memory and no dropout, so that outputs can be computed by hand.
SMALL = dict(mem_len=0, dropout_rate=0.0)


def make_block(
    d_model: int,
    num_heads: int,
    d_ffn: int,
    candidates=("attention", "dense", "identity"),
    seed=None,
    name=None,
    **settings,
) -> StochasticBlock:
    """A block of `BlockSettings(d_model, num_heads, d_ffn, **settings)`, the settings
    not given at `SMALL`'s values."""
    block_settings = BlockSettings(d_model, num_heads, d_ffn, **{**SMALL, **settings})
    return StochasticBlock(block_settings, candidates, seed=seed, name=name)


D, B, T, M = 8, 2, 5, 6


@register_attention("test_block_prefix_mean")
class PrefixMean(Attention):
    """Tiny stateless test mechanism: the mean of the values up to each position."""

    def attend(self, q, k, v, state, mask=None, training=None):
        steps = ops.arange(1, ops.shape(v)[1] + 1, dtype=v.dtype)[None, :, None, None]
        return ops.cumsum(v, axis=1) / steps, state


@pytest.fixture(scope="module")
def block():
    layer = make_block(D, 2, 16, mem_len=M, name="block")
    layer.build((B, T, D))
    return layer


@pytest.fixture(scope="module")
def x():
    return keras.random.normal((B, T, D), seed=0)


def branch_outputs(block, x):
    """Each candidate's output computed by hand (evaluation, empty memory)."""
    attention, dense, identity = block.sublayers  # one entry per candidate
    attn_norm, dense_norm, identity_norm = block.norms
    assert identity is None and identity_norm is None
    y, _ = attention(x, training=False)
    return [attn_norm(x + y), dense_norm(x + dense(x, training=False)), x]


def set_logits(block, values):
    block.arch_logits.assign(np.asarray(values, "float32"))


@pytest.mark.parametrize("mode", ["argmax", "expected"])
def test_eval_modes_mix_candidates(block, x, mode):
    set_logits(block, [0.1, 0.9, -0.4])  # dense is the most likely
    y, _ = block(x, training=False, mode=mode)
    outputs = branch_outputs(block, x)
    if mode == "argmax":
        expected = outputs[1]
    else:
        pi = np.asarray(ops.softmax(ops.convert_to_tensor([0.1, 0.9, -0.4])))
        expected = sum(p * out for p, out in zip(pi, outputs, strict=True))
    assert_close(y, expected, atol=1e-5)
    # The block's own mode is the default, and the argument leaves it as it was.
    assert block.eval_mode == "argmax"
    default, _ = block(x, training=False)
    assert_close(default, outputs[1], atol=1e-5)


def test_mode_argument_overrides_training_and_the_blocks_own_mode(block, x):
    assert block.weight_mode(True) == "sample" and block.weight_mode(False) == "argmax"
    assert block.weight_mode(True, "expected") == "expected"
    set_logits(block, [0.1, 0.9, -0.4])
    # Training with expected weights: no Gumbel noise (no tau needed), no dropout here.
    y, _ = block(x, training=True, mode="expected")
    want, _ = block(x, training=False, mode="expected")
    assert_close(y, want, atol=1e-6)
    with pytest.raises(ValueError, match="needs tau"):
        block(x, training=False, mode="sample")
    with pytest.raises(ValueError, match="unknown eval_mode 'best'"):
        block(x, training=False, mode="best")


def test_training_weights_are_gumbel_samples_with_gradients(block, x):
    set_logits(block, [0.0, 0.0, 0.0])
    with tf.GradientTape() as tape:
        y, _ = block(x, tau=0.5, training=True)
        loss = ops.sum(y * ops.arange(D, dtype="float32"))
    grad = tape.gradient(loss, block.arch_logits)
    assert grad is not None and np.abs(np.asarray(grad)).sum() > 1e-6
    # The output is a convex mix of the branches: between their extremes.
    outputs = np.stack([np.asarray(o) for o in branch_outputs(block, x)])
    assert np.all(np.asarray(y) <= outputs.max(0) + 1e-5)
    assert np.all(np.asarray(y) >= outputs.min(0) - 1e-5)


def test_straight_through_picks_one_candidate_and_keeps_gradients(x):
    layer = make_block(D, 2, 16, straight_through=True, seed=3)
    layer.build((B, T, D))
    with tf.GradientTape() as tape:
        y, _ = layer(x, tau=1.0, training=True)
        loss = ops.sum(y)
    outputs = branch_outputs(layer, x)
    assert any(np.allclose(np.asarray(y), np.asarray(o), atol=1e-6) for o in outputs)
    assert np.abs(np.asarray(tape.gradient(loss, layer.arch_logits))).sum() > 1e-6


def test_one_sample_per_example(x):
    layer = make_block(D, 2, 16, sample_per_example=True, seed=4)
    layer.build((B, T, D))
    weights = np.asarray(layer.mixing_weights(tau=1.0, batch_size=64, training=True))
    assert weights.shape == (64, 3)
    assert len({int(i) for i in weights.argmax(-1)}) > 1
    per_call = make_block(D, 2, 16, seed=4).mixing_weights(1.0, 64, training=True)
    assert per_call.shape == (3,)
    y, _ = layer(x, tau=1.0, training=True)
    assert y.shape == (B, T, D)


def test_memory_updates_whatever_the_weight(block, x):
    set_logits(block, [-50.0, -50.0, 50.0])  # identity always wins
    states = block.get_initial_state(B)
    y, new_states = block(x, states=states, training=False)
    assert_close(y, x)
    memory = np.asarray(new_states[0]["memory"])
    assert_close(memory[:, -T:], x)  # memory = block input
    np.testing.assert_array_equal(np.asarray(new_states[0]["memory_mask"])[:, -T:], 1)
    assert new_states[1] == {} and new_states[2] == {}


def test_each_candidate_runs_alone(block, x):
    # run_candidate(i) is candidate i's output in the mix, and its state update.
    states = block.get_initial_state(B)
    outputs = branch_outputs(block, x)
    for index, expected in enumerate(outputs):
        y, state = block.run_candidate(index, x, states[index], training=False)
        assert_close(y, expected, atol=1e-6)
        assert sorted(state) == (["memory", "memory_mask"] if index == 0 else [])
    set_logits(block, [-50.0, 50.0, -50.0])  # dense weighs one under argmax
    mixed, _ = block(x, states=states, training=False)
    alone, _ = block.run_candidate(1, x, states[1], training=False)
    assert_close(mixed, alone, atol=1e-6)


def test_candidate_accessors(x):
    layer = make_block(D, 2, 16, candidates=("identity", "dense", "relative", "linear"), mem_len=M)
    layer.build((B, T, D))
    assert [type(s).__name__ if s else None for s in layer.sublayers] == [
        None,
        "FeedForward",
        "RelativeAttention",
        "LinearAttention",
    ]
    assert [index for index, _ in layer.attentions()] == [2, 3]
    assert [attention.registry_name for _, attention in layer.attentions()] == [
        "relative",
        "linear",
    ]
    _, states = layer(x, tau=1.0, training=False)
    cached = layer.inference_states(states)
    # Relative attention adds its cache of projected memory keys; the others are kept.
    assert "keys" in cached[2] and "keys" not in states[2]
    assert cached[0] == {} and cached[1] == {} and cached[3] is states[3]


def test_mixing_attention_types_from_the_registry(x):
    layer = make_block(
        D,
        2,
        16,
        candidates=("attention", "relative", "test_block_prefix_mean", "dense"),
        mem_len=3,
        eval_mode="expected",
    )
    assert [kind for kind, _ in layer.kinds] == ["attention"] * 3 + ["dense"]
    y, states = layer(x, training=False)
    assert [sorted(s) for s in states] == [["memory", "memory_mask"]] * 2 + [[], []]
    with tf.GradientTape() as tape:
        y, _ = layer(x, tau=0.3, training=True)
        loss = ops.sum(y**2)
    grads = tape.gradient(loss, layer.trainable_weights)
    missing = {
        w.path.split("/", 1)[1]
        for w, g in zip(layer.trainable_weights, grads, strict=True)
        if g is None
    }
    # Only the dummy's unused query and key projections get no gradient.
    assert missing == {f"test_block_prefix_mean_2/{name}/kernel" for name in ("query", "key")}


def test_single_candidate_is_fixed(x):
    layer = make_block(D, 2, 16, candidates=("dense",))
    y, _ = layer(x, training=True)
    assert layer.arch_logits is None and not layer.non_trainable_weights
    assert y.shape == (B, T, D)


def test_config_round_trip_non_default():
    layer = make_block(
        d_model=12,
        num_heads=3,
        d_ffn=20,
        candidates=("relative", "attention", "identity"),
        attention="relative",
        attention_options={"head_dim": 5},
        mem_len=9,
        clamp_len=4,
        dropout_rate=0.2,
        straight_through=True,
        eval_mode="sample",
        sample_per_example=True,
        seed=11,
        name="blk",
    )
    clone = assert_config_round_trip(layer)
    assert clone.sublayers[0].head_dim == 5 and clone.sublayers[1].clamp_len == 4


def test_unknown_candidate_and_mode():
    with pytest.raises(ValueError, match="unknown candidate 'conv'"):
        candidate_kind("conv", "relative")
    with pytest.raises(ValueError, match="unknown eval_mode 'best'"):
        make_block(D, 2, 16, eval_mode="best")
    with pytest.raises(ValueError, match="needs tau"):
        make_block(D, 2, 16).mixing_weights(training=True)


# ------------------------------------------------------------- non-causal blocks
def noncausal_block(**overrides) -> StochasticBlock:
    settings = dict(
        candidates=("softmax", "lara", "dense", "identity"), attention_options={"num_landmarks": 2},
        eval_mode="expected", causal=False, seed=3,
    )  # fmt: skip
    settings.update(overrides)
    layer = make_block(D, 2, 16, **settings)
    layer.build((B, T, D))
    return layer


def test_noncausal_block_sees_later_tokens_and_causal_does_not(x):
    changed = ops.concatenate([x[:, :-1], x[:, -1:] + 1.0], axis=1)
    for causal, candidates in [(False, ("softmax", "lara", "dense")), (True, ("softmax", "dense"))]:
        layer = noncausal_block(candidates=candidates, causal=causal)
        assert all(attention.causal is causal for _, attention in layer.attentions())
        first = np.asarray(layer(x, training=False)[0])[:, 0]
        first_changed = np.asarray(layer(changed, training=False)[0])[:, 0]
        assert np.allclose(first, first_changed, atol=1e-6) is causal


def test_noncausal_block_ignores_what_pads_hold(x):
    """Real tokens' outputs do not depend on the padded positions' contents (LARA is
    left out: its landmarks are segments of the padded length, still mask-aware)."""
    layer = noncausal_block(candidates=("softmax", "linear", "dense", "identity"))
    mask = np.ones((B, T), bool)
    mask[0, 3:] = False
    other = np.where(mask[..., None], np.asarray(x), 7.0).astype("float32")
    y, _ = layer(x, mask=mask, training=False)
    y_other, _ = layer(other, mask=mask, training=False)
    np.testing.assert_allclose(np.asarray(y_other)[mask], np.asarray(y)[mask], atol=1e-5)


def test_noncausal_config_round_trip():
    clone = assert_config_round_trip(noncausal_block(name="nc"))
    assert clone.causal is False and clone.sublayers[1].registry_name == "lara"
    assert make_block(D, 2, 16).get_config()["settings"]["causal"] is True


def test_a_saved_block_lacking_a_setting_is_refused_not_defaulted():
    config = make_block(D, 2, 16, name="b0").get_config()
    del config["settings"]["eval_mode"]
    with pytest.raises(FormatError, match=r"^the saved block b0 lacks eval_mode, which every"):
        StochasticBlock.from_config(config)


def test_noncausal_block_refusals():
    with pytest.raises(ValueError, match="'primal' .* is causal only") as error:
        noncausal_block(candidates=("primal", "dense"))
    assert "\n" not in str(error.value) and "softmax" in str(error.value)
    with pytest.raises(ValueError, match="causal only"):
        noncausal_block(candidates=("attention", "dense"), attention="primal")
    with pytest.raises(ValueError, match="set mem_len=0"):
        noncausal_block(mem_len=4)


def test_probability_parameterization_follows_the_original():
    """arch_parameterization="probabilities": the variable starts at the original's
    [0.33, 0.33, 0.34]; the Gumbel-softmax reads log(max(p, 0) + 1e-5), so the sampled
    weights equal the original's formula for the same noise, and a candidate whose
    probability fell below zero gets no gradient (it is never drawn again)."""
    from partf.layers.gumbel import gumbel_noise

    layer = make_block(D, 2, 16, arch_parameterization="probabilities", seed=3)
    layer.build((B, T, D))
    np.testing.assert_allclose(np.asarray(layer.arch_logits), [0.33, 0.33, 0.34])
    layer.arch_logits.assign(np.asarray([0.7, -0.2, 0.25], "float32"))
    p = np.maximum([0.7, -0.2, 0.25], 0.0) + 1e-5
    np.testing.assert_allclose(np.asarray(layer.pi()), p / p.sum(), rtol=1e-6)

    tau = 0.5
    state = np.asarray(layer.seed_generator.state)
    noise = np.asarray(gumbel_noise((3,), layer.seed_generator))
    layer.seed_generator.state.assign(state)  # the block draws the same noise next
    logits = (np.log(p) + noise) / tau
    want = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    with tf.GradientTape() as tape:
        weights = layer.mixing_weights(tau, training=True)
        loss = ops.sum(weights * ops.convert_to_tensor([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(np.asarray(weights), want, rtol=1e-5, atol=1e-7)
    grad = np.asarray(tape.gradient(loss, layer.arch_logits))
    assert grad[1] == 0.0 and grad[0] != 0.0 and grad[2] != 0.0
    clone = assert_config_round_trip(layer)
    assert clone.settings.arch_parameterization == "probabilities"
    with pytest.raises(ValueError, match="unknown arch_parameterization"):
        make_block(D, 2, 16, arch_parameterization="bogus")


def test_only_a_block_that_can_draw_or_a_causal_one_has_a_seed_generator():
    """A fixed non-causal block (the encoder's) never draws and makes no generator, so it
    adds no random state to checkpoints; a fixed causal block keeps the one that the
    causal model's checkpoints of earlier releases list."""
    fixed = make_block(8, 2, 16, candidates=("dense",), causal=False)
    assert fixed.seed_generator is None
    fixed.build((None, None, 8))
    assert not [v for v in fixed.variables if "seed_generator" in v.path]
    y, _ = fixed(ops.ones((2, 3, 8)), training=True)
    assert tuple(y.shape) == (2, 3, 8)
    assert make_block(8, 2, 16, candidates=("dense",)).seed_generator is not None
    search = make_block(8, 2, 16, candidates=("dense", "identity"), causal=False)
    assert search.seed_generator is not None
