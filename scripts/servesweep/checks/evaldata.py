"""What an eval reads, as part of its identity: the prepared copy of each of its configs in the
cluster's datasets cache (``<repo>/<config>/<version>/<fingerprint>/``, the newest as the datasets
library picks it). The eval's settings file holds it, so a new copy of the questions reruns the eval
(and only it); a cache this host cannot see is recorded as such, and the job checks it first."""

from __future__ import annotations

from pathlib import Path

from .evalsets import EVAL_SETS


def eval_data(hf_home: Path, benchmark: str, tasks: list[str] | None) -> dict:
    """Config -> ``<version>/<fingerprint>`` of its newest prepared copy, or None where there is none here."""
    s = EVAL_SETS[benchmark]
    out = {}
    for config in s.configs_for(tasks):
        try:
            copies = (s.cache_root(hf_home) / config).glob("*/*/dataset_info.json")
            infos = sorted(copies, key=lambda p: p.stat().st_mtime)
        except OSError:
            infos = []
        out[config] = "/".join(infos[-1].parts[-3:-1]) if infos else None
    return out
