"""The warm-stack protocol without processes: states and transitions, joining, turn order, the
keeper's stop decisions, dead points, one keeper per stack."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from servesweep.run.stacks.decide import Seen, join_start_or_fail, stop_reason
from servesweep.run.stacks.registry import TRANSITIONS, Current, ProtocolError, StackDir, State, Status

CURRENT = Current("x", Path("x"), 4242, "local:1", "c1")


def test_states_follow_the_allowed_transitions(tmp_path):
    d = StackDir(tmp_path)
    assert d.status().state is None
    with pytest.raises(ProtocolError):
        d.publish(State.READY)  # not before starting
    d.publish(State.STARTING)
    d.publish(State.READY, info={"id": "x"})
    assert d.status() == Status(State.READY, None, {"id": "x"}, os.getpid(), 0)
    d.publish(State.STOPPED, message="all 3 expected point(s) done")
    d.fail("late interrupt")  # a stop under way stays a stop
    assert d.status().state is State.STOPPED
    for end in (State.STOPPED, State.DEAD):
        assert TRANSITIONS[end] == set()
    with pytest.raises(ProtocolError):
        d.publish(State.READY)


def test_a_requeued_held_stack_starts_again_with_the_cut_run_set_aside(tmp_path):
    """Slurm runs a requeued job's batch script (the keeper) again: the cut run's state, logs,
    credentials and etcd data move aside, the points served stay counted, and the new run's states
    carry its restart (a point waits for that run, not the cut one's end)."""
    d = StackDir(tmp_path)
    d.publish(State.STARTING)
    d.publish(State.READY)
    d.finish_turn()
    d.fail("stack keeper interrupted by SIGTERM")
    for name in ("frontend.log", "credentials.json", "tls/ca.pem", "etcd/member/wal", "job.log", "hold.sh"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    d.reincarnate(1)
    assert d.status().state is None and d.status().incarnation == 0
    d.publish(State.STARTING, incarnation=1)
    d.publish(State.READY)
    assert d.status().state is State.READY and d.status().incarnation == 1 and d.served() == 1
    aside = tmp_path / "before-restart-1"
    assert {p.name for p in aside.iterdir()} == {"state.json", "frontend.log", "credentials.json", "tls", "etcd"}
    assert (tmp_path / "job.log").exists() and (tmp_path / "hold.sh").exists() and not (tmp_path / "tls").exists()
    assert '"dead"' in (aside / "state.json").read_text()


def test_an_unknown_or_garbage_state_is_never_joined(tmp_path):
    (tmp_path / "state.json").write_text('{"state": "warming"}')
    assert StackDir(tmp_path).status().state is State.DEAD
    (tmp_path / "state.json").write_text("[1, 2")
    assert StackDir(tmp_path).status().state is None


@pytest.mark.parametrize(
    "current,state,keeper_alive,expected",
    [
        (CURRENT, State.READY, True, "join"),
        (CURRENT, State.STARTING, True, "join"),
        (CURRENT, None, True, "join"),  # the keeper has not written yet
        (CURRENT, State.READY, False, "start"),  # its keeper is gone
        (CURRENT, State.STOPPED, True, "start"),  # stopping: never join
        (CURRENT, State.DEAD, True, "fail"),  # the curve's stack died: fail at once
        (replace(CURRENT, server="c2"), State.READY, True, "start"),  # another server configuration
        (replace(CURRENT, invocation="local:2"), State.READY, True, "start"),  # another snakemake
        (replace(CURRENT, invocation="local:2", linger_s=60), State.READY, True, "join"),  # it lingers
        (replace(CURRENT, invocation="local:2", linger_s=60), State.STARTING, True, "start"),
        (replace(CURRENT, invocation="local:2", linger_s=60), State.READY, False, "start"),
        (None, None, False, "start"),  # nothing recorded
    ],
)
def test_a_point_joins_starts_or_fails(current, state, keeper_alive, expected):
    assert join_start_or_fail(current, "c1", "local:1", Seen(state, keeper_alive)) == expected


def test_turns_count_positions_and_a_finished_turn_clears_running(tmp_path):
    d = StackDir(tmp_path)
    assert d.start_turn(4, 1.0) == 1 and d.running_point() == 4
    assert d.finish_turn() == 1 and d.running_point() is None
    assert d.start_turn(8, 2.0) == 2
    assert d.finish_turn() == 2 and d.served() == 2
    assert d.start_turn(16, 3.0) == 3
    assert d.finish_turn(counted=False) == 2 and d.running_point() is None  # cut by a signal: runs again


def test_a_dead_point_does_not_hold_the_stack(tmp_path):
    d = StackDir(tmp_path)
    d.wait(os.getpid())
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    d.wait(gone.pid)
    assert d.waiting() == [os.getpid()]
    assert not (tmp_path / "waiting" / str(gone.pid)).exists()
    d.done_waiting(os.getpid())
    assert d.waiting() == []


def test_a_second_keeper_is_refused(tmp_path):
    first = StackDir(tmp_path).claim_keeper()
    with pytest.raises(ProtocolError, match="already has a keeper"):
        StackDir(tmp_path).claim_keeper()
    first.close()
    StackDir(tmp_path).claim_keeper().close()  # free again once the first is gone


GONE = "the snakemake process running the points is gone"


@pytest.mark.parametrize(
    "args,reason",
    [
        ((True, 0, 3, False, (0, 90, 0), None), None),  # a point is waiting
        ((True, 3, 3, False, (500, 90, 0), GONE), GONE),
        ((False, 3, 3, False, (0, 90, 0), None), "all 3 expected point(s) done"),
        ((False, 3, 3, True, (0, 90, 0), None), None),  # a capacity search may still ask for a probe
        ((False, 1, 3, False, (91, 90, 0), None), "idle for 90 s after 1 point(s)"),
        ((False, 1, 3, False, (10, 90, 0), None), None),
        # linger: up after the last point, also once its snakemake has ended, until the linger is over
        ((False, 3, 3, False, (30, 90, 60), None), None),
        ((False, 3, 3, False, (30, 90, 60), GONE), None),
        ((False, 3, 3, False, (61, 90, 60), GONE), "all 3 expected point(s) done, then lingered 60 s"),
        ((False, 3, 3, False, (61, 90, 60), None), "all 3 expected point(s) done, then lingered 60 s"),
        ((False, 1, 3, False, (5, 90, 60), GONE), GONE),  # not done: a gone snakemake still ends it
    ],
)
def test_the_keeper_stops_only_for_a_reason(args, reason):
    assert stop_reason(*args) == reason


def test_a_follow_up_run_adopts_a_lingering_stack_and_counts_from_there(tmp_path):
    d = StackDir(tmp_path)
    d.start_turn(2, 1.0)
    d.finish_turn()
    assert d.owner() == {}
    d.adopt("host:2", 0, "/hb/2")
    assert d.owner() == {"invocation": "host:2", "watch": 0, "heartbeat": "/hb/2", "served_base": 1}
    d.start_turn(4, 2.0)
    d.finish_turn()
    d.adopt("host:2", 0, "/hb/2")  # its next point: the base stays
    assert d.owner()["served_base"] == 1


def test_the_registry_records_the_current_stack_and_distrusts_a_file_it_did_not_write(tmp_path):
    from servesweep.run.stacks.registry import Registry

    reg = Registry(tmp_path)
    assert reg.current() is None  # nothing recorded yet
    cur = Current("s1", tmp_path / "s1", 4242, "inv-1", "abcd")
    reg.record(cur)
    assert reg.current() == cur
    for text in (
        "{",
        "[]",
        '{"id": "s1"}',
        '{"id": "s1", "dir": "d", "keeper": "x", "invocation": "i", "server": "c"}',
    ):
        (tmp_path / "current.json").write_text(text)
        assert reg.current() is None, text  # a point then starts its own stack
    lock = reg.lock()
    assert lock.acquire(blocking=False)
    lock.close()


# run/stacks, bottom up: each module imports only those before it, and a run module it imports from
# outside imports only those before it too (a point followed through the calls never climbs back)
LAYERS = ("registry", "decide", "common", "processes", "warm", "held", "held_step", "keeper")


def _froms(src: str, level: int) -> list[tuple[str, list[str]]]:
    """(module, names) of each ``from`` import at relative ``level`` in ``src``."""
    import ast

    nodes = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom) and n.level == level]
    return [(n.module or "", [a.name for a in n.names]) for n in nodes]


def _stack_modules(src: str, inside: bool) -> set[str]:
    """The run/stacks modules a module imports: one of the package (``inside``) or of run/."""
    out = set()
    for module, names in _froms(src, 1):
        parts = module.split(".") if module else []
        if inside:
            out |= {parts[0]} if parts else set(names)
        elif parts[:1] == ["stacks"]:
            out |= {parts[1]} if len(parts) > 1 else set(names)
    return out


def _climbs_back(stacks: dict[str, str], run: dict[str, str]) -> list[str]:
    """``stacks``: package module -> source; ``run``: a run/ module -> source. Each climb back, as text."""
    found = []
    for name in LAYERS:
        below = set(LAYERS[: LAYERS.index(name)])
        found += [f"{name} -> {m}" for m in sorted(_stack_modules(stacks[name], True) - below)]
        outside = {module.split(".")[0] for module, _ in _froms(stacks[name], 2) if module}
        outside |= {n for module, names in _froms(stacks[name], 2) if not module for n in names}
        for o in sorted(outside & set(run)):
            found += [f"{name} -> {o} -> {m}" for m in sorted(_stack_modules(run[o], False) - below)]
    return found


def test_a_point_followed_through_the_stack_package_never_climbs_back():
    pkg = Path(__file__).parent.parent / "scripts" / "servesweep" / "run"
    stacks = {f.stem: f.read_text() for f in (pkg / "stacks").glob("*.py") if f.stem != "__init__"}
    assert set(stacks) == set(LAYERS)
    run = {f.stem: f.read_text() for f in pkg.glob("*.py")}
    assert _climbs_back(stacks, run) == []
    planted = stacks | {"common": stacks["common"] + "from .warm import SharedStack\n"}
    assert _climbs_back(planted, run) == ["common -> warm"]
    via_run = run | {"slurmjob": run["slurmjob"] + "from .stacks.held import HeldStack\n"}
    assert _climbs_back(stacks, via_run) == ["held -> slurmjob -> held"]
