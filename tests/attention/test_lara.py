"""LARA: refused in causal models; non-causal against a per-head written-out reference."""

import math

import numpy as np
import pytest
from keras import ops

from partf.attention import create_attention, get_attention_class
from partf.attention.lara import LaraAttention
from tests.attention.helpers import (
    assert_finite_on_large_inputs,
    explicit_softmax,
    gradients,
    random_heads,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def logsumexp(x):
    top = ops.max(x)
    return top + ops.log(ops.sum(ops.exp(x - top)))


def reference(layer, q, k, v, mask):
    """Evaluation-mode LARA (w_c = mu_c), one example and head at a time."""
    batch, length, heads, dim = q.shape
    count = layer.num_landmarks
    scale = 1.0 / math.sqrt(dim)
    q2, k2 = layer.project_q(q), layer.project_k(k)
    segment = [(t * count) // length for t in range(length)]
    examples = []
    for b in range(batch):
        valid = [t for t in range(length) if mask[b, t]]
        per_head = []
        for h in range(heads):
            members = [[t for t in valid if segment[t] == c] for c in range(count)]
            used = [c for c in range(count) if members[c]]
            mu = {
                c: ops.mean(ops.stack([q2[b, t, h] for t in members[c]]), axis=0)
                + ops.mean(ops.stack([k2[b, t, h] for t in members[c]]), axis=0)
                for c in used
            }
            q_bar = {
                c: ops.mean(ops.stack([q2[b, t, h] for t in members[c]]), axis=0) for c in used
            }

            def log_p(c, x, mu=mu):  # proposal c's positive random feature of x: [n]
                return (ops.matmul(x, mu[c]) - 0.5 * ops.sum(x * x, axis=-1)) * scale

            keys = ops.stack([k[b, t, h] for t in valid])
            values = ops.stack([v[b, t, h] for t in valid])
            kv = {c: ops.matmul(explicit_softmax(log_p(c, keys), True), values) for c in used}
            lse_k = {c: logsumexp(log_p(c, keys)) for c in used}
            log_prop = {c: log_p(c, mu[c][None])[0] for c in used}
            balance = {
                c: ops.exp(
                    log_prop[c] - logsumexp(ops.stack([log_p(c, mu[e][None])[0] for e in used]))
                )
                for c in used
            }
            queries = q[b, :, h]
            t_cn = {
                c: explicit_softmax(
                    ops.matmul(ops.stack([q[b, t, h] for t in range(length)]), q_bar[c]) * scale,
                    np.asarray(mask[b]),
                )
                for c in used
            }
            t_mean = sum(t_cn.values()) / len(used)
            ratios = ops.stack(
                [
                    ops.log(ops.maximum(balance[c] + layer.alpha_coeff * (t_cn[c] - t_mean), 1e-8))
                    + log_p(c, queries)
                    + lse_k[c]
                    - log_prop[c]
                    for c in used
                ]
            )  # [used, n]
            weights = ops.softmax(ratios, axis=0)
            per_head.append(ops.einsum("cn,cd->nd", weights, ops.stack([kv[c] for c in used])))
        examples.append(ops.stack(per_head, axis=1))
    return ops.stack(examples)


def test_causal_use_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="non-causal only and cannot be used in a causal"):
        create_attention("lara", 12, 3)
    with pytest.raises(ValueError, match="non-causal only"):
        LaraAttention(12, 3, causal=True)


@pytest.mark.parametrize(
    "batch,length,heads,dim,landmarks", [(1, 7, 1, 4, 3), (2, 9, 2, 4, 4), (1, 3, 2, 4, 5)]
)
def test_matches_reference_in_evaluation(batch, length, heads, dim, landmarks):
    layer = LaraAttention(heads * dim, heads, num_landmarks=landmarks, alpha_coeff=2.0)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    mask[:, 0] = True
    out, state = layer.attend(q, k, v, {}, mask=mask)
    assert state == {}
    np.testing.assert_allclose(
        to_np(out), to_np(reference(layer, q, k, v, mask)), rtol=1e-4, atol=1e-5
    )
    fast = gradients(lambda q, k, v: layer.attend(q, k, v, {}, mask=mask)[0], [q, k, v])
    slow = gradients(lambda q, k, v: reference(layer, q, k, v, mask), [q, k, v])
    for name, got, want in zip("qkv", fast, slow, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-4, err_msg=name)


def test_training_samples_from_the_seed_generator():
    layer = create_attention("lara", 12, 3, causal=False, num_landmarks=3)
    x, mask = random_tokens(2, 10, 12)
    first, _ = layer(x, mask=mask, training=True)
    second, _ = layer(x, mask=mask, training=True)
    assert not np.allclose(to_np(first), to_np(second))
    evaluated = [to_np(layer(x, mask=mask)[0]) for _ in range(2)]
    np.testing.assert_array_equal(evaluated[0], evaluated[1])


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("lara", {"num_landmarks": 4})


def test_config_round_trip_and_validation():
    assert get_attention_class("lara") is LaraAttention
    layer = LaraAttention(12, 3, num_landmarks=5, alpha_coeff=0.5, seed=2, use_bias=True)
    clone = assert_config_round_trip(layer)
    assert (clone.num_landmarks, clone.alpha_coeff, clone.seed, clone.causal) == (5, 0.5, 2, False)
    with pytest.raises(ValueError, match="num_landmarks must be positive"):
        LaraAttention(12, 3, num_landmarks=0)
