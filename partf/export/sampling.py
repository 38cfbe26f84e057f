"""Drawing the next token inside an exported graph, the settings being tensors.

`partf.generation.sampling` takes its settings as Python values (a `Sampling`), fixed
when the loop is traced; an exported signature takes them as inputs, so one graph
serves every setting. The rule is the same: temperature, then top-k, then top-p over
the renormalised top-k distribution, ties with the last token kept kept too;
temperature 0 is greedy; the padding id is never drawn. Draws are stateless
(`tf.random.stateless_uniform` keyed by the seed and the token's index), so a seed
always gives the same tokens; they are not partf-generate's draws for that seed.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from partf.data.tokenizer import PAD_ID


def filtered_log_probs(log_probs: Any, temperature: Any, top_k: Any, top_p: Any) -> Any:
    """float32 [B, V] log-probabilities (or logits) -> the distribution drawn from,
    normalised, -inf where removed. temperature float32 [] (> 0), top_k int32 []
    (0: no limit), top_p float32 [] in (0, 1]."""
    vocab = tf.shape(log_probs)[-1]
    logits = tf.cast(log_probs, tf.float32) / temperature
    ranked = tf.sort(logits, axis=-1, direction="DESCENDING")  # [B, V]
    k = tf.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    kept = tf.range(vocab)[None, :] < k  # [1, V]: the top k places of the ranking
    ranked = tf.where(kept, ranked, float("-inf"))
    probs = tf.nn.softmax(ranked, axis=-1)
    mass_before = tf.cumsum(probs, axis=-1, exclusive=True)  # mass of strictly better
    in_nucleus = kept & (mass_before < top_p)
    count = tf.maximum(tf.reduce_sum(tf.cast(in_nucleus, tf.int32), axis=-1), 1)  # [B]
    threshold = tf.gather(ranked, count[:, None] - 1, batch_dims=1)  # [B, 1]
    logits = tf.where(logits >= threshold, logits, float("-inf"))
    return logits - tf.reduce_logsumexp(logits, axis=-1, keepdims=True)


def draw_tokens(log_probs: Any, temperature: Any, top_k: Any, top_p: Any, seed: Any) -> Any:
    """int32 [B]: the next token per row; greedy when temperature is 0. `seed` int32 [2]."""
    vocab = tf.shape(log_probs)[-1]
    allowed = tf.not_equal(tf.range(vocab), PAD_ID)[None, :]
    log_probs = tf.where(allowed, tf.cast(log_probs, tf.float32), float("-inf"))

    def greedy() -> Any:
        return tf.cast(tf.argmax(log_probs, axis=-1), tf.int32)

    def sample() -> Any:
        probs = tf.exp(filtered_log_probs(log_probs, temperature, top_k, top_p))
        cdf = tf.cumsum(probs, axis=-1)
        u = tf.random.stateless_uniform((tf.shape(probs)[0], 1), seed) * cdf[:, -1:]
        drawn = tf.reduce_sum(tf.cast(cdf <= u, tf.int32), axis=-1)
        # Rounding could put u at the very top: fall back to the last allowed token.
        last = vocab - 1 - tf.cast(tf.argmax(tf.reverse(probs > 0.0, [-1]), axis=-1), tf.int32)
        return tf.minimum(drawn, last)

    # Greedy decoding skips the sort of the vocabulary that filtering needs.
    return tf.cond(temperature > 0.0, sample, greedy)
