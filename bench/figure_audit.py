"""Figure audit: recompute every client figure of a results folder's summary from aiperf's per-request
exports and compare (tools/audit). Run from the workflow's root after `make demo`:

    .venvs/project/bin/python bench/figure_audit.py results/summary.csv

Exit 0 when every shown figure agrees to rounding (or is '–' with its reason), 1 otherwise."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tabulate import tabulate

from servesweep.tools.audit import audit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("summary_csv", type=Path, nargs="?", default=Path("results/summary.csv"))
    ap.add_argument("--root", type=Path, default=Path.cwd(), help="where the result paths are relative to")
    a = ap.parse_args()
    if not a.summary_csv.is_file():
        print(f"figure_audit: {a.summary_csv}: no summary CSV (run the summary first)", file=sys.stderr)
        return 2
    rows, bad = audit(a.summary_csv, a.root)
    print(tabulate(rows, ["result", "figure", "summary", "recomputed", "verdict"], tablefmt="github"))
    print(f"\n{len(rows)} figures audited, {bad} disagree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
