"""A small accuracy dataset for the local cluster, laid where the datasets library finds it offline
(``HF_HOME/datasets/<namespace>___<name>/<config>/0.0.0/<hash>``), under the names aiperf's loaders
ask for (checks/evalsets): generated questions with known answers, so an eval runs end to end
without a hub. Runs in the engine venv (it has the datasets library aiperf reads with)."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from servesweep.checks.evalsets import EVAL_SETS

HASH = "servesweep"  # the copy's folder name: the datasets library reads the newest copy, whatever its name


def mmlu_rows(n: int) -> list[dict]:
    """Questions in lighteval/mmlu's shape (question, subject, choices, answer index)."""
    rows = []
    for i in range(n):
        a, b = i + 2, 2 * i + 3
        choices = [str(a + b), str(a * b), str(a + b + 1), str(abs(a - b))]
        gold = i % 4
        choices[0], choices[gold] = choices[gold], choices[0]
        question = f"What is {a} + {b}?"
        rows.append({"question": question, "subject": "abstract_algebra", "choices": choices, "answer": gold})
    return rows


def gsm8k_rows(n: int) -> list[dict]:
    """Questions in openai/gsm8k's shape (question, answer ending in ``#### <number>``)."""
    return [
        {
            "question": f"Ann has {i + 3} apples and buys {2 * i + 1} more. How many apples does she have?",
            "answer": f"{i + 3} + {2 * i + 1} = {3 * i + 4}\n#### {3 * i + 4}",
        }  # fmt: skip
        for i in range(n)
    ]


SETS = {  # benchmark -> config -> split -> rows
    "mmlu": {"abstract_algebra": {"test": mmlu_rows(12), "dev": mmlu_rows(5)}},
    "gsm8k": {"main": {"test": gsm8k_rows(8)}},
}


def write_copy(hf_home: Path, benchmark: str, config: str, splits: dict[str, list[dict]]) -> Path:
    """Prepare one config with the datasets library's own builder, then move it under the repo's name."""
    from datasets.packaged_modules.json.json import Json

    s = EVAL_SETS[benchmark]
    dest = s.cache_root(hf_home) / config / "0.0.0" / HASH
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for split, rows in splits.items():
            files[split] = str(Path(tmp) / f"{split}.jsonl")
            Path(files[split]).write_text("".join(json.dumps(r) + "\n" for r in rows))
        name = s.repo.split("/")[1]
        builder = Json(
            cache_dir=str(Path(tmp) / "cache"), dataset_name=name, config_name=config, hash=HASH, data_files=files
        )
        builder.download_and_prepare()
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(builder.cache_dir, dest)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hf-home", default=".cache/hf", help="HF_HOME to lay the datasets cache in")
    a = ap.parse_args()
    for benchmark, configs in SETS.items():
        for config, splits in configs.items():
            print(f"{benchmark} ({config}): {write_copy(Path(a.hf_home), benchmark, config, splits)}")


if __name__ == "__main__":
    main()
