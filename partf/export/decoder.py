"""The exported decoder: a `tf.Module` whose functions carry the model's state.

`Decoder(model, context)` wraps a `PARTransformerXL` in its generation configuration
(one row of memory per stream, `context` tokens of XL memory or softmax cache, each
block running only its chosen candidate) and offers, with the state as named tensors
(`partf.export.state.StateLayout`):

* `prefill(tokens [B, T], **state) -> {"log_probs" [B, V], **new state}`: reads a
  prompt (0 = left padding) or a chunk; `log_probs` are the next-token
  log-probabilities (normalised logits) after its last token;
* `step(tokens [B, 1], **state)`: the same for one token, through each attention's
  one-token path (relative attention's cached memory keys and values);
* `generate_ids(tokens, max_tokens, temperature, top_k, top_p, seed) -> tokens [B, N]`:
  prefill, then a loop of steps and draws in the graph (`partf.export.sampling`);
* `generate(prompt, ...) -> text`: the same from text to text, the tokenizer
  (tensorflow-text's SentencePiece) in the graph; only with a tokenizer.

Example:
    >>> decoder = Decoder(model, context=1024)
    >>> out = decoder.prefill_function()(tokens, **decoder.layout.zeros())
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tensorflow as tf

from partf.data.tokenizer import EOS_ID
from partf.errors import UsageError
from partf.export.sampling import draw_tokens
from partf.export.state import StateLayout
from partf.generation import argmax_choices, reconfigure, stateless_attentions
from partf.models import PARTransformerXL


class ExportError(UsageError):
    """A model or setting that cannot be exported: one line naming problem and fix."""


def memory_attentions(model: PARTransformerXL) -> list[str]:
    """Paths of the attentions whose state is the last `mem_len` tokens (XL memory, a
    softmax cache): what the exported context bounds."""
    return [
        layer.path
        for block in model.blocks
        for _, layer in block.attentions()
        if getattr(layer, "mem_len", 0)
    ]


def generation_model(model: PARTransformerXL, context: int, batch_size: int) -> PARTransformerXL:
    """A copy of `model` for export: `batch_size` rows of state, `context` tokens of
    memory. Raises `ExportError` for a search supernet and an attention with no state."""
    config = model.config
    if config.is_stochastic:
        raise ExportError(
            f"{model.name} is a search supernet (architecture {config.architecture or 'unset'}, "
            "blocks still choosing); train its derived architecture with partf-train "
            "--from_search RUN and export that run"
        )
    if context < 0:
        raise ExportError(f"--context must be >= 0, got {context}")
    model = reconfigure(model, batch_size=batch_size, mem_len=context)
    missing = stateless_attentions(model)
    if missing:
        raise ExportError(
            f"{', '.join(missing)} keep no fixed-size state with --context {context}, so a "
            "step could not see the text before it; pass --context N with N > 0 "
            "(tokens of XL memory or softmax cache)"
        )
    return model


class Decoder(tf.Module):
    """The functions of an export (module docstring) over a generation copy of `model`.

    Args:
        model: a trained PARTransformerXL with a fixed architecture.
        context: tokens of XL memory or softmax cache kept in the state.
        batch_size: rows of the state (streams decoded together).
        sp_model: a SentencePiece .model file for `generate` (None: no text signature).
    """

    def __init__(
        self,
        model: PARTransformerXL,
        context: int,
        batch_size: int = 1,
        sp_model: str | Path | None = None,
    ) -> None:
        super().__init__(name="partf_decoder")
        self.model = generation_model(model, context, batch_size)
        self.batch_size = int(batch_size)
        self.vocab_size = int(self.model.config.vocab_size)
        self.context = int(context)
        # None: no attention keeps only the last `context` tokens (linear sums, windows).
        self.context_limit = self.context if memory_attentions(self.model) else None
        self.layout = StateLayout(self.model, self.batch_size)
        self.choices = argmax_choices(self.model)
        self.tokenizer = None
        if sp_model is not None:
            import tensorflow_text as tf_text

            proto = Path(sp_model).read_bytes()
            self.tokenizer = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)

    # ------------------------------------------------------------- the state
    def state_specs(self) -> list[tf.TensorSpec]:
        return [
            tf.TensorSpec(shape, dtype, name=name)
            for name, (shape, dtype) in self.layout.shapes().items()
        ]

    def token_spec(self, length: int | None) -> tf.TensorSpec:
        return tf.TensorSpec((self.batch_size, length), tf.int32, name="tokens")

    def _forward(self, tokens: Any, flat: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        states = self.layout.nest(flat)
        hidden, states = self.model.forward(tokens, states, training=False, choices=self.choices)
        log_probs = self.model.log_probs(hidden[:, -1, :])  # [B, V]
        return log_probs, self.layout.flatten(states)

    def _check_length(self, tokens: Any) -> list[Any]:
        """An assertion that `tokens` fit the context (none without a limit)."""
        if self.context_limit is None:
            return []
        length = tf.shape(tokens)[1]
        message = (
            f"the prompt is longer than the exported context of {self.context_limit} tokens; "
            "shorten it or export again with partf-export --context N"
        )
        return [tf.debugging.assert_less_equal(length, self.context_limit, message=message)]

    # --------------------------------------------------------- the functions
    def decode_function(self, length: int | None, check: bool = True) -> Any:
        """A tf.function (tokens [B, length], *state) -> {"log_probs", **state}: the
        prefill (length None: any) or the step (length 1). `check`: assert the length
        fits the context (TensorFlow only; LiteRT has no assertions)."""
        names = list(self.layout.shapes())

        def decode(tokens: Any, *state: Any) -> dict[str, Any]:
            checks = self._check_length(tokens) if check else []
            with tf.control_dependencies(checks):
                tokens = tf.identity(tokens)
            log_probs, new = self._forward(tokens, dict(zip(names, state, strict=True)))
            return {"log_probs": log_probs, **new}

        signature = [self.token_spec(length), *self.state_specs()]
        return tf.function(decode, input_signature=signature, autograph=False)

    def generate_ids_function(self) -> Any:
        """A tf.function: prompt ids [B, T] and the sampling settings -> new ids [B, N]."""
        names = list(self.layout.shapes())
        zeros = self.layout.zeros()

        def generate_ids(tokens, max_tokens, temperature, top_k, top_p, seed):
            with tf.control_dependencies(self._check_length(tokens)):
                tokens = tf.identity(tokens)
            state = {name: tf.constant(zeros[name]) for name in names}
            log_probs, state = self._forward(tokens, state)
            out = tf.TensorArray(tf.int32, size=max_tokens)

            def body(n, log_probs, state, out):
                key = tf.stack([seed, n])
                token = draw_tokens(log_probs, temperature, top_k, top_p, key)
                out = out.write(n, token)
                log_probs, state = self._forward(token[:, None], state)
                return n + 1, log_probs, state, out

            _, _, _, out = tf.while_loop(
                lambda n, *_: n < max_tokens, body, (tf.constant(0), log_probs, state, out)
            )
            ids = tf.transpose(out.stack())  # [B, N]
            return {"tokens": tf.reshape(ids, (self.batch_size, -1))}

        signature = [
            self.token_spec(None),
            tf.TensorSpec((), tf.int32, name="max_tokens"),
            tf.TensorSpec((), tf.float32, name="temperature"),
            tf.TensorSpec((), tf.int32, name="top_k"),
            tf.TensorSpec((), tf.float32, name="top_p"),
            tf.TensorSpec((), tf.int32, name="seed"),
        ]
        return tf.function(generate_ids, input_signature=signature, autograph=False)

    def generate_text_function(self, generate_ids: Any) -> Any:
        """A tf.function: prompt text [] and the sampling settings -> the continuation's
        text [] and ids [N]; the prompt starts with an end-of-line, as partf-generate's."""
        if self.tokenizer is None:
            raise ExportError("the text signature needs the run's tokenizer; pass --sp_model")
        tokenizer = self.tokenizer

        def generate(prompt, max_tokens, temperature, top_k, top_p, seed):
            ids = tokenizer.tokenize(prompt)  # [T]
            tokens = tf.concat([[EOS_ID], ids], axis=0)[None, :]
            new = generate_ids(tokens, max_tokens, temperature, top_k, top_p, seed)["tokens"][0]
            # Each end-of-line token becomes a line break: detokenize the lines apart.
            is_eos = tf.equal(new, EOS_ID)
            line = tf.cumsum(tf.cast(is_eos, tf.int32))
            pieces = tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(new, ~is_eos),
                tf.boolean_mask(line, ~is_eos),
                nrows=tf.reduce_sum(tf.cast(is_eos, tf.int32)) + 1,
            )
            lines = tokenizer.detokenize(pieces)
            return {"text": tf.strings.reduce_join(lines, separator="\n"), "tokens": new}

        signature = [
            tf.TensorSpec((), tf.string, name="prompt"),
            tf.TensorSpec((), tf.int32, name="max_tokens"),
            tf.TensorSpec((), tf.float32, name="temperature"),
            tf.TensorSpec((), tf.int32, name="top_k"),
            tf.TensorSpec((), tf.float32, name="top_p"),
            tf.TensorSpec((), tf.int32, name="seed"),
        ]
        return tf.function(generate, input_signature=signature, autograph=False)
