"""Every relative link in README.md and docs/*.md points at a file that exists, and every
`#anchor` into a Markdown file names one of its headings (GitHub's rule: the heading's
text lowercased, punctuation other than '-' and '_' removed, each space made a '-', and
'-1', '-2', ... appended to repeated headings). Links inside code are not links."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
# [text](target) or ![alt](target), optionally with a "title"; the text holds no brackets.
LINK = re.compile(r"!?\[[^\[\]]*\]\(\s*<?([^\s()<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\[\]]*)\]\([^)]*\)", r"\1", heading)  # a link counts as its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for _, line in prose_lines(path.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    return [
        (number, match.group(1))
        for number, line in prose_lines(path.read_text())
        for match in LINK.finditer(CODE_SPAN.sub("", line))
    ]


def broken(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not resolved.exists():
            problems.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and unquote(anchor) not in anchors(resolved):
            problems.append(f"{where} (no heading with that anchor)")
    return problems


def test_the_slug_follows_githubs_rule():
    assert slug("The seed's table, side by side") == "the-seeds-table-side-by-side"
    assert slug("Three seeds of `--search=par`") == "three-seeds-of---searchpar"
    assert slug("Exploring a run: colab.ipynb") == "exploring-a-run-colabipynb"
    assert slug("Robustness ([robustness.md](robustness.md))") == "robustness-robustnessmd"
    assert slug("Stage 2 (training the searched architecture)") == (
        "stage-2-training-the-searched-architecture"
    )


def test_code_is_not_searched_for_links():
    text = "a [b](c.md) `[d](e.md)`\n```\n[f](g.md)\n# not a heading\n```\n"
    page = [CODE_SPAN.sub("", line) for _, line in prose_lines(text)]
    assert [m.group(1) for line in page for m in LINK.finditer(line)] == ["c.md"]


def test_the_pages_have_links():
    assert sum(len(links(page)) for page in PAGES) > 50


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_relative_link_resolves(page):
    problems = broken(page)
    assert not problems, "broken links:\n" + "\n".join(problems)
