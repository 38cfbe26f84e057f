"""Each mechanism's analytic FLOP count (what the cost-aware search charges) against the
FLOPs XLA counts in the compiled call (JAX backend's cost analysis, in a subprocess), for
the causal forms and the non-causal ones (`causal=False`, an encoder's attention)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

MECHANISMS = {
    "relative": dict(mem_len=32),
    "softmax": dict(mem_len=32),
    "local": dict(window_size=16),
    "linear": dict(chunk_size=16),
    "performer": dict(num_features=32, chunk_size=16),
    "fastformer": dict(chunk_size=16),
    "norm": dict(chunk_size=16),
    "diag": dict(window_size=16),
    "primal": dict(low_rank=8),
    "eva": dict(window_size=16, chunk_size=4, mem_chunks=8),
}

# The non-causal forms: no memory, and a length (60) that windows and blocks of 16 do not
# divide, so the counts of the padded last block are checked too.
NONCAUSAL = {
    "relative": {},
    "softmax": {},
    "local": dict(window_size=16),
    "linear": {},
    "performer": dict(num_features=32),
    "fastformer": {},
    "norm": {},
    "diag": dict(window_size=16),
    "eva": dict(window_size=16, chunk_size=4),
    "lara": dict(num_landmarks=8),
}
NONCAUSAL_LENGTH = 60

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from partf.attention import create_attention
    from partf.layers.feed_forward import FeedForward

    causal = sys.argv[2] == "causal"
    B, T, D, H = 4, int(sys.argv[3]), 64, 4
    x = np.random.default_rng(0).standard_normal((B, T, D)).astype("float32")

    def xla_flops_per_token(layer, **call_kwargs):
        layer.build(x.shape)
        trainable = [v.value for v in layer.trainable_variables]
        fixed = [v.value for v in layer.non_trainable_variables]

        def run(trainable, fixed, x, kwargs):
            return layer.stateless_call(trainable, fixed, x, training=False, **kwargs)[0]

        compiled = jax.jit(run).lower(trainable, fixed, x, call_kwargs).compile()
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        return cost["flops"] / (B * T)

    out = {}
    for name, options in json.loads(sys.argv[1]).items():
        layer = create_attention(name, D, H, causal=causal, **options)
        measured = xla_flops_per_token(layer, state=layer.get_initial_state(B))
        out[name] = (layer.flops_per_token(T, B), measured)
    dense = FeedForward(D, 4 * D)
    out["dense"] = (dense.flops_per_token(T, B), xla_flops_per_token(dense))
    print(json.dumps(out))
    """
)


def xla_counts(mechanisms: dict, mode: str, length: int) -> dict:
    """{name: (analytic, XLA) FLOPs per token}, "dense" included, from a JAX subprocess."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install 'jax[cpu]')")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(mechanisms), mode, str(length)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def counts():
    return xla_counts(MECHANISMS, "causal", 64)


@pytest.fixture(scope="module")
def noncausal_counts():
    return xla_counts(NONCAUSAL, "noncausal", NONCAUSAL_LENGTH)


@pytest.mark.parametrize("name", [*MECHANISMS, "dense"])
def test_analytic_flops_match_xla_cost_analysis(counts, name):
    """The analytic count covers the matrix products; XLA also counts element-wise work,
    so ours may be a little lower, never higher, and within 20%."""
    ours, xla = counts[name]
    assert 0.8 * xla <= ours <= 1.02 * xla, (name, ours, xla)


@pytest.mark.parametrize("name", NONCAUSAL)
def test_noncausal_flops_match_xla_cost_analysis(noncausal_counts, name):
    """The same bounds for the non-causal forms: an encoder's search charges these."""
    ours, xla = noncausal_counts[name]
    assert 0.8 * xla <= ours <= 1.02 * xla, (name, ours, xla)
