"""`JaxEvaluator`, the evaluator of the JAX backend, in a fresh JAX process (the backend
is fixed when Keras is imported): it scores plain numpy (inputs, targets) batches to the
figures of a batch-by-batch loop over the model's evaluation memory, and a pass in chunks
(the states carried from scan to scan, progress reported between them) to the one-pass
sums exactly. Skipped when jax is not installed."""

from __future__ import annotations

import importlib.util
import textwrap

import numpy as np
import pytest

from tests.jax_process import run_on_jax

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("jax") is None, reason="jax is not installed"
)

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import keras
    import numpy as np
    import partf.training.evaluation.perplexity as perplexity
    from partf.models.par_transformer_xl import PARTransformerXL
    from partf.training.evaluation.jax_evaluator import JaxEvaluator

    B, L, V = 4, 8, 60
    data = np.random.default_rng(0).integers(1, V, size=(5, B, L + 1)).astype("int32")
    pairs = list(zip(data[:, :, :-1], data[:, :, 1:]))
    keras.utils.set_random_seed(0)
    model = PARTransformerXL(vocab_size=V, d_model=16, num_heads=2, d_ffn=32, num_layers=2,
                             mem_len=8, cutoffs=(20,), batch_size=B, architecture="A D")
    model(data[0, :, :-1], training=False)
    stats = JaxEvaluator(model).evaluate(pairs)
    # The plain reference: one eager call per batch, the memory in the model's variables.
    model.reset_state("eval")
    loop_nll = 0.0
    for inputs, targets in pairs:
        hidden = model(inputs, training=False)
        loop_nll += float(keras.ops.sum(model.token_nll(hidden, targets)))
    model.reset_state("eval")
    # In chunks of 2 batches (the last padded), reporting progress between them.
    perplexity.CHUNK, done = 2, []
    chunked = JaxEvaluator(model).evaluate(pairs, progress=done.append)
    json.dump({"backend": keras.backend.backend(), "nll": stats.total_nll,
               "tokens": stats.num_tokens, "loop_nll": loop_nll,
               "chunked_equal": chunked == stats, "done": done}, open(sys.argv[1], "w"))
    """
)


@pytest.mark.slow  # a JAX process: about 15 s (these checks ran in test_jax_backend.py's)
def test_numpy_batches_score_like_the_loop_one_pass_or_in_chunks(tmp_path):
    result = run_on_jax(SCRIPT, tmp_path, name="jax_evaluator")
    assert result["backend"] == "jax" and result["tokens"] == 5 * 4 * 8
    np.testing.assert_allclose(result["nll"], result["loop_nll"], rtol=1e-5)
    assert result["chunked_equal"] and result["done"] == [2, 4, 5]
