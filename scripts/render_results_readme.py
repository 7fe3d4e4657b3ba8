"""results/README.md, rendered from the committed studies' data.

The page and the README's quickstart table are rendered by ``lab.results_page`` (this
repository's own studies, not part of the installed lbtrain); this script renders this
checkout's ``results/``.

    python scripts/render_results_readme.py            # print the page
    python scripts/render_results_readme.py --write    # write results/README.md and the README's quickstart table
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from lab.results_page import PAGE_FILE, render_results_page, write_results_page  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write results/README.md")
    args = parser.parse_args()
    results, readme = REPO_ROOT / "results", REPO_ROOT / "README.md"
    if args.write:
        write_results_page(results, readme)
        print(f"wrote {results / PAGE_FILE} and the quickstart table in {readme}")
    else:
        print(render_results_page(results), end="")


if __name__ == "__main__":
    main()
