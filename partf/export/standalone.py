"""Decoding an export where partf is not installed: this file imports no partf module.

`partf-export` copies it into every export folder as `decode.py`; it needs numpy and
TensorFlow for a SavedModel (tensorflow-text too for the text signature), or numpy
and the LiteRT runtime (ai-edge-litert) for a `model.tflite`.

    python DIR/decode.py DIR --ids 2,17,42 --max_tokens 20          # greedy ids, JSON
    python DIR/decode.py DIR --prompt "the game" --max_tokens 20    # text (SavedModel)

Example:
    >>> decoder = open_export("exported/base")
    >>> tokens, log_probs = greedy(decoder, [2, 17, 42], max_tokens=10)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

PAD_ID = 0


class ExportedDecoder:
    """prefill and step over an export folder, the state a dict of numpy arrays."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.description = json.loads((self.folder / "export.json").read_text("utf-8"))
        self.format = self.description["export_format"]
        self.context = self.description["context"]
        if self.format == "litert":
            from ai_edge_litert.interpreter import Interpreter

            self.interpreter = Interpreter(model_path=str(self.folder / "model.tflite"))
            self._prefill = self.interpreter.get_signature_runner("prefill")
            self._step = self.interpreter.get_signature_runner("step")
            self.chunk = int(self.description["litert_chunk"])
        else:
            import tensorflow as tf

            if "generate" in self.description["signatures"]:
                import tensorflow_text  # noqa: F401  (the text signature's SentencePiece ops)

            self.loaded = tf.saved_model.load(str(self.folder))
            self._prefill = self.loaded.signatures["prefill"]
            self._step = self.loaded.signatures["step"]

    def zeros(self) -> dict[str, np.ndarray]:
        """The empty state."""
        state = self.description["state"]
        return {name: np.zeros(s["shape"], s["dtype"]) for name, s in state.items()}

    def _call(self, function: Any, tokens: np.ndarray, state: dict[str, Any]):
        out = dict(function(tokens=np.asarray(tokens, np.int32), **state))
        log_probs = np.asarray(out.pop("log_probs"))
        # A SavedModel's state stays in TensorFlow tensors from call to call (no copies);
        # `np.asarray` reads any of them.
        return log_probs, out

    def prefill(self, tokens: Any, state: dict[str, np.ndarray]):
        """tokens int [B, T] -> (log-probs [B, V] after the last, new state). LiteRT reads
        fixed chunks: the first left-padded with 0, as partf reads a left-padded prompt."""
        tokens = np.asarray(tokens, np.int32)
        if self.context is not None and tokens.shape[1] > self.context:
            raise ValueError(
                f"the prompt has {tokens.shape[1]} tokens, longer than the exported context "
                f"of {self.context}; shorten it or export again with partf-export --context N"
            )
        if self.format != "litert":
            return self._call(self._prefill, tokens, state)
        pad = -tokens.shape[1] % self.chunk
        tokens = np.pad(tokens, [(0, 0), (pad, 0)], constant_values=PAD_ID)
        for start in range(0, tokens.shape[1], self.chunk):
            log_probs, state = self._call(
                self._prefill, tokens[:, start : start + self.chunk], state
            )
        return log_probs, state

    def step(self, tokens: Any, state: dict[str, np.ndarray]):
        """One token per row, int [B] -> (log-probs [B, V], new state)."""
        return self._call(self._step, np.asarray(tokens, np.int32).reshape(-1, 1), state)


def open_export(folder: str | Path) -> ExportedDecoder:
    return ExportedDecoder(folder)


def greedy(decoder: ExportedDecoder, prompt: Any, max_tokens: int):
    """Greedy continuation of `prompt` (ids [T] or [B, T]): (ids int32 [B, N], the
    log-probs float32 [B, N, V] each was picked from). The padding id is never picked."""
    prompt = np.atleast_2d(np.asarray(prompt, np.int32))
    log_probs, state = decoder.prefill(prompt, decoder.zeros())
    tokens, history = [], []
    for n in range(max_tokens):
        history.append(log_probs)
        allowed = np.where(np.arange(log_probs.shape[-1]) == PAD_ID, -np.inf, log_probs)
        token = np.argmax(allowed, axis=-1).astype(np.int32)
        tokens.append(token)
        if n + 1 < max_tokens:
            log_probs, state = decoder.step(token, state)
    return np.stack(tokens, axis=1), np.stack(history, axis=1)


def generate_text(
    folder: str | Path,
    prompt: str,
    max_tokens: int,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
) -> str:
    """The SavedModel's text signature: one call from text to text."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    loaded = tf.saved_model.load(str(folder))
    out = loaded.signatures["generate"](
        prompt=tf.constant(prompt),
        max_tokens=tf.constant(max_tokens, tf.int32),
        temperature=tf.constant(temperature, tf.float32),
        top_k=tf.constant(top_k, tf.int32),
        top_p=tf.constant(top_p, tf.float32),
        seed=tf.constant(seed, tf.int32),
    )
    return out["text"].numpy().decode("utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Decode with a partf export (no partf needed).")
    parser.add_argument("folder")
    parser.add_argument("--ids", help="prompt token ids, comma-separated (greedy; prints JSON)")
    parser.add_argument("--prompt", help="prompt text (SavedModel's text signature)")
    parser.add_argument("--max_tokens", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top_k", type=int, default=0)
    parser.add_argument("--top_p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log_probs", help="write the greedy log-probs to this .npy file")
    args = parser.parse_args(argv)
    if args.ids is not None:
        ids = [int(i) for i in args.ids.split(",")]
        tokens, log_probs = greedy(open_export(args.folder), ids, args.max_tokens)
        if args.log_probs:
            np.save(args.log_probs, log_probs)
        print(json.dumps({"tokens": tokens.tolist()}))
        return 0
    text = generate_text(
        args.folder,
        args.prompt or "",
        args.max_tokens,
        args.temperature,
        args.top_k,
        args.top_p,
        args.seed,
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
