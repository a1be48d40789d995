"""The accuracy benchmarks a recipe may declare (``evals:``), run through aiperf's accuracy mode
(``--accuracy-benchmark``), and where each one's questions come from: the Hugging Face dataset that
aiperf's loader names, read offline from the cluster's ``hf_home`` datasets cache (nothing is
downloaded; for the local cluster ``servesweep.tools.evaldata`` writes a small one).

One home for what we know of aiperf's loaders (``aiperf/accuracy/benchmarks/*.py``, 0.13);
tests/test_evals.py checks it against the pinned aiperf."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

MMLU_SUBJECTS = (
    "abstract_algebra anatomy astronomy business_ethics clinical_knowledge college_biology "
    "college_chemistry college_computer_science college_mathematics college_medicine college_physics "
    "computer_security conceptual_physics econometrics electrical_engineering elementary_mathematics "
    "formal_logic global_facts high_school_biology high_school_chemistry high_school_computer_science "
    "high_school_european_history high_school_geography high_school_government_and_politics "
    "high_school_macroeconomics high_school_mathematics high_school_microeconomics high_school_physics "
    "high_school_psychology high_school_statistics high_school_us_history high_school_world_history "
    "human_aging human_sexuality international_law jurisprudence logical_fallacies machine_learning "
    "management marketing medical_genetics miscellaneous moral_disputes moral_scenarios nutrition "
    "philosophy prehistory professional_accounting professional_law professional_medicine "
    "professional_psychology public_relations security_studies sociology us_foreign_policy virology "
    "world_religions"
).split()


@dataclass(frozen=True)
class EvalSet:
    repo: str  # the dataset aiperf's loader asks datasets.load_dataset for
    split: str  # the split it grades
    configs: tuple[str, ...]  # the dataset's configs: its tasks when there are several
    has_tasks: bool  # the recipe's ``tasks`` picks among the configs

    def configs_for(self, tasks: list[str] | None) -> list[str]:
        return list(tasks) if tasks else list(self.configs)

    def cache_root(self, hf_home: Path) -> Path:
        """Where the datasets library keeps this dataset's prepared copies (HF_HOME/datasets)."""
        namespace, name = self.repo.split("/")
        return hf_home / "datasets" / f"{namespace}___{name}"


EVAL_SETS = {
    "mmlu": EvalSet("lighteval/mmlu", "test", tuple(MMLU_SUBJECTS), True),
    "gsm8k": EvalSet("openai/gsm8k", "test", ("main",), False),
}


def settings_doc(benchmark: str, settings: dict) -> dict:
    """An eval's settings file (paths.EVAL_SETTINGS) from the recipe's evals entry; the eval file
    records its digest."""
    return {"benchmark": benchmark} | {k: settings.get(k) for k in ("tasks", "n_shots", "concurrency")}


def recipe_problems(evals: dict) -> list[tuple[str, str]]:
    """(field, reason) for each of a recipe's evals that names tasks its benchmark does not have."""
    out = []
    for benchmark, settings in evals.items():
        s, tasks, fld = EVAL_SETS[benchmark], settings.get("tasks") or [], f"evals.{benchmark}.tasks"
        unknown = [t for t in tasks if t not in s.configs]
        if tasks and not s.has_tasks:
            out.append((fld, f"{benchmark} has no tasks to choose among"))
        elif unknown:
            out.append((fld, f"{benchmark} has no task {', '.join(map(repr, unknown))}"))
    return out


def problem_count(hf_home: Path, benchmark: str, tasks: list[str] | None) -> int:
    """How many questions aiperf will grade: the split's size in each config's prepared copy
    (``dataset_info.json``, the newest copy as the datasets library picks it). ValueError naming the
    first config that is not there."""
    s = EVAL_SETS[benchmark]
    total = 0
    for config in s.configs_for(tasks):
        infos = sorted((s.cache_root(hf_home) / config).glob("*/*/dataset_info.json"), key=lambda p: p.stat().st_mtime)
        if not infos:
            raise ValueError(f"{s.repo} ({config}) is not in the datasets cache under {hf_home}; nothing is downloaded")
        try:
            total += int(json.loads(infos[-1].read_text())["splits"][s.split]["num_examples"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{infos[-1]}: no {s.split} split size ({type(e).__name__}: {e})") from None
    return total
