"""Small synthetic corpora for the data tests: WikiText-like lines, quick to tokenize."""

from __future__ import annotations

import random
from pathlib import Path

_WORDS = (
    "the of and in to a was is for on as with by he that at from his it an were are which "
    "this also be or has had first one their its new after who they two her she been other "
    "when there all during into school time may years more most only over city some world "
    "would where later up such used many can state about national out known university "
    "united then made Valkyria Chronicles game battle series team Gallia war music album "
    "song released 1998 2010 Homarus gammarus lobster Europe species"
)
_WORDS = tuple(_WORDS.split())


def _made_up_words(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    syllables = ("ka", "lo", "mi", "ne", "su", "ra", "ti", "vo", "de", "pa", "gu", "fe", "zo")
    return ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(count)]


# Made-up words widen the vocabulary the text supports to a few hundred pieces.
_WORDS = _WORDS + tuple(_made_up_words(400, seed=7))


def wiki_lines(num_lines: int, seed: int = 0) -> list[str]:
    """Lines shaped like WikiText: headings, paragraphs, blank lines, @-@ and @,@ joins."""
    rng = random.Random(seed)
    lines = []
    for i in range(num_lines):
        kind = i % 7
        if kind in (0, 2):
            lines.append(" ")  # WikiText's blank lines hold one space
        elif kind == 1:
            lines.append(f" = {rng.choice(_WORDS).capitalize()} {rng.choice(_WORDS)} = ")
        else:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 40))]
            if rng.random() < 0.5:
                words.insert(rng.randint(0, len(words)), "well @-@ known")
            if rng.random() < 0.3:
                words.append("1 @,@ 000")
            lines.append(" " + " ".join(words) + " . ")
    return lines


def write_text(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_corpus(directory: Path, train_lines: int = 1500, eval_lines: int = 300) -> Path:
    """A folder with train.txt, valid.txt and test.txt."""
    write_text(directory / "train.txt", wiki_lines(train_lines, seed=0))
    write_text(directory / "valid.txt", wiki_lines(eval_lines, seed=1))
    write_text(directory / "test.txt", wiki_lines(eval_lines, seed=2))
    return directory
