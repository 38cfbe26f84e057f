"""Generation: carried state equals recomputation, greedy and seeded decoding, padding,
refused arguments, and the compiled loop on JAX."""

from __future__ import annotations

import importlib.util

import keras
import numpy as np
import pytest
from keras import ops

from partf.generation import Generator, Sampling, generate, reconfigure
from partf.models import PARTransformerXL
from tests.generation.helpers import TINY, VOCAB, full_pass_log_probs, with_random_arch
from tests.test_jax_backend import run_on_jax


@pytest.fixture(scope="module")
def linear_model() -> PARTransformerXL:
    keras.utils.set_random_seed(12)
    return with_random_arch(
        PARTransformerXL(TINY, attention="linear", mem_len=0, attention_options={"chunk_size": 4})
    )


#: Every other mechanism that carries state, with a state that covers the whole text
#: here (memory, window and chunk summaries longer than it), so that carrying it is
#: exact.
STATEFUL = {
    "softmax": {"mem_len": 16},
    "local": {"window_size": 16},
    "performer": {"num_features": 16, "chunk_size": 4},
    "fastformer": {"chunk_size": 4},
    "norm": {"chunk_size": 4},
    "diag": {"window_size": 4},
    "primal": {"low_rank": 3},
    "eva": {"window_size": 4, "chunk_size": 2, "mem_chunks": 8},
}


@pytest.fixture(scope="module", params=["relative", "linear", *STATEFUL])
def model(request, relative_model, linear_model) -> PARTransformerXL:
    name = request.param
    if name in ("relative", "linear"):
        return {"relative": relative_model, "linear": linear_model}[name]
    keras.utils.set_random_seed(13)
    options = dict(STATEFUL[name])
    mem_len = options.pop("mem_len", 0)
    return with_random_arch(
        PARTransformerXL(TINY, attention=name, mem_len=mem_len, attention_options=options)
    )


# ---------------------------------------------------------------- equivalence
# Recompute mode left-pads its context, and uneven prompts are left-padded: every
# mechanism must read a left-padded row as the unpadded one, those whose windows sit at
# fixed stream positions (diag, eva) included.
def test_carried_state_equals_full_context(model, tokens):
    reference = full_pass_log_probs(model, tokens)
    carried = Generator(model, mode="carried", compiled=False).score(tokens)
    np.testing.assert_allclose(carried, reference, rtol=1e-4, atol=1e-4)
    # Not trivially equal: the distribution depends on the earlier tokens.
    assert np.abs(reference[:, 1:] - reference[:, :1]).max() > 1e-3


def test_recompute_equals_full_context(model, tokens):
    reference = full_pass_log_probs(model, tokens)
    recompute = Generator(model, mode="recompute", context_len=16, compiled=False).score(tokens)
    np.testing.assert_allclose(recompute, reference, rtol=1e-4, atol=1e-4)


def test_sampled_generation_is_that_of_the_full_pass(model, tokens):
    sampling = Sampling(temperature=0.9, top_k=15, top_p=0.95)
    carried = Generator(model, "carried", compiled=False).generate(
        tokens[:, :4], 5, sampling, seed=3, return_log_probs=True
    )
    # The reported distributions are those of the generated text.
    text = np.concatenate([tokens[:, :4], carried.tokens], axis=1)
    reference = full_pass_log_probs(model, text)[:, 3:-1]
    np.testing.assert_allclose(carried.log_probs, reference, rtol=1e-4, atol=1e-4)


def test_sampled_generation_matches_between_modes(model, tokens):
    sampling = Sampling(temperature=0.9, top_k=15, top_p=0.95)
    carried = Generator(model, "carried", compiled=False).generate(
        tokens[:, :4], 5, sampling, seed=3, return_log_probs=True
    )
    recompute = Generator(model, "recompute", context_len=16, compiled=False).generate(
        tokens[:, :4], 5, sampling, seed=3, return_log_probs=True
    )
    np.testing.assert_allclose(carried.log_probs, recompute.log_probs, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(carried.tokens, recompute.tokens)


def test_short_memory_is_not_full_context(relative_model, tokens):
    # With mem_len below the text length the carried state forgets: the
    # equivalence above is a property of a long enough memory, not a tautology.
    short = reconfigure(relative_model, mem_len=4)
    carried = Generator(short, compiled=False).score(tokens)
    reference = full_pass_log_probs(relative_model, tokens)
    np.testing.assert_allclose(carried[:, :5], reference[:, :5], rtol=1e-4, atol=1e-4)
    assert np.abs(carried[:, 6:] - reference[:, 6:]).max() > 1e-3


@pytest.mark.parametrize("mode", ["carried", "recompute"])
def test_left_padded_batch_equals_single_prompts(model, tokens, mode):
    long, short = tokens[0, :7], tokens[1, :4]
    batch = np.stack([long, np.concatenate([np.zeros(3, "int32"), short])])
    sampling = Sampling(temperature=0.0)
    # The one-call form, as a user would batch uneven prompts.
    both = generate(
        model, batch, 3, 0.0, mode=mode, context_len=16, compiled=False, return_log_probs=True
    )
    for row, prompt in enumerate((long, short)):
        alone = Generator(model, mode, context_len=16, compiled=False).generate(
            prompt[None], 3, sampling, return_log_probs=True
        )
        np.testing.assert_array_equal(both.tokens[row], alone.tokens[0])
        np.testing.assert_allclose(both.log_probs[row], alone.log_probs[0], atol=1e-4)


# -------------------------------------------------------------------- greedy
def check_greedy(model, prompt, sampling):
    carried = Generator(model, "carried", compiled=False)
    first = carried.generate(prompt, 4, sampling, seed=1, return_log_probs=True)
    other = Generator(model, "recompute", context_len=16, compiled=False).generate(
        prompt, 4, sampling, seed=3
    )
    # Different seeds (and modes), the same tokens.
    np.testing.assert_array_equal(first.tokens, other.tokens)
    # Each token is the most likely one (never padding, which is not a token).
    masked = first.log_probs.copy()
    masked[..., 0] = -np.inf
    np.testing.assert_array_equal(first.tokens, masked.argmax(-1))


def test_greedy_is_deterministic_and_mode_independent(model, tokens):
    check_greedy(model, tokens[:, :5], Sampling(temperature=0.0))


def test_top_k_one_is_greedy(relative_model, tokens):
    check_greedy(relative_model, tokens[:, :5], Sampling(temperature=1.3, top_k=1))


def test_padding_is_never_drawn(relative_model):
    generator = Generator(relative_model, compiled=False)
    log_probs, state = generator.start([[2, 5, 7]])
    favour_pad = np.full((1, VOCAB), -20.0, "float32")
    favour_pad[0, 0], favour_pad[0, 9] = 0.0, -1.0
    for sampling in (Sampling(temperature=0.0), Sampling(temperature=1.0)):
        tokens, _ = generator.decode(favour_pad, state, 1, sampling)
        assert int(ops.convert_to_numpy(tokens)[0, 0]) == 9


def test_same_seed_same_text(relative_model, tokens):
    sampling = Sampling(temperature=1.0, top_p=0.95)
    compiled = Generator(relative_model, compiled=True)
    first = compiled.generate(tokens[:, :3], 6, sampling, seed=42, return_log_probs=True)
    other = compiled.generate(tokens[:, :3], 6, sampling, seed=43).tokens
    # The seed is reset at every call: the generator keeps no hidden draw position.
    again = compiled.generate(tokens[:, :3], 6, sampling, seed=42).tokens
    # A fresh generator running eagerly op by op draws the same tokens.
    eager = Generator(relative_model, compiled=False).generate(
        tokens[:, :3], 6, sampling, seed=42, return_log_probs=True
    )
    np.testing.assert_array_equal(first.tokens, again)
    np.testing.assert_array_equal(first.tokens, eager.tokens)
    np.testing.assert_allclose(first.log_probs, eager.log_probs, rtol=1e-4, atol=1e-5)
    assert not np.array_equal(first.tokens, other)


def test_bad_generator_arguments(relative_model):
    with pytest.raises(ValueError, match="mode"):
        Generator(relative_model, mode="cached")
    with pytest.raises(ValueError, match="max_tokens"):
        Generator(relative_model, compiled=False).generate([[2, 3]], -1)
    with pytest.raises(ValueError, match="prompt"):
        Generator(relative_model, compiled=False).generate(np.zeros((1, 0), "int32"), 3)
    with pytest.raises(ValueError, match="recompute"):
        Generator(reconfigure(relative_model, mem_len=0), mode="carried")


# ------------------------------------------------------- the fast carried path
def test_argmax_blocks_and_attention_cache_equal_the_full_forward(tokens):
    # Carried decoding runs only each block's argmax candidate and reuses the relative
    # attention's projected memory: the distributions must stay those of the plain,
    # uncached full pass, through a compiled (graph) loop and with every candidate kind.
    keras.utils.set_random_seed(13)
    model = PARTransformerXL(
        {**TINY, "num_layers": 4, "eval_mode": "argmax"}, attention="relative", mem_len=16
    )
    for var, choice in zip(model.arch_variables, (0, 1, 2, 0), strict=True):  # A D I A
        logits = np.full((3,), -1.0, "float32")
        logits[choice] = 1.0
        var.assign(logits)
    assert model.architecture_string() == "A D I A"
    generator = Generator(model, "carried")  # compiled
    result = generator.generate(tokens[:, :4], 6, Sampling(0.8), seed=2, return_log_probs=True)
    text = np.concatenate([tokens[:, :4], result.tokens], axis=1)
    reference = full_pass_log_probs(model, text)[:, 3:-1]
    np.testing.assert_allclose(result.log_probs, reference, rtol=1e-4, atol=1e-4)
    # The state carries the cache (keys of the memory rows) only for the chosen
    # attentions, and skipped candidates' states are left as they were.
    _, state = generator.start(tokens[:, :4])
    assert "keys" in state[0][0] and "keys" in state[3][0]
    assert not np.any(ops.convert_to_numpy(state[1][0]["memory_mask"]))


def test_learned_positions_past_their_table_are_refused_before_decoding():
    """Inside the compiled loop a position past the table would give NaN: the generator
    checks the longest stream it will read first."""
    model = PARTransformerXL(
        vocab_size=40,
        d_model=16,
        num_heads=2,
        d_ffn=32,
        num_layers=1,
        mem_len=4,
        cutoffs=(),
        batch_size=1,
        attention="softmax",
        architecture="A",
        position="learned",
        max_positions=12,
    )
    generator = Generator(model)
    assert generator.generate([[2, 5, 7]], 9, seed=0).tokens.shape == (1, 9)  # 12 tokens
    with pytest.raises(ValueError, match="learned positions number 12 tokens"):
        generator.generate([[2, 5, 7]], 10, seed=0)


JAX_GENERATION_SCRIPT = """
import json, sys
import keras, numpy as np
from partf.generation.generator import Generator
from partf.generation.sampling import Sampling
from partf.models.par_transformer_xl import PARTransformerXL

keras.utils.set_random_seed(0)
model = PARTransformerXL(vocab_size=100, d_model=16, num_heads=2, d_ffn=32, num_layers=2,
                         mem_len=64, cutoffs=(20,), batch_size=1)
prompt = [[2, 17, 42, 5]]
result = {"backend": keras.backend.backend()}
for name, sampling in [("greedy", Sampling(temperature=0.0)), ("top_k", Sampling(top_k=20))]:
    compiled = Generator(model, compiled=True).generate(prompt, 12, sampling, seed=3).tokens
    eager = Generator(model, compiled=False).generate(prompt, 12, sampling, seed=3).tokens
    again = Generator(model, compiled=True).generate(prompt, 12, sampling, seed=3).tokens
    other = Generator(model, compiled=True).generate(prompt, 12, sampling, seed=4).tokens
    result[name] = [compiled.tolist(), eager.tolist(), again.tolist(), other.tolist()]
generator = Generator(model, compiled=True)
before = generator.generate(prompt, 12, Sampling(temperature=0.0), seed=0).tokens
kernel = model.trainable_variables[0]
kernel.assign(kernel.value * 3.0)
after = generator.generate(prompt, 12, Sampling(temperature=0.0), seed=0).tokens
fresh = Generator(model, compiled=False).generate(prompt, 12, Sampling(temperature=0.0), seed=0)
result["weights"] = [before.tolist(), after.tolist(), fresh.tokens.tolist()]
json.dump(result, open(sys.argv[1], "w"))
"""


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_jax_decoding_compiles_to_the_eager_tokens(tmp_path):
    """On JAX the decoding loop runs under jax.jit with per-token keys: it draws the tokens
    the eager loop draws for the same seed, a seed repeats its text and another changes it,
    and a compiled loop reads the weights of each call, not those it was traced with."""
    result = run_on_jax(JAX_GENERATION_SCRIPT, tmp_path, name="generate")
    assert result["backend"] == "jax"
    for name in ("greedy", "top_k"):
        compiled, eager, again, _ = result[name]
        assert compiled == eager == again, name
    assert result["top_k"][0] != result["top_k"][3]  # another seed, other draws
    before, after, fresh = result["weights"]
    assert after == fresh and after != before
