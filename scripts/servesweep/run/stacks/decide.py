"""The decisions taken from a stack's registry and state (pure: unit-tested without processes): what a
new point does with its server identity's recorded stack (join it, start a new one, or fail), the
same question for a local warm stack and a Slurm held one, and why a keeper stops its stack."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import Current, State


@dataclass(frozen=True)
class Seen:
    """What a point sees of the recorded stack when it decides."""

    state: State | None  # its state.json (None: its keeper has written nothing yet)
    alive: bool  # what keeps it still runs: its keeper's process (local), its Slurm job (held)
    room: bool = True  # time enough left on it for this point (a held stack's running job)
    held: bool = False  # a held stack: its own Slurm job, which every point of any run waits for


def join_start_or_fail(cur: Current | None, server: str, run: str | None, seen: Seen) -> str:
    """What a new point does with its server identity's current stack: ``join``, ``start`` a new
    one, or ``fail``. A stack that died in this run (``run``: this run's invocation; for a held stack
    only with the canary on) fails the points that wanted it at once, whatever keeps it; a held stack
    that died while its job lives is not restarted by each point either. Another snakemake run joins
    a local stack only once ready and only one shared with it (it lingers, or is held); a held stack,
    any run joins while its job has room for the point (it waits for the job)."""
    if cur is None or cur.server != server or (seen.held and not cur.job):
        return "start"
    this_run = run is not None and cur.invocation == run
    if this_run and seen.state is State.DEAD:
        return "fail"
    if not seen.alive or seen.state is State.STOPPED:
        return "start"
    if seen.state is State.DEAD:
        return "fail" if seen.held else "start"
    if not (this_run or seen.held):
        return "join" if seen.state is State.READY and (cur.linger_s or cur.job) else "start"
    return "join" if seen.room else "start"  # too little time left: the old job ends with its own points


def stop_reason(
    waiting: bool, served: int, expected: int, searching: bool, idle: tuple[float, float, float], owner_gone: str | None
) -> str | None:
    """Why the keeper stops now, or None to keep the stack: the snakemake that wanted it is gone,
    every expected point is done (and no search wants more) and it has lingered as asked, or no
    point came for too long. ``idle``: (seconds since a point last held it, the idle limit, linger)."""
    idle_s, idle_limit_s, linger_s = idle
    done = served >= expected and not searching
    if done and linger_s > 0 and not waiting:  # up for a follow-up run, also once this one has ended
        return None if idle_s <= linger_s else f"all {served} expected point(s) done, then lingered {linger_s:.0f} s"
    if owner_gone:
        return owner_gone
    if waiting:
        return None
    if done:
        return f"all {served} expected point(s) done"
    if idle_s > idle_limit_s:
        return f"idle for {idle_limit_s:.0f} s after {served} point(s)"
    return None
