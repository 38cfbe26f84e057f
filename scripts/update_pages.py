"""Rewrites the tables of the README and docs/ that are generated from run records.

    python scripts/update_pages.py            # rewrite every generated table
    python scripts/update_pages.py --check    # list the stale ones; exit 1 if any
    python scripts/update_pages.py --list     # the pages that hold generated tables

Each table is rebuilt from its plan's committed records alone (partf.study.pages).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from partf.study.pages import pages_with_blocks, stale_blocks, update_pages

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list stale tables; change nothing")
    parser.add_argument("--list", action="store_true", help="print the pages with tables")
    args = parser.parse_args()
    if args.list:
        print("\n".join(pages_with_blocks(ROOT)))
        return 0
    if args.check:
        stale = stale_blocks(ROOT)
        print("\n".join(stale) or "every generated table matches its records")
        return 1 if stale else 0
    for page in update_pages(ROOT):
        print(f"updated {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
