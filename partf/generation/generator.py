"""The Generator: carried-state decoding, the recompute baseline, one compiled loop.

* "carried" (the default): the prompt goes through `model.forward` once, then each new
  token is fed alone with the state the previous call returned, so a token costs the
  same however long the text.
* "recompute": each step feeds the last `context_len` tokens, left-padded, from an empty
  state: the slow, obviously-correct reference of the tests and benchmarks. With
  `mem_len` >= the text's length (or an exact linear attention) the two agree up to
  rounding.

Draws come from a `keras.random.SeedGenerator` reset to the seed at each `generate`, so a
seed always gives the same text. Decoding runs as one compiled loop over all new tokens;
in carried mode a step skips work that cannot change its result (docs/generation.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from partf.data.tokenizer import PAD_ID
from partf.generation.model_helpers import (
    argmax_choices,
    stateless_attentions,
    with_inference_caches,
)
from partf.generation.sampling import Sampling, sample_tokens
from partf.models.par_transformer_xl import PARTransformerXL

MODES = ("carried", "recompute")


def _compile(fn: Callable, compiled: bool, jit_compile: bool, model: Any = None) -> Callable:
    """One compiled function: on TensorFlow a graph (XLA when jit_compile); on JAX
    `jax.jit` with `model`'s variables passed in as arguments (read through a
    `keras.StatelessScope`, so a compiled loop sees the weights of each call rather
    than those it was traced with); eager when not `compiled` or on other backends."""
    if not compiled:
        return fn
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, jit_compile=jit_compile, reduce_retracing=True)
    if backend != "jax" or model is None:
        return fn
    import jax

    variables = list(model.variables)

    def stateless(values: list[Any], *args: Any) -> Any:
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
            return fn(*args)

    jitted = jax.jit(stateless)
    return lambda *args: jitted([variable.value for variable in variables], *args)


@dataclasses.dataclass
class GenerationResult:
    """The generated ids int32 [B, N] (prompt not included) and, when asked for, the
    model's unfiltered log-probabilities float32 [B, N, V] each was drawn from."""

    tokens: np.ndarray
    log_probs: np.ndarray | None = None


class Generator:
    """Generates tokens from a `PARTransformerXL` (in evaluation mode), carrying state
    or recomputing (module docstring). `context_len`: the recompute window; `compiled`
    False runs eagerly, op by op (for debugging); `jit_compile`: XLA; `seed`: the
    default seed of `generate`."""

    def __init__(
        self,
        model: PARTransformerXL,
        mode: str = "carried",
        context_len: int = 512,
        compiled: bool = True,
        jit_compile: bool = False,
        seed: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}.")
        if context_len < 1:
            raise ValueError(f"context_len must be >= 1, got {context_len}.")
        if mode == "carried":
            missing = stateless_attentions(model)
            if missing:
                raise ValueError(
                    f"carried-state generation needs attentions that carry context, but "
                    f"{', '.join(missing)} keep no state (mem_len=0?); use mode='recompute' "
                    "or reconfigure(model, mem_len=N) with N > 0."
                )
        self.model = model
        self.mode = mode
        self.context_len = int(context_len)
        self.compiled = bool(compiled)
        self.jit_compile = bool(jit_compile)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(0 if seed is None else seed)
        self._loops: dict[tuple, Callable] = {}
        self._windows: dict[tuple, Callable] = {}
        # Candidates that argmax evaluation weights pick, read again at each start.
        self._choices = argmax_choices(model)

    # ---------------------------------------------------- next distributions
    def _last_log_probs(self, tokens: Any, states: Any) -> tuple[Any, Any]:
        hidden, states = self.model.forward(tokens, states, choices=self._choices)
        return self.model.log_probs(hidden[:, -1, :]), states  # [B, V]

    def _window_log_probs(self, window: Any) -> Any:
        key = self._choices
        if key not in self._windows:
            self._windows[key] = _compile(
                self._last_log_probs_of_window, self.compiled, self.jit_compile
            )
        return self._windows[key](window)

    def _last_log_probs_of_window(self, window: Any) -> Any:
        batch = ops.shape(window)[0]
        log_probs, _ = self._last_log_probs(window, self.model.initial_state(batch))
        return log_probs

    def start(self, prompt: Any) -> tuple[Any, Any]:
        """Reads the prompt int [B, T] (0 = left padding): (next-token log-probs
        float32 [B, V], state: the model's states, or the token window [B, C])."""
        prompt = _as_prompt(prompt)
        self._choices = argmax_choices(self.model)
        if self.mode == "recompute":  # the last context_len tokens, left-padded with 0
            window = ops.convert_to_tensor(prompt[:, -self.context_len :], "int32")
            window = ops.pad(window, [[0, 0], [self.context_len - window.shape[1], 0]])
            return self._window_log_probs(window), window
        states = self.model.initial_state(prompt.shape[0])
        log_probs, states = self._last_log_probs(prompt, states)
        return log_probs, with_inference_caches(self.model, states)

    def advance(self, token: Any, state: Any) -> tuple[Any, Any]:
        """Feeds one token per row: int [B] -> (log-probs [B, V], new state)."""
        token = ops.reshape(ops.cast(token, "int32"), (-1,))
        return self._feed(token, state, self._window_log_probs)

    def _feed(self, token: Any, state: Any, score_window: Callable | None = None) -> Any:
        """token int32 [B] -> (next log-probs, next state), in this generator's mode;
        `score_window` scores a recompute window (default: uncompiled, for inside the
        compiled loop)."""
        if self.mode == "recompute":
            window = ops.concatenate([state[:, 1:], token[:, None]], axis=1)  # [B, C]
            return (score_window or self._last_log_probs_of_window)(window), window
        return self._last_log_probs(token[:, None], state)

    def decode(
        self,
        log_probs: Any,
        state: Any,
        max_tokens: int,
        sampling: Sampling,
        return_log_probs: bool = False,
    ) -> tuple[Any, Any]:
        """Draws `max_tokens` >= 1 tokens after `start(prompt)`, feeding each back but
        the last, as one compiled loop: (tokens int32 [B, max_tokens], log-probs float32
        [B, max_tokens, V] or None)."""
        key = (sampling, self._choices, int(max_tokens), bool(return_log_probs))
        # JAX traces the loop's body once, and a traced body cannot advance the seed
        # generator (an assignment): there each token's draw gets its own key, all drawn
        # here, eagerly, from the generator. TensorFlow's graph advances it as it goes.
        keys = None
        if keras.backend.backend() == "jax":
            keys = keras.random.randint(
                (max_tokens, 2), 0, 2**31 - 1, seed=self.seed_generator, dtype="int32"
            )
        if key not in self._loops:

            def loop(log_probs: Any, state: Any, keys: Any) -> tuple[Any, Any]:
                batch, vocab = ops.shape(log_probs)[0], ops.shape(log_probs)[1]
                tokens = ops.zeros((batch, max_tokens), "int32")
                history = ops.zeros((batch, max_tokens if return_log_probs else 0, vocab))

                def draw(n: Any, log_probs: Any, tokens: Any, history: Any) -> tuple:
                    """Token n, drawn and recorded (with its log-probs when asked for)."""
                    seed = None if keys is None else ops.cast(keys[n], "uint32")
                    token = self._draw(log_probs, sampling, seed)
                    tokens = ops.slice_update(tokens, [0, n], token[:, None])
                    if return_log_probs:
                        update = ops.cast(log_probs, "float32")[:, None, :]
                        history = ops.slice_update(history, [0, n, 0], update)
                    return token, tokens, history

                def body(n, carry):
                    log_probs, state, tokens, history = carry
                    token, tokens, history = draw(n, log_probs, tokens, history)
                    log_probs, state = self._feed(token, state)
                    return log_probs, state, tokens, history

                carry = (log_probs, state, tokens, history)
                if max_tokens > 1:
                    carry = ops.fori_loop(0, max_tokens - 1, body, carry)
                # The last token is drawn but not fed: nothing would read the result.
                log_probs, _, tokens, history = carry
                _, tokens, history = draw(max_tokens - 1, log_probs, tokens, history)
                return tokens, history

            self._loops[key] = _compile(loop, self.compiled, self.jit_compile, self.model)
        tokens, history = self._loops[key](log_probs, state, keys)
        return tokens, (history if return_log_probs else None)

    def _draw(self, log_probs: Any, sampling: Sampling, seed: Any = None) -> Any:
        """A token per row; `seed`: a JAX key for this draw, else the seed generator."""
        # Padding can never be a real next token: fed back it would be masked out.
        allowed = ops.not_equal(ops.arange(ops.shape(log_probs)[-1]), PAD_ID)
        log_probs = ops.where(allowed[None, :], log_probs, -np.inf)
        return sample_tokens(log_probs, sampling, self.seed_generator if seed is None else seed)

    # -------------------------------------------------------------- generate
    def generate(
        self,
        prompt: Any,
        max_tokens: int,
        sampling: Sampling | None = None,
        seed: int | None = None,
        return_log_probs: bool = False,
    ) -> GenerationResult:
        """Continues each prompt (int [B, T], 0 = left padding, or a list of ids) by
        `max_tokens` >= 0 tokens. `sampling` defaults to temperature 1; `seed` to the
        generator's, else a fresh random one."""
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}.")
        sampling = sampling or Sampling()
        seed = self.seed if seed is None else seed
        if seed is None:
            seed = int(np.random.default_rng().integers(2**31 - 1))
        self.seed_generator.state.assign(
            ops.convert_to_tensor([seed, 0], self.seed_generator.state.dtype)
        )
        prompt = _as_prompt(prompt)
        batch = prompt.shape[0]
        # Learned positions past their table would give NaN inside the compiled loop.
        longest = prompt.shape[1] + max_tokens if self.mode == "carried" else self.context_len
        self.model.check_positions(longest)
        if max_tokens == 0:
            vocab = self.model.config.vocab_size
            return GenerationResult(
                np.zeros((batch, 0), np.int32),
                np.zeros((batch, 0, vocab), np.float32) if return_log_probs else None,
            )
        log_probs, state = self.start(prompt)
        tokens, history = self.decode(log_probs, state, max_tokens, sampling, return_log_probs)
        return GenerationResult(
            np.asarray(ops.convert_to_numpy(tokens), np.int32),
            None if history is None else np.asarray(ops.convert_to_numpy(history), np.float32),
        )

    def score(self, tokens: Any) -> np.ndarray:
        """Teacher forcing in this generator's mode: float32 [B, T, V], entry t the
        next-token log-probabilities after tokens[:, :t + 1]."""
        tokens = _as_prompt(tokens)
        log_probs, state = self.start(tokens[:, :1])
        history = [ops.convert_to_numpy(log_probs)]
        for t in range(1, tokens.shape[1]):
            log_probs, state = self.advance(tokens[:, t], state)
            history.append(ops.convert_to_numpy(log_probs))
        return np.stack(history, axis=1)


def _as_prompt(prompt: Any) -> Any:
    """int32 [B, T] from a tensor, an array, a list of ids or a list of equal-length lists."""
    if isinstance(prompt, Sequence) and prompt and not isinstance(prompt[0], Sequence):
        prompt = [prompt]
    prompt = np.asarray(ops.convert_to_numpy(prompt) if not isinstance(prompt, list) else prompt)
    if prompt.ndim != 2 or prompt.shape[1] < 1:
        raise ValueError(
            f"prompt must be token ids [batch, length] with length >= 1, got shape "
            f"{prompt.shape}; start an empty prompt with the eos id (2)."
        )
    if not np.issubdtype(prompt.dtype, np.integer):
        raise ValueError(f"prompt must hold integer token ids, got dtype {prompt.dtype}.")
    return prompt.astype(np.int32)


def generate(
    model: PARTransformerXL,
    prompt: Any,
    max_tokens: int,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    mode: str = "carried",
    context_len: int = 512,
    compiled: bool = True,
    jit_compile: bool = False,
    return_log_probs: bool = False,
) -> GenerationResult:
    """One-call form of `Generator(...).generate(...)`; see those for the arguments."""
    generator = Generator(
        model, mode=mode, context_len=context_len, compiled=compiled, jit_compile=jit_compile
    )
    sampling = Sampling(temperature, top_k, top_p)
    return generator.generate(prompt, max_tokens, sampling, seed, return_log_probs)
