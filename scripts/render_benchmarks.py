"""Prints the performance table rendered from results/benchmarks/*.json (``lab.performance``),
or with ``--write`` puts it into docs/benchmarks.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from lab.performance import PAGE, load_results, render_table, replace_table  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"replace the table in {PAGE}")
    args = parser.parse_args()
    table = render_table(load_results(REPO_ROOT / "results" / "benchmarks"))
    if not args.write:
        print(table, end="")
        return
    page = REPO_ROOT / PAGE
    try:
        page.write_text(replace_table(page.read_text(), table))
    except ValueError as error:
        raise SystemExit(str(error)) from None
    print(f"wrote the performance table into {page}")


if __name__ == "__main__":
    main()
