"""EVA's non-causal form (`partf.attention.eva_noncausal`, the authors' encoder) against
an independent float64 reference (tests/attention/references.py): exact windows plus
every other chunk's summary, with padding inside and at the end of the sequences."""

from __future__ import annotations

import numpy as np
import pytest

from partf.attention import create_attention
from partf.attention.eva import EVAAttention
from tests.attention import references
from tests.attention.helpers import check_attend, padding_mask, random_heads, random_tokens, to_np

BATCH, LENGTH, HEADS, DIM = 2, 11, 2, 4


def eva_variables(layer, rng) -> dict:
    """EVA's proposal maps with non-trivial biases and layer-norm scales, by the names
    the reference takes them under."""
    found = {}
    for prefix, name in (("fq", "project_q"), ("fk", "project_k")):
        dense, norm = getattr(layer, f"{name}_dense"), getattr(layer, f"{name}_norm")
        for weight in (dense.bias, norm.gamma, norm.beta):
            weight.assign(rng.normal(size=weight.shape).astype("float32") * 0.5 + 0.5)
        found.update(
            {
                f"{prefix}_kernel": dense.kernel,
                f"{prefix}_bias": dense.bias,
                f"{prefix}_gamma": norm.gamma,
                f"{prefix}_beta": norm.beta,
            }
        )
    return found


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
@pytest.mark.parametrize("window,chunk", [(4, 2), (6, 3)])
def test_eva_matches_reference(fixed_noise, training, window, chunk):
    """EVA's encoder form: exact windows plus every other chunk's summary; in training
    the proposals take the draws the reference is given (one per chunk)."""
    layer = create_attention(
        "eva", HEADS * DIM, HEADS, causal=False, window_size=window, chunk_size=chunk
    )
    layer.build((None, None, HEADS * DIM))
    variables = eva_variables(layer, np.random.default_rng(4))
    config = {"window_size": window, "chunk_size": chunk, "epsilon": layer.project_q_norm.epsilon}
    q, k, v = random_heads(BATCH, LENGTH, HEADS, DIM)
    layer.attend(q, k, v, {}, mask=padding_mask(), training=training)  # draws the noise
    noise = next(iter(fixed_noise.by_shape.values())) if training else None
    assert layer.state_spec(BATCH) == {}
    check_attend(
        layer, references.NONCAUSAL_REFERENCES["eva"], config, q, k, v, {}, padding_mask(),
        variables=variables, training=training, extra={"noise": noise}, rtol=2e-4,
        grad_rtol=2e-3,
    )  # fmt: skip


def test_the_noncausal_form_has_one_mask_under_both_names():
    """With causal=False the default (authors) and partf are the authors' encoder mask."""
    q, k, v = random_heads(2, 19, 2, 4, seed=7)
    _, mask = random_tokens(2, 19, 1, seed=8)
    assert EVAAttention(8, 2, causal=False).chunk_mask == "authors"
    layers = [
        EVAAttention(8, 2, causal=False, window_size=8, chunk_size=2, chunk_mask=chunk_mask)
        for chunk_mask in ("authors", "partf")
    ]
    for layer in layers:
        layer.build((None, None, 8))
    layers[1].set_weights(layers[0].get_weights())
    authors, partf = (to_np(layer.attend(q, k, v, {}, mask=mask)[0]) for layer in layers)
    np.testing.assert_allclose(authors, partf, rtol=1e-6, atol=1e-7)
