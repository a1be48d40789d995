"""Where the workflow's outputs live (relative to the workflow directory)."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path("results")
SUMMARY_MD = RESULTS / "summary.md"
REPORT = RESULTS / "report.html"


def result_file(recipe: str, conc: int, rehearsal: bool = False) -> str:
    return f"results/{'rehearsal/' if rehearsal else ''}{recipe}/c{conc}.json"


def plots_dir(rehearsal: bool = False) -> Path:
    """The summary's plots, next to it (it links them relatively)."""
    return RESULTS / ("rehearsal/plots" if rehearsal else "plots")


def capacity_plot_file(recipe: str) -> str:
    return f"results/{recipe}/capacity.png"
