"""One registry of the headline figures: each one's flat (summary/CSV) name, where it lies in a
result's ``figures``, its unit and heading, whether a baseline comparison counts higher as better,
the SLO key that may name it, and its decimals. The SLO checks, the summary, its CSV and baseline
table, the capacity tables and the repeats' confidence intervals all read it here.

Names say what they count: ``output_*`` output tokens only, ``total_*`` input + output tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    name: str  # the flat name: summary columns, CSV, repeats' half widths
    path: tuple[str, ...]  # where it lies in a result's figures
    unit: str
    heading: str
    higher_is_better: bool | None = None  # set: compared against a baseline
    slo: str | None = None  # the recipe's SLO key that limits it
    digits: int = 2

    def of(self, figures: dict):
        """The figure's value in a result's figures (None where the result has none)."""
        value = figures
        for key in self.path:
            value = value.get(key) if isinstance(value, dict) else None
        return value


def _q(name: str, group: str, q: str, unit: str, heading: str, better=None, slo=None, digits=3) -> Figure:
    return Figure(name, (group, q), unit, heading, better, slo, digits)


FIGURES = (
    Figure("req_s", ("request_throughput",), "req/s", "req/s", True),
    _q("ttft_p50_s", "ttft_s", "p50", "s", "TTFT p50", False, "ttft_p50_s"),
    _q("ttft_p90_s", "ttft_s", "p90", "s", "TTFT p90", None, "ttft_p90_s"),
    _q("ttft_p95_s", "ttft_s", "p95", "s", "TTFT p95", False, "ttft_p95_s"),
    _q("ttft_p99_s", "ttft_s", "p99", "s", "TTFT p99", None, "ttft_p99_s"),
    _q("itl_p50_ms", "itl_ms", "p50", "ms", "ITL p50", False, "itl_p50_ms", 1),
    _q("itl_p90_ms", "itl_ms", "p90", "ms", "ITL p90", None, None, 1),
    _q("itl_p99_ms", "itl_ms", "p99", "ms", "ITL p99", False, "itl_p99_ms", 1),
    _q("latency_p50_s", "request_latency_s", "p50", "s", "latency p50"),
    _q("latency_p99_s", "request_latency_s", "p99", "s", "latency p99", None, "request_latency_p99_s"),
    Figure("output_tps", ("output_tps",), "tok/s", "output tok/s", True),
    Figure("total_tps", ("total_tps",), "tok/s", "total tok/s"),
    Figure("total_tps_per_gpu", ("total_tps_per_gpu",), "tok/s/GPU", "total tok/s/GPU", True),
    Figure("output_tps_per_gpu", ("output_tps_per_gpu",), "tok/s/GPU", "output tok/s/GPU", True),
    Figure("output_tps_per_user", ("output_tps_per_user",), "tok/s/user", "output tok/s/user"),
    Figure("cache_read_share", ("cache_read_share",), "share", "cache read", True, digits=3),
    Figure("acceptance_length", ("spec_decode", "mean_acceptance_length"), "tokens", "accept. length", digits=2),
    Figure("server_ttft_mean_s", ("server_ttft_s", "mean"), "s", "server TTFT mean", digits=3),
    Figure("ttft_gap_s", ("ttft_gap_s",), "s", "TTFT gap (client - server)", digits=3),
    # output tokens / request latency per request: does not depend on when the client read the chunks
    Figure("e2e_tps_per_user", ("client", "e2e_output_tps_per_user"), "tok/s/user", "e2e output tok/s/user"),
)
BY_NAME = {f.name: f for f in FIGURES}
SLO_FIGURES = {f.slo: f for f in FIGURES if f.slo}  # the keys a recipe's slo may name
COMPARED = tuple(f for f in FIGURES if f.higher_is_better is not None)  # a baseline's delta columns
# Older results' repeats named output tokens per GPU without saying so.
HALF_WIDTH_ALIASES = {"output_tps_per_gpu": "tps_per_gpu"}


# Without repeats a run has no confidence interval: a difference smaller than this share of the value
# is called noise (run-to-run spread of one point measured on these machines: 1-3 %). Baselines and
# rankings (report/ranking) both use it.
NOISE_BAND = 0.03

PER_GPU = {"output_tps_per_gpu": "output_tps", "total_tps_per_gpu": "total_tps"}  # derived: base / GPUs


def per_gpu(values: dict, gpus: int) -> dict:
    """The per-GPU figures from their bases in ``values`` (figures, or their half widths): None where
    a base is missing or the plan uses no GPUs. The only place they are derived."""
    return {
        name: values[base] / gpus if values.get(base) is not None and gpus else None for name, base in PER_GPU.items()
    }


def label(name: str) -> str:
    """A figure's heading with its unit, for an axis or a column: 'TTFT p95 (s)'."""
    f = BY_NAME[name]
    return f.heading if f.unit in f.heading else f"{f.heading} ({f.unit})"


def joined(names: tuple[str, ...]) -> str:
    """One column for several figures of one family: 'TTFT p50 / p90 / p95 / p99 (s)'."""
    heads = [BY_NAME[n].heading for n in names]
    family = heads[0].rsplit(" ", 1)[0]
    return f"{family} {' / '.join(h.rsplit(' ', 1)[1] for h in heads)} ({BY_NAME[names[0]].unit})"


def flat(figures: dict) -> dict:
    """Every registered figure of a result, by flat name."""
    return {f.name: f.of(figures) for f in FIGURES}


def half_width(half: dict, name: str):
    return half.get(name, half.get(HALF_WIDTH_ALIASES.get(name, ""), None))


def gpu_hours(gpus: float, seconds: float) -> float:
    """What holding ``gpus`` GPUs for ``seconds`` costs, in GPU-hours: the bill, the summary's GPU time
    and a capacity probe's cost all count it here."""
    return gpus * seconds / 3600
