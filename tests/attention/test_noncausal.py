"""Non-causal forms (`causal=False`) against independent float64 quadratic references.

Each mechanism with a non-causal form is compared with its reference in
tests/attention/references.py (`NONCAUSAL_REFERENCES`) on the output and the gradients,
with padding inside and at the end of the sequences (EVA's, which draws its proposals,
in test_eva_noncausal.py); then every mechanism is checked to give the same outputs at
real positions whatever the pads hold.
"""

from __future__ import annotations

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from tests.attention import references
from tests.attention.helpers import check_attend, padding_mask, random_heads, to_np

BATCH, LENGTH, HEADS, DIM = 2, 11, 2, 4


def set_random(variable, rng, offset: float = 0.0) -> None:
    variable.assign(rng.normal(size=variable.shape).astype("float32") + offset)


def norm_settings(layer, rng) -> tuple[dict, dict]:
    """The reference's normalisation config and the layer-norm weights it reads."""
    config = {"norm_type": layer.norm_type, "rms_form": layer.rms_form}
    if layer.norm_type != "layer":
        return config, {}
    config["norm_epsilon"] = layer.output_norm.epsilon
    set_random(layer.output_norm.gamma, rng, 1.0)
    set_random(layer.output_norm.beta, rng)
    return config, {"norm_gamma": layer.output_norm.gamma, "norm_beta": layer.output_norm.beta}


# name, options, the reference's config: one case per form worth telling apart.
CASES = [
    ("softmax", {}, {"mem_len": 0, "causal": False}),
    ("linear", {"chunk_size": 4}, {}),
    ("norm", {"feature_map": "elu", "norm_type": "simple_rms"}, {"feature_map": "elu"}),
    ("norm", {"feature_map": "relu", "norm_type": "layer"}, {"feature_map": "relu"}),
    ("performer", {"num_features": 6, "seed": 3}, {}),
    ("local", {"window_size": 3}, {"window_size": 3}),
    ("local", {"window_size": 16}, {"window_size": 16}),
    (
        "diag",
        {"window_size": 4, "diag_activation": "softmax", "norm_type": "simple_rms"},
        {"window_size": 4, "diag_activation": "softmax"},
    ),
    (
        "diag",
        {"window_size": 3, "diag_activation": "relu", "norm_type": "layer"},
        {"window_size": 3, "diag_activation": "relu"},
    ),
    ("fastformer", {"use_bias": True}, {}),
]


@pytest.mark.parametrize(
    "name,options,config", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_matches_quadratic_reference(name, options, config):
    """Outputs and gradients (inputs and trainable weights the reference reads) equal
    the reference's, with padding inside and at the end; the layer carries no state."""
    layer = create_attention(name, HEADS * DIM, HEADS, causal=False, **options)
    layer.build((None, None, HEADS * DIM))
    rng = np.random.default_rng(4)
    q, k, v = random_heads(BATCH, LENGTH, HEADS, DIM)
    config, variables, constants = dict(config), {}, {}
    if hasattr(layer, "norm_type"):
        extra, variables = norm_settings(layer, rng)
        config.update(extra)
    if name == "performer":
        constants = {"projection": layer.projection}
    if name == "fastformer":
        # Pooling vectors large enough that the weights are far from uniform.
        set_random(layer.query_pool, rng)
        set_random(layer.key_pool, rng)
        set_random(layer.transform.bias, rng)
        variables = {
            "query_pool": layer.query_pool,
            "key_pool": layer.key_pool,
            "transform_kernel": layer.transform.kernel,
            "transform_bias": layer.transform.bias,
        }
    assert layer.state_spec(BATCH) == {}
    reference = references.NONCAUSAL_REFERENCES[name]
    check_attend(
        layer, reference, config, q, k, v, {}, padding_mask(),
        variables=variables, constants=constants, rtol=2e-4, grad_rtol=2e-3,
    )  # fmt: skip


# Every mechanism with a non-causal form, as a whole layer (projections included).
LAYERS = [
    ("softmax", {}),
    ("relative", {}),
    ("linear", {}),
    ("linear", {"rotary": True}),
    ("norm", {}),
    ("performer", {"num_features": 8, "seed": 1}),
    ("local", {"window_size": 3}),
    ("diag", {"window_size": 4}),
    ("fastformer", {}),
    ("lara", {"num_landmarks": 3, "seed": 2}),
    ("eva", {"window_size": 4, "chunk_size": 2}),
]


@pytest.mark.parametrize(
    "name,options", LAYERS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(LAYERS)]
)
def test_pads_do_not_matter(name, options):
    """Replacing what the pads hold (large random vectors) changes no output at a real
    position; changing a real token does change the others (it is seen both ways)."""
    width = HEADS * DIM
    layer = create_attention(name, width, HEADS, causal=False, **options)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(BATCH, LENGTH, width)).astype("float32")
    mask = padding_mask()
    y, _ = layer(x, mask=mask)
    noisy = np.where(mask[..., None], x, rng.normal(size=x.shape) * 100).astype("float32")
    y_noisy, _ = layer(noisy, mask=mask)
    real = mask[..., None].repeat(width, -1)
    np.testing.assert_allclose(to_np(y_noisy)[real], to_np(y)[real], rtol=1e-5, atol=1e-5)
    # The last real token of the second sequence reaches its first (window sizes allow).
    changed = x.copy()
    changed[1, 1] += 3.0
    y_changed, _ = layer(changed, mask=mask)
    assert not np.allclose(to_np(y_changed)[1, 0], to_np(y)[1, 0])


def test_eva_causal_only_options_are_refused():
    with pytest.raises(ValueError, match="leave them off with causal=False"):
        create_attention("eva", 8, 2, causal=False, overlap_window=True)


@pytest.mark.parametrize("name", ["primal"])
def test_causal_only_mechanisms_refuse_in_one_line(name):
    cls = get_attention_class(name)
    assert not cls.supports_noncausal
    with pytest.raises(ValueError, match="has no non-causal form") as error:
        create_attention(name, 8, 2, causal=False)
    assert "\n" not in str(error.value)


def test_fastformer_convolution_is_causal_only():
    with pytest.raises(ValueError, match="convolve=False with causal=False"):
        create_attention("fastformer", 8, 2, causal=False, convolve=True)


def test_performer_redraw_draws_per_call_in_training_only():
    """Non-causal redraw: every training call takes fresh features (nothing is carried),
    evaluation always reads the build-time draw."""
    layer = create_attention(
        "performer", HEADS * DIM, HEADS, causal=False, num_features=8, redraw=True, seed=0
    )
    x = np.random.default_rng(0).normal(size=(BATCH, LENGTH, HEADS * DIM)).astype("float32")
    mask = padding_mask()
    assert layer.state_spec(BATCH) == {}
    first, second = (to_np(layer(x, mask=mask, training=True)[0]) for _ in range(2))
    assert not np.allclose(first, second)
    evaluation = [to_np(layer(x, mask=mask)[0]) for _ in range(2)]
    np.testing.assert_array_equal(evaluation[0], evaluation[1])
