"""The search's own machinery: the sampled-path estimator, the cost term, and a search
that finds attention where a task needs it."""

from __future__ import annotations

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.models import ModelConfig, PARTransformerXL
from partf.models.cost import candidate_flops, expected_flops
from partf.training.optimizer import ArchSettings, build_optimizer

V, B, T, M = 24, 4, 12, 6


def tiny(**fields) -> PARTransformerXL:
    values = dict(
        vocab_size=V,
        d_model=16,
        num_heads=2,
        d_ffn=32,
        num_layers=2,
        mem_len=M,
        cutoffs=(),
        batch_size=B,
        dropout_rate=0.0,
    )
    values.update(fields)
    return PARTransformerXL(ModelConfig(**values))


def batch(seed=0):
    tokens = np.random.default_rng(seed).integers(1, V, size=(B, T + 1)).astype("int32")
    return tokens[:, :-1], tokens[:, 1:]


# ------------------------------------------------------------- sampled path
@pytest.fixture(scope="module")
def sampled_model():
    return tiny(search_estimator="sampled")


def test_run_sampled_equals_the_drawn_candidate_and_keeps_every_state(sampled_model):
    block = sampled_model.blocks[0]
    x = keras.random.normal((B, T, 16), seed=3)
    states = block.get_initial_state(B)
    full_y, full_states = block(x, states=states, tau=1.0, training=False)
    for index in range(block.num_candidates):
        y, new_states = block.run_sampled(ops.convert_to_tensor(index), x, states)
        alone, _ = block.run_candidate(index, x, states[index])
        np.testing.assert_allclose(ops.convert_to_numpy(y), ops.convert_to_numpy(alone), 1e-6)
        # The attention's memory advances whichever candidate ran.
        for got, want in zip(new_states, full_states, strict=True):
            assert got.keys() == want.keys()
            for name in got:
                np.testing.assert_allclose(
                    ops.convert_to_numpy(got[name]), ops.convert_to_numpy(want[name]), 1e-6
                )


def test_sample_index_draws_from_pi(sampled_model):
    block = sampled_model.blocks[1]
    block.arch_logits.assign(np.log(np.array([0.6, 0.3, 0.1], "float32")))
    # Traced once: 3000 eager draws took a minute of the default suite.
    draw = tf.function(block.sample_index)
    draws = np.array([int(draw()) for _ in range(3000)])
    freq = np.bincount(draws, minlength=3) / draws.size
    np.testing.assert_allclose(freq, [0.6, 0.3, 0.1], atol=0.03)


def _loss_and_logit_grads(model, x, y, forced):
    """compute_loss and its gradient in every block's logits, with block b's draw forced
    to forced[b]."""
    originals = [block.sample_index for block in model.blocks]
    for block, index in zip(model.blocks, forced, strict=True):
        block.sample_index = lambda index=index: ops.convert_to_tensor(index, "int32")
    try:
        model.reset_state()
        with tf.GradientTape() as tape:
            hidden = model(x, training=True)
            loss = model.compute_loss(x, y, hidden, training=True)
        grads = tape.gradient(loss, [block.arch_logits for block in model.blocks])
    finally:
        for block, original in zip(model.blocks, originals, strict=True):
            block.sample_index = original
    return float(loss), [np.asarray(g) for g in grads]


def test_score_function_estimate_is_exact_in_expectation():
    """Enumerating every path of a 2-block model: the pi-weighted mean of the estimator's
    logit gradients equals the exact gradient of the expected loss, sum_paths p * L."""
    model = tiny(search_estimator="sampled")
    x, y = batch(1)
    rng = np.random.default_rng(0)
    for block in model.blocks:
        block.arch_logits.assign(rng.normal(size=3).astype("float32"))
    baseline = 2.5
    paths = list(itertools.product(range(3), repeat=2))
    losses, grads = {}, {}
    for path in paths:
        model.search_baseline.assign([baseline, 1.0])
        value, grad = _loss_and_logit_grads(model, x, y, path)
        losses[path], grads[path] = value, grad
    logits = [ops.convert_to_numpy(b.arch_logits).astype(np.float64) for b in model.blocks]
    pis = [np.exp(lg) / np.exp(lg).sum() for lg in logits]
    estimate = [sum(pis[0][p[0]] * pis[1][p[1]] * grads[p][b] for p in paths) for b in range(2)]
    # Exact: d/dlogits of sum_paths pi0[p0] pi1[p1] L(p), with L(p) fixed numbers.
    for b in range(2):
        exact = np.zeros(3)
        for path in paths:
            other = pis[1 - b][path[1 - b]]
            dpi = pis[b] * ((np.arange(3) == path[b]) - pis[b][path[b]])  # d pi_b[c] / d logit
            exact += other * losses[path] * dpi
        np.testing.assert_allclose(estimate[b], exact, rtol=1e-4, atol=1e-6)
    # Each single estimate is (L - b) * (onehot - pi): the loss value is the data loss.
    path = (2, 0)
    want0 = (losses[path] - baseline) * ((np.arange(3) == 2) - pis[0])
    np.testing.assert_allclose(grads[path][0], want0, rtol=1e-4, atol=1e-6)


@pytest.mark.slow  # XLA compilation of the sampled search: about 35 s
def test_sampled_search_trains_under_xla():
    model = tiny(search_estimator="sampled")
    optimizer = build_optimizer("adam", 1e-2, arch=ArchSettings(lr=1e-1))
    model.compile(optimizer=optimizer, jit_compile=True, steps_per_execution=4)
    x, y = batch(2)
    xs, ys = np.concatenate([x] * 8), np.concatenate([y] * 8)
    history = model.fit(xs, ys, batch_size=B, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert not np.allclose(model.pi(), 1.0 / 3)  # the logits learned
    total, weight = ops.convert_to_numpy(model.search_baseline)
    assert weight > 0 and np.isfinite(total / weight)


# --------------------------------------------------------------------- cost
def test_expected_flops_is_pi_weighted_cost_and_moves_logits_to_cheap_candidates():
    model = tiny(search_cost_weight=1.0)
    costs = candidate_flops(model, T)
    assert costs[0][2] == 0.0 and costs[0][0] > costs[0][1] > 0  # identity free
    rng = np.random.default_rng(1)
    for block in model.blocks:
        block.arch_logits.assign(rng.normal(size=3).astype("float32"))
    want = sum(float(np.dot(model.pi()[b], costs[b])) for b in range(2))
    assert float(ops.convert_to_numpy(expected_flops(model, T))) == pytest.approx(want, rel=1e-6)
    x, y = batch(3)
    with tf.GradientTape() as tape:
        with_cost = model.compute_loss(x, y, model(x, training=False), training=False)
    grads = tape.gradient(with_cost, [block.arch_logits for block in model.blocks])
    for grad, cost in zip(grads, costs, strict=True):
        # Descending the gradient raises the cheapest candidate's logit most.
        assert int(np.argmin(np.asarray(grad))) == int(np.argmin(cost))


def test_a_large_cost_weight_moves_pi_toward_cheap_candidates():
    """The same search from the same weights, without and with a large cost weight."""
    x, y = batch(4)
    results = {}
    for weight in (0.0, 3e4):  # the tiny blocks cost a few kFLOPs: 3e4 per MFLOP is large
        keras.utils.set_random_seed(7)
        model = tiny(search_cost_weight=weight)
        optimizer = build_optimizer("adam", 1e-3, arch=ArchSettings(lr=1e-1))
        model.compile(optimizer=optimizer, jit_compile=False)
        model.fit(np.concatenate([x] * 40), np.concatenate([y] * 40), batch_size=B, verbose=0)
        results[weight] = (model.pi(), float(ops.convert_to_numpy(expected_flops(model, T))))
    (pi_free, cost_free), (pi_costly, cost_costly) = results[0.0], results[3e4]
    assert cost_costly < 0.6 * cost_free, (cost_free, cost_costly)
    assert np.all(pi_costly[:, 0] < pi_free[:, 0]), (pi_free, pi_costly)  # less attention
    assert np.all(pi_costly[:, 2] > pi_free[:, 2]), (pi_free, pi_costly)  # more identity


# ------------------------------------------------------ attention is needed
def copy_task(steps: int, lag: int, seed: int = 0):
    """Streams where token t repeats token t - lag: predictable only by looking back."""
    rng = np.random.default_rng(seed)
    length = steps * T + 1 + lag
    stream = np.empty((B, length), "int32")
    stream[:, :lag] = rng.integers(1, V, size=(B, lag))
    for t in range(lag, length):
        stream[:, t] = stream[:, t - lag]
    # Fresh random tokens every 2 * lag, so the task never collapses to a fixed cycle.
    for start in range(0, length, 2 * lag):
        stream[:, start : start + lag] = rng.integers(1, V, size=(B, min(lag, length - start)))
        for t in range(start + lag, min(start + 2 * lag, length)):
            stream[:, t] = stream[:, t - lag]
    x = np.concatenate([stream[:, i * T : i * T + T] for i in range(steps)])
    y = np.concatenate([stream[:, i * T + 1 : i * T + T + 1] for i in range(steps)])
    return x, y


def test_search_picks_attention_where_the_task_needs_it():
    """Half the targets repeat the token `lag` back: a position-wise block cannot know
    them, attention can. With one block, the search must choose attention."""
    model = tiny(num_layers=1, tau_steps=400)
    model.compile(
        optimizer=build_optimizer(
            "adam", 3e-3, arch=ArchSettings(lr=3e-2, weight_decay=5e-4, freeze_steps=100)
        ),
        jit_compile=False,
    )
    x, y = copy_task(100, lag=5)
    model.fit(x, y, batch_size=B, epochs=4, shuffle=False, verbose=0)
    pi = model.pi()[0]
    assert int(np.argmax(pi)) == 0 and pi[0] > 0.6, pi
