"""Tables in the README and docs/ generated from a plan's run records.

A page holds a generated table between two markers:

    <!-- generated: `partf-study studies/recall_mqar.toml --report`, recall: softmax wo2 -->
    | arm | seeds | ... |
    |---|---|...|
    | softmax | ... |
    | wo2 | ... |
    <!-- end of generated table -->

The opening marker names the plan, a table of its report (`recall`, `placements` or
`perplexity`: the first of that kind in the report, which holds the most runs; `recall
2` for the second), and optionally the arms to keep, in the order given (all of the
table's rows when none are named); an arm with no record yet is left out until it has
one. The block opens with the commit, backend and machine of the table's records.
`render` rebuilds a block from the report that the plan's records give; `update_pages`
rewrites every block of the pages, `stale_blocks` lists those that differ (the test that
keeps pages true to their records).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from partf.study.plan import load_plan

#: The pages that may hold generated tables, relative to the repository's root.
PAGES = ("README.md", "docs/recall.md", "docs/results.md", "docs/search.md", "docs/speed.md")
END = "<!-- end of generated table -->"
BLOCK = re.compile(
    r"<!-- generated: `partf-study (?P<plan>\S+) --report`, (?P<table>[a-z]+)(?: (?P<index>\d+))?"
    r"(?:: (?P<arms>[^>]*?))? -->\n(?P<body>.*?)" + re.escape(END),
    re.S,
)
#: How each kind of table's header begins in report.md.
HEADERS = {
    "recall": "| arm | seeds | test accuracy %",
    "placements": "| softmax places |",
    "perplexity": "| arm | seeds | valid ppl",
}


def report_tables(report: str, kind: str) -> list[tuple[str, list[str]]]:
    """Every table of `kind` in a report's text, in order: each with the heading of its
    section ("tensorflow on <machine>, commit <c>", empty for none) and its lines."""
    lines = report.splitlines()
    found = []
    section = ""
    for i, line in enumerate(lines):
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith(HEADERS[kind]):
            end = i
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            found.append((section, lines[i:end]))
    return found


def _arm_of(row: str) -> str:
    """A table row's arm: its first cell without emphasis and "(reference)"-like notes."""
    cell = row.split("|")[1].strip()
    return cell.replace("**", "").split(" (")[0].strip()


def render(
    report: str, kind: str, index: int, arms: Sequence[str], known: Sequence[str] = ()
) -> str:
    """A block's body: table `index` (from 1) of `kind`, its rows cut to `arms` in their
    order. An arm without a row yet (no record) is left out, and a table the report does
    not hold yet gives an empty body, so a page follows its records as they come; an arm
    that is not in the plan (`known`, the report's row names) is an error."""
    unknown = [arm for arm in arms if known and arm not in known]
    if unknown:
        raise ValueError(f"the plan has no arm {unknown[0]!r}")
    tables = report_tables(report, kind)
    if len(tables) < index:
        return ""
    section, table = tables[index - 1]
    rows = table[2:]
    if arms:
        by_arm = {_arm_of(row): row for row in rows}
        rows = [by_arm[arm] for arm in arms if arm in by_arm]
    # Which commit, backend and machine the rows are from: a table never mixes them.
    label = [f"Records: {section}.", ""] if section else []
    return "\n".join([*label, *table[:2], *rows]) + "\n"


def fresh_reports(root: Path, plans: Sequence[str]) -> dict[str, str]:
    """Each plan's report.md rebuilt from its committed records alone, into a scratch
    folder (the committed report and plots are left as they are)."""
    from partf.study.report import write_report

    reports = {}
    with tempfile.TemporaryDirectory() as scratch:
        for i, name in enumerate(plans):
            path = write_report(load_plan(root / name), None, into=Path(scratch) / str(i))
            reports[name] = path.read_text(encoding="utf-8")
    return reports


def _blocks(root: Path) -> list[tuple[Path, re.Match[str]]]:
    found = []
    for page in PAGES:
        path = root / page
        if path.is_file():
            found += [(path, m) for m in BLOCK.finditer(path.read_text(encoding="utf-8"))]
    return found


def pages_with_blocks(root: Path) -> list[str]:
    """The pages (relative to `root`) holding at least one generated table."""
    return sorted({str(path.relative_to(root)) for path, _ in _blocks(root)})


def _expected(root: Path) -> dict[tuple[Path, int], str]:
    """Every block's body as the records give it, by (page, block start)."""
    blocks = _blocks(root)
    plans = sorted({m["plan"] for _, m in blocks})
    reports = fresh_reports(root, plans)
    arms = {name: load_plan(root / name).arm_names() for name in plans}
    return {
        (path, m.start()): render(
            reports[m["plan"]],
            m["table"],
            int(m["index"] or 1),
            (m["arms"] or "").split(),
            arms[m["plan"]],
        )
        for path, m in blocks
    }


def stale_blocks(root: Path) -> list[str]:
    """One line per generated table that differs from what its records give."""
    expected = _expected(root)
    return [
        f"{path.relative_to(root)}: the {m['table']} table of {m['plan']} differs from its "
        "records; run scripts/update_pages.py"
        for path, m in _blocks(root)
        if m["body"] != expected[(path, m.start())]
    ]


def update_pages(root: Path) -> list[str]:
    """Rewrites every generated table from its records; returns the pages changed."""
    expected = _expected(root)
    changed = []
    for page in PAGES:
        path = root / page
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")

        def body(m: re.Match[str], path: Path = path) -> str:
            start = m.group(0)[: m.start("body") - m.start()]
            return start + expected[(path, m.start())] + END

        new = BLOCK.sub(body, text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed
