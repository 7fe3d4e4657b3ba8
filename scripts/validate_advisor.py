"""Validation of ``lbtrain advise`` (issue 17, part 3), rendered from committed outputs.

Writes ``results/advisor_validation/validation.json``, ``validation.md`` and ``validation.png``
(``lab.advisor_validation``: what is compared, and how) and prints one line per
pair. Nothing trains.

    python scripts/validate_advisor.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from lab.advisor_validation import OUTPUT, summary_lines, write_validation  # noqa: E402
from lbtrain.reports.report import ReportError  # noqa: E402


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    try:
        data = write_validation(REPO_ROOT)
    except ReportError as error:
        raise SystemExit(str(error)) from None
    print("\n".join(summary_lines(data)))
    print(f"wrote {REPO_ROOT / OUTPUT / 'validation.json'}, validation.md, validation.png")


if __name__ == "__main__":
    main()
