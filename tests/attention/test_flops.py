"""Each mechanism's analytic FLOP count (what the cost-aware search charges) against the
FLOPs XLA counts in the compiled call (JAX backend's cost analysis, in a subprocess)."""

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

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from partf.attention import create_attention
    from partf.layers.feed_forward import FeedForward

    B, T, D, H = 4, 64, 64, 4
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
        layer = create_attention(name, D, H, **options)
        measured = xla_flops_per_token(layer, state=layer.get_initial_state(B))
        out[name] = (layer.flops_per_token(T, B), measured)
    dense = FeedForward(D, 4 * D)
    out["dense"] = (dense.flops_per_token(T, B), xla_flops_per_token(dense))
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def counts():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install 'jax[cpu]')")
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(MECHANISMS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", [*MECHANISMS, "dense"])
def test_analytic_flops_match_xla_cost_analysis(counts, name):
    """The analytic count covers the matrix products; XLA also counts element-wise work,
    so ours may be a little lower, never higher, and within 20%."""
    ours, xla = counts[name]
    assert 0.8 * xla <= ours <= 1.02 * xla, (name, ours, xla)
