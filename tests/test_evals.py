"""Accuracy evals (run/evals, checks/evalsets, report/accuracy): what we know of aiperf's loaders
agrees with the pinned aiperf, the generated local dataset is read the way aiperf reads it, the
aiperf command grades every question once, scores come with their standard error, and the summary
flags a drop against a baseline. The stack runs are in test_smoke (mocker) and test_real_vllm."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from servesweep.checks import evalsets
from servesweep.contract.plan import Plan
from servesweep.fileio.yamlio import schema_errors
from servesweep.report.accuracy import accuracy_blocks, accuracy_section, drop_flag
from servesweep.run import evals

from helpers import ROOT, copy_workflow, plan_of, servesweep, snakemake

ENGINE_PYTHON = ROOT / ".venvs/engine/bin/python"


def _engine(code: str) -> str:
    r = subprocess.run([str(ENGINE_PYTHON), "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_the_benchmark_table_agrees_with_the_pinned_aiperf():
    out = _engine(
        "import json\n"
        "from aiperf.accuracy.benchmarks import mmlu, gsm8k\n"
        "print(json.dumps({'mmlu': [mmlu.DATASET_NAME, mmlu.MMLU_SUBJECTS], 'gsm8k': [gsm8k.DATASET_NAME]}))"
    )
    pinned = json.loads(out)
    assert evalsets.EVAL_SETS["mmlu"].repo == pinned["mmlu"][0]
    assert list(evalsets.EVAL_SETS["mmlu"].configs) == pinned["mmlu"][1]
    assert evalsets.EVAL_SETS["gsm8k"].repo == pinned["gsm8k"][0]


def test_the_generated_dataset_is_what_aiperf_loads_offline_and_what_we_count(tmp_path):
    """The datasets library, offline, finds the generated copy under the repo name aiperf asks for."""
    tool = [str(ENGINE_PYTHON), "-m", "servesweep.tools.evaldata", "--hf-home", str(tmp_path)]
    r = subprocess.run(tool, capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(ROOT / "scripts")})
    assert r.returncode == 0, r.stderr[-2000:]
    out = subprocess.run(
        [str(ENGINE_PYTHON), "-c", "from datasets import load_dataset as l\n"
         "print(len(l('lighteval/mmlu', 'abstract_algebra')['test']), len(l('openai/gsm8k', 'main', split='test')))"],
        capture_output=True, text=True, timeout=300,
        env={"HF_HOME": str(tmp_path), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [
        str(evalsets.problem_count(tmp_path, "mmlu", ["abstract_algebra"])),
        str(evalsets.problem_count(tmp_path, "gsm8k", None)),
    ]
    with pytest.raises(ValueError, match=r"lighteval/mmlu \(anatomy\) is not in the datasets cache"):
        evalsets.problem_count(tmp_path, "mmlu", ["anatomy"])


def test_the_aiperf_command_grades_every_question_once_greedily(tmp_path):
    plan = Plan.from_json(plan_of("local-agg-2x-mocker"))
    settings = {"benchmark": "mmlu", "tasks": ["abstract_algebra", "anatomy"], "n_shots": 0, "concurrency": None}
    argv = evals.aiperf_argv(plan, "http://127.0.0.1:1", settings, 17, tmp_path)

    def value(flag):
        return argv[argv.index(flag) + 1]

    assert value("--accuracy-benchmark") == "mmlu" and value("--accuracy-tasks") == "abstract_algebra,anatomy"
    assert value("--accuracy-n-shots") == "0" and value("--request-count") == "17"
    assert value("--dataset-sampling-strategy") == "sequential"
    assert value("--concurrency") == str(evals.DEFAULT_CONCURRENCY)
    assert json.loads(value("--extra-inputs"))["temperature"] == 0
    without = evals.aiperf_argv(plan, "http://x", {"benchmark": "gsm8k", "concurrency": 3}, 5, tmp_path)
    assert "--accuracy-tasks" not in without and "--accuracy-n-shots" not in without
    assert without[without.index("--concurrency") + 1] == "3"


def test_scores_are_read_from_aiperf_and_come_with_their_standard_error(tmp_path):
    (tmp_path / "accuracy_results.csv").write_text(
        "task,correct,total,unparsed,accuracy\nOVERALL,3,12,1,0.2500\nabstract_algebra,3,12,1,0.2500\n"
    )
    overall, tasks = evals.read_scores(tmp_path)
    assert overall == {"task": "OVERALL", "correct": 3, "total": 12, "unparsed": 1, "score": 0.25}
    assert [t["task"] for t in tasks] == ["abstract_algebra"]
    assert evals.stderr_of(3, 12) == pytest.approx(math.sqrt(0.25 * 0.75 / 11))
    assert evals.stderr_of(0, 12) == 0 and evals.stderr_of(1, 1) is None
    (tmp_path / "accuracy_results.csv").write_text("task,correct\nabstract_algebra,3\n")
    with pytest.raises(ValueError, match="no usable accuracy_results.csv"):
        evals.read_scores(tmp_path)


def _graded_doc(tmp_path, csv: str, log: str = "") -> dict:
    """An eval file as run_eval writes it, from aiperf's accuracy CSV and console log (fixtures)."""
    art = tmp_path / "aiperf"
    art.mkdir()
    (art / "accuracy_results.csv").write_text(csv)
    (tmp_path / "aiperf.log").write_text(log)
    overall, tasks = evals.read_scores(art)
    doc = _eval_doc(0.0, 0.0) | evals.score_of(overall) | {"tasks": tasks}
    doc |= {"warnings": evals.aiperf_warnings(tmp_path, art), "timings_s": {"bench": 3.5}}
    assert list(schema_errors(doc, "eval.schema.yaml")) == []
    return doc


def test_nine_of_twelve_is_75_percent_with_its_standard_error(tmp_path):
    doc = _graded_doc(tmp_path, "task,correct,total,unparsed,accuracy\nOVERALL,9,12,0,0.75\nmain,9,12,0,0.75\n")
    assert doc["score"] == 0.75 and doc["stderr"] == pytest.approx(math.sqrt(0.75 * 0.25 / 11))
    row = next(ln for ln in "\n".join(accuracy_section([doc], None)).splitlines() if ln.startswith("| r "))
    assert "| 75.0 %  | 13.1 %" in row and "9 / 12" in row
    assert accuracy_blocks([doc], {"r": {"mmlu": 0.7}}) == {}
    assert accuracy_blocks([doc], {"r": {"mmlu": 0.8}}) == {"r": "mmlu: ⚠ below its floor 80.0 %"}


def test_all_unparsed_is_no_gradable_answers_with_aiperfs_warning_never_zero_percent(tmp_path):
    console = ("Warning: every accuracy response was unparsed (accuracy=0). The grader could\n"
               "not extract an answer from any model output.\n\n"
               "2026-01-01 00:00:00.000 - aiperf.w - WARNING - Event loop for w is taking too long to run. "
               "Overhead: 30ms\n")  # fmt: skip
    doc = _graded_doc(tmp_path, "task,correct,total,unparsed,accuracy\nOVERALL,0,12,12,0.0\n", console)
    assert doc["score"] is None and doc["stderr"] is None and doc["unparsed"] == 12
    said = "every accuracy response was unparsed (accuracy=0). The grader could not extract an answer from any"
    assert doc["warnings"] == [said + " model output."]  # the console's wrapped lines joined; no event-loop line
    section = "\n".join(accuracy_section([doc], None))
    assert "no gradable answers (12 unparsed)" in section and "0.0 %" not in section
    assert "aiperf warned: every accuracy response was unparsed" in section
    assert accuracy_blocks([doc], {}) == {"r": "mmlu: no gradable answers (12 unparsed)"}


def test_a_bad_settings_file_is_named_without_a_traceback(tmp_path):
    bad = tmp_path / "eval-mmlu.json"
    bad.write_text(json.dumps({"benchmark": "mmlu", "tasks": "abstract_algebra"}))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_of("local-agg-2x-mocker")))
    r = servesweep("run-eval", str(plan), str(bad), str(tmp_path / "out.json"), cwd=tmp_path)
    assert r.returncode == 2 and "not an eval settings file" in r.stdout and "Traceback" not in r.stdout + r.stderr
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "logs").exists()


def _eval_doc(score: float, stderr: float, recipe: str = "r") -> dict:
    ident = {"recipe": recipe, "cluster": "local", "rehearsal": False, "engine": "vllm", "plan_fingerprint": "p",
             "server_fingerprint": "s", "settings": "x", "stack": "k", "time": "t"}  # fmt: skip
    counts = {"correct": round(score * 100), "total": 100, "unparsed": 0}
    return {"schema": evals.SCHEMA, "identity": ident, "eval": {"benchmark": "mmlu", "tasks": None, "n_shots": 0},
            "score": score, "stderr": stderr, **counts, "tasks": []}  # fmt: skip


def test_a_drop_larger_than_the_stderr_is_flagged_against_the_baseline(tmp_path):
    assert drop_flag(_eval_doc(0.60, 0.05), _eval_doc(0.70, 0.05)).startswith("⚠ down 10.0 points")
    assert drop_flag(_eval_doc(0.67, 0.05), _eval_doc(0.70, 0.05)) == ""  # within its stderr
    assert drop_flag(_eval_doc(0.80, 0.05), _eval_doc(0.70, 0.05)) == ""  # a rise
    assert drop_flag(_eval_doc(0.60, 0.05), None) == ""
    base = tmp_path / "base"
    (base / "r").mkdir(parents=True)
    (base / "r/eval-mmlu.json").write_text(json.dumps(_eval_doc(0.70, 0.05)))
    section = accuracy_section([_eval_doc(0.60, 0.05), _eval_doc(0.5, 0.05, recipe="other")], base)
    lines = "\n".join(section).splitlines()
    row = next(line for line in lines if line.startswith("| r "))
    assert "60.0 %" in row and "5.0 %" in row and "70.0 %" in row and "⚠ down" in row
    other = next(line for line in lines if line.startswith("| other "))
    assert "⚠" not in other and "–" in other  # no baseline for it


def test_the_summary_builds_the_accuracy_table_from_eval_files(tmp_path):
    files = []
    for name, doc in (("good", _eval_doc(0.25, 0.125)), ("bad", {"schema": "x"})):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(doc))
    sel = tmp_path / "selection.json"
    sel.write_text(json.dumps({"cluster": "local", "points": [], "slo": {}}))
    out = tmp_path / "summary.md"
    r = subprocess.run(
        [sys.executable, "-m", "servesweep", "summary", "--selection", str(sel), "--out", str(out),
         "--evals", *map(str, files)], capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    text = out.read_text()
    assert "## Accuracy" in text and "| r " in text and "25.0 %" in text and "12.5 %" in text
    assert "bad.json: left out of the accuracy table" in r.stderr


def test_on_slurm_an_eval_is_a_step_of_its_stacks_held_job(tmp_path):
    """On Slurm a recipe's eval runs as its points do: a step of its stack's held job from this host
    (no Slurm job or allocation of its own), and the bill counts its time. Dry run, no controller."""
    name = "gemma4-hgx02-4x-tp2-sglang"
    wf = copy_workflow(tmp_path / "wf", [name])
    recipe = wf / f"recipes/{name}.yaml"
    recipe.write_text(recipe.read_text() + "evals:\n  mmlu: {tasks: [abstract_algebra]}\n")
    targets = [f"results/{name}/c96.json", f"results/{name}/c150.json", f"results/{name}/eval-mmlu.json"]
    r = snakemake(wf, "-n", *targets, profile="profiles/slurm-hgx02", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = dict(
        (m.group(2), m.group(1))
        for m in re.finditer(r"^\S*(?:rule|checkpoint) (\w+):\n(?:.*\n)*?\s+output: (\S+)", r.stdout, re.M)
    )
    assert jobs == {targets[0]: "held_point", targets[1]: "held_point", targets[2]: "held_eval"}, r.stdout[-3000:]
    assert "nodes=" not in r.stdout and "gres=" not in r.stdout  # no Slurm job here: the held stack is sized apart
    assert "1 allocation(s) of 8 GPU(s)" in r.stderr and "evals ≤ 600 s" in r.stderr
