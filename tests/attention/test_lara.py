"""LARA: refused in causal models; non-causal against a per-head written-out reference."""

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.lara import LaraAttention
from tests.attention import references
from tests.attention.helpers import (
    assert_finite_on_large_inputs,
    assert_matches_reference,
    random_heads,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def proposal_weights(layer):
    """The proposal maps' weights, under the names the reference takes them."""
    found = {}
    for prefix, dense, norm in (
        ("fq", layer.project_q_dense, layer.project_q_norm),
        ("fk", layer.project_k_dense, layer.project_k_norm),
    ):
        found.update(
            {
                f"{prefix}_kernel": dense.kernel,
                f"{prefix}_bias": dense.bias,
                f"{prefix}_gamma": norm.gamma,
                f"{prefix}_beta": norm.beta,
            }
        )
    rng = np.random.default_rng(6)
    for name, weight in found.items():
        if "kernel" not in name:  # not the initial zeros and ones
            weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.5 + 0.5)
    return found


def test_causal_use_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="non-causal only and cannot be used in a causal"):
        create_attention("lara", 12, 3)
    with pytest.raises(ValueError, match="non-causal only"):
        LaraAttention(12, 3, causal=True)


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
@pytest.mark.parametrize(
    "batch,length,heads,dim,landmarks", [(1, 7, 1, 4, 3), (2, 9, 2, 4, 4), (1, 3, 2, 4, 5)]
)
def test_matches_reference(fixed_noise, training, batch, length, heads, dim, landmarks):
    """Outputs and gradients (inputs and the proposal maps) equal the reference's; in
    training, with the layer's draws w_c = mu_c + noise given to the reference."""
    layer = LaraAttention(heads * dim, heads, num_landmarks=landmarks, alpha_coeff=2.0)
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    mask[:, 0] = True
    config = {
        "num_landmarks": landmarks,
        "alpha_coeff": layer.alpha_coeff,
        "epsilon": layer.project_q_norm.epsilon,
    }

    def run_layer(q, k, v):
        return layer.attend(q, k, v, {}, mask=mask, training=training)

    def run_reference(q, k, v, **weights):
        noise = None
        if training:
            (noise,) = fixed_noise.by_shape.values()
        return references.lara(config, weights, q, k, v, {}, mask, noise=noise)

    assert_matches_reference(
        run_layer, run_reference, dict(q=q, k=k, v=v), proposal_weights(layer), grad_rtol=2e-3
    )


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
