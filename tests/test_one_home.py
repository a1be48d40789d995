"""The runtime facts with one home (docs/modules.md, "One home for each runtime fact") answer as the
places that spelled them did, and where those disagreed, as the right one did."""

from __future__ import annotations

import json

from servesweep.contract import paths
from servesweep.contract.figures import gpu_hours
from servesweep.contract.plan import SLURM_RESOURCE_KEYS, slurm_resources
from servesweep.run.slurm import srun_step


def test_point_files_are_the_points_and_not_the_capacity_file_or_a_moved_aside_result(tmp_path):
    recipe = tmp_path / "r"
    recipe.mkdir()
    for name in ("c4.json", "c10.json", "capacity.json", "c4.json.unreadable-1", "cx.json", "c2.jsonl"):
        (recipe / name).write_text("{}")
    assert paths.point_files(recipe) == [(10, recipe / "c10.json"), (4, recipe / "c4.json")]
    assert [conc for conc, _ in paths.point_files(tmp_path, every_recipe=True)] == [10, 4]
    assert paths.point_files(tmp_path / "absent") == []


def test_gpu_hours_are_gpus_times_hours():
    assert gpu_hours(8, 1800) == 4.0 and gpu_hours(0, 3600) == 0.0


def test_one_srun_step_prefix_serves_a_process_and_a_held_stacks_point():
    own = srun_step("node00", "agg-1")
    held = srun_step("node01", "point", job="4242")
    assert own[:5] == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=node00"]
    assert held[:2] == ["srun", "--jobid=4242"] and held[2:] == srun_step("node01", "point")[1:]
    assert "--kill-on-bad-exit=1" in own and "--job-name=servesweep-agg-1" in own and own[-1] == "--export=ALL"


def test_the_slurm_resource_keys_are_the_mappings_own():
    res = {"nodes": 2, "tasks": 2, "cpus_per_task": 4, "mem_mb": 100, "runtime_min": 7, "gpus_per_node": 0}
    mapped = slurm_resources(res | {"exclusive": False})
    assert tuple(mapped) == SLURM_RESOURCE_KEYS and mapped["runtime"] == 7 and mapped["gres"] == ""


def test_a_failure_record_is_written_whole_and_replaces_the_last(tmp_path):
    from servesweep.run.attempts import record_failure

    record_failure(tmp_path, "first")
    record_failure(tmp_path, "second (first)")
    doc = json.loads((tmp_path / paths.FAILURE_FILE).read_text())
    assert doc["reason"] == "second (first)" and doc["logs"] == str(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [paths.FAILURE_FILE]  # no temporary left
