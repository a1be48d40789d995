"""Which stack a server identity's next point joins: ``logs/stacks/<server>/current.json``, and the
states a warm stack goes through (the one state machine: ``run/stackdir`` enforces it).

Written and read by the run side only (``run/curve``, ``run/held``, ``run/heldstep``, under
``run/stackdir``'s registry lock); render and workflow never read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ..fileio.files import read_json_object
from .paths import CURRENT_FILE, STATE_FILE  # noqa: F401 - the protocol's files, named in paths


class State(StrEnum):
    STARTING = "starting"
    READY = "ready"
    STOPPED = "stopped"  # torn down (or about to be) because no point needs it
    DEAD = "dead"  # a process died, startup failed or the keeper was interrupted


TRANSITIONS = {
    None: {State.STARTING},
    State.STARTING: {State.READY, State.DEAD},
    State.READY: {State.STOPPED, State.DEAD},
    State.STOPPED: set(),
    State.DEAD: set(),
}


@dataclass(frozen=True)
class Current:
    """``current.json``: the stack a new point of the curve should join, and who keeps it."""

    id: str
    dir: Path
    keeper: int  # its pid on this host (0: a held stack, whose keeper runs in a Slurm job of its own)
    invocation: str  # the snakemake run (and its parent) that started it
    server: str  # the server identity of the plans it serves (fingerprints.server)
    linger_s: float = 0.0  # it stays up this long after its last point: another run may join it
    job: str = ""  # a held stack: its own Slurm job

    def to_json(self) -> dict:
        return {**self.__dict__, "dir": str(self.dir)}


def read_current(root: Path) -> Current | None:
    """The recorded stack, or None when there is none or the file is not one we wrote."""
    doc = read_json_object(root / CURRENT_FILE)
    try:
        return Current(
            str(doc["id"]), Path(doc["dir"]), int(doc["keeper"]), str(doc["invocation"]), str(doc["server"]),
            float(doc.get("linger_s", 0)), str(doc.get("job", "")),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None
