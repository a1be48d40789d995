"""run-eval: an accuracy benchmark on a recipe's stack, through aiperf's accuracy mode (the client the
points already run; aiperf grades with lighteval-aligned graders and exports per-task counts). The
questions are read offline from the cluster's hf_home datasets cache (checks/evalsets); the file
``results/<recipe>/eval-<benchmark>.json`` holds the score, its standard error and the counts."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

from ..checks.evalsets import EVAL_SETS, problem_count
from ..contract import paths
from ..contract.plan import Plan
from ..fileio.encode import digest
from . import bench, check_turn
from .ready import PointFailed
from .spawn import LocalSpawner, inherited_env, stop_all

SCHEMA = "servesweep.eval/1"
SEED = 1234
DEFAULT_CONCURRENCY = 8


def read_settings(path: Path) -> dict:
    """The recipe's evals entry as render wrote it (paths.EVAL_SETTINGS); ValueError if it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None
    if not isinstance(doc, dict):
        doc = {}
    tasks = doc.get("tasks")
    ok = (
        doc.get("benchmark") in EVAL_SETS
        and (tasks is None or (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks)))
        and all(doc.get(k) is None or (isinstance(doc[k], int) and doc[k] >= 0) for k in ("n_shots", "concurrency"))
    )
    if not ok:
        raise ValueError(f"{path}: not an eval settings file (benchmark, tasks, n_shots, concurrency)")
    return doc


def hf_home(plan: Plan) -> Path:
    return Path(plan.benchmark.hf_home or "~/.cache/huggingface").expanduser().resolve()


def aiperf_argv(plan: Plan, client: str, settings: dict, questions: int, artifact_dir: Path) -> list[str]:
    b = plan.benchmark
    argv = [b.aiperf, "profile", "--model", plan.model["name"], "--url", client, "--endpoint-type", b.endpoint]
    argv += ["--concurrency", str(settings.get("concurrency") or DEFAULT_CONCURRENCY)]
    if b.tokenizer:
        argv += ["--tokenizer", b.tokenizer]
    argv += ["--use-server-token-count", "--no-gpu-telemetry", "--ui-type", "none", "--artifact-dir", str(artifact_dir)]
    argv += ["--accuracy-benchmark", settings["benchmark"]]
    if settings.get("tasks"):
        argv += ["--accuracy-tasks", ",".join(settings["tasks"])]
    if settings.get("n_shots") is not None:
        argv += ["--accuracy-n-shots", str(settings["n_shots"])]
    # every question once, in order, answered greedily
    argv += ["--request-count", str(questions), "--dataset-sampling-strategy", "sequential"]
    argv += ["--random-seed", str(SEED), "--extra-inputs", json.dumps({"temperature": 0, "seed": SEED})]
    return argv


def stderr_of(correct: int, total: int) -> float | None:
    """Standard error of the mean of per-question 0/1 scores (lm-eval's: sample std / sqrt(n))."""
    if total < 2:
        return None
    p = correct / total
    return math.sqrt(p * (1 - p) / (total - 1))


def score_of(overall: dict) -> dict:
    """Score, stderr and counts. Unparsed answers count as wrong; with none gradable there is no score
    (null), never 0 % ± 0 %: the server, not the model, is then usually at fault."""
    counts = {k: overall[k] for k in ("correct", "total", "unparsed")}
    if not overall["total"] or overall["unparsed"] >= overall["total"]:
        return {"score": None, "stderr": None} | counts
    correct, total = overall["correct"], overall["total"]
    return {"score": correct / total, "stderr": stderr_of(correct, total)} | counts


MAX_WARNINGS = 10
# The datasets library's notes that it read the site's copy: the eval runs offline on purpose.
EXPECTED_WARNINGS = ("offline mode is enabled", "Found the latest cached dataset configuration")


def aiperf_warnings(run_dir: Path, artifact_dir: Path) -> list[str]:
    """aiperf's distinct warnings of the eval (its console's "Warning: ..." and its log's WARNING lines),
    each once, at most MAX_WARNINGS: they travel into the eval file and the summary."""
    found: list[str] = []
    for log in (run_dir / paths.AIPERF_LOG, *sorted(artifact_dir.glob(f"**/logs/{paths.AIPERF_LOG}"))):
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for i in range(len(lines)):
            text = _warning_text(lines, i)
            if text and text not in found and len(found) < MAX_WARNINGS:
                found.append(text)
    return found


def _warning_text(lines: list[str], i: int) -> str | None:
    line = lines[i]
    if "is taking too long to run" in line or any(w in line for w in EXPECTED_WARNINGS):
        return None  # the client's event-loop stalls have no bearing on a grade
    if " - WARNING - " in line:
        return line.split(" - WARNING - ", 1)[1].strip()[:300]
    if "Warning:" not in line:
        return None
    text = [line.split("Warning:", 1)[1].strip()]  # the console wraps: read on to the blank line
    for more in lines[i + 1 : i + 8]:
        if not more.strip():
            break
        text.append(more.strip())
    return " ".join(text)[:300]


def read_scores(artifact_dir: Path) -> tuple[dict, list[dict]]:
    """(overall, per task) from aiperf's ``accuracy_results.csv``; ValueError when it is missing or odd."""
    path = artifact_dir / "accuracy_results.csv"
    try:
        rows = list(csv.DictReader(path.read_text().splitlines()))
        parsed = [
            {"task": r["task"], "correct": int(r["correct"]), "total": int(r["total"]), "unparsed": int(r["unparsed"])}
            for r in rows
        ]
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise ValueError(f"aiperf wrote no usable {path.name} ({type(e).__name__}: {e})") from None
    overall = [r for r in parsed if r["task"] == "OVERALL"]
    if len(overall) != 1:
        raise ValueError(f"{path.name} has {len(overall)} OVERALL rows")
    for r in parsed:
        r["score"] = r["correct"] / r["total"] if r["total"] else None
    return overall[0], sorted((r for r in parsed if r["task"] != "OVERALL"), key=lambda r: r["task"])


def _run_aiperf(plan: Plan, stack, argv: list[str], run_dir: Path, say) -> int:
    """aiperf to the end, the stack watched meanwhile; its return code."""
    tmp = Path(tempfile.mkdtemp(prefix="servesweep-"))  # short: aiperf's IPC sockets live under TMPDIR
    env = bench.aiperf_env(plan, run_dir, tmp, inherited_env(os.environ))
    env |= {"HF_HOME": str(hf_home(plan)), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    aiperf = LocalSpawner().start("aiperf", argv, env, run_dir / paths.AIPERF_LOG, Path.cwd())
    try:
        while aiperf.poll() is None:
            stack.check("mid-eval")
            time.sleep(0.1)
        stack.check("mid-eval")
        return aiperf.poll()
    finally:
        stop_all([aiperf], grace_s=2)
        shutil.rmtree(tmp, ignore_errors=True)
        say(f"eval: aiperf exited {aiperf.poll()}; log {run_dir / paths.AIPERF_LOG}")


def run_eval(plan_path: Path, settings_path: Path, out_path: Path, join: Path | None = None) -> int:
    try:
        settings = read_settings(settings_path)
    except ValueError as e:
        print(f"servesweep: {e}")
        return 2

    def measure(plan: Plan, stack, run_dir: Path, say) -> dict:
        try:
            questions = problem_count(hf_home(plan), settings["benchmark"], settings.get("tasks"))
        except ValueError as e:
            raise PointFailed(f"eval {settings['benchmark']}: {e}") from None
        client = stack.info.context(plan).resolve(plan.client_url, "")
        art = run_dir / "aiperf"
        say(f"eval: {settings['benchmark']}, {questions} questions at concurrency "
            f"{settings.get('concurrency') or DEFAULT_CONCURRENCY}")  # fmt: skip
        started = time.monotonic()
        rc = _run_aiperf(plan, stack, aiperf_argv(plan, client, settings, questions, art), run_dir, say)
        try:
            overall, tasks = read_scores(art)
        except ValueError as e:
            raise PointFailed(f"eval {settings['benchmark']}: aiperf exit {rc}: {e}") from None
        if rc != 0 or overall["total"] != questions:
            graded = f"graded {overall['total']} of {questions}"
            raise PointFailed(f"eval {settings['benchmark']}: aiperf exit {rc}, {graded}")
        say(f"eval: {overall['correct']}/{questions} correct, {overall['unparsed']} unparsed")
        ident = check_turn.identity(plan, stack) | {"settings": digest(Path(settings_path).read_text())}
        keep = {k: settings.get(k) for k in ("benchmark", "tasks", "n_shots")}
        timings = {"bench": round(time.monotonic() - started, 3)}
        return {"schema": SCHEMA, "identity": ident, "eval": keep, **score_of(overall), "tasks": tasks,
                "warnings": aiperf_warnings(run_dir, art), "timings_s": timings}  # fmt: skip

    return check_turn.take_turn(plan_path, out_path, f"eval-{settings['benchmark']}", "eval.schema.yaml", measure, join)
