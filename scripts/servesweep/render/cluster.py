"""A cluster's facts: hardware shape, placeholder values, paths, timeouts.

Each lives in ``profiles/<profile>/cluster.yaml``; the cluster name inside the
file is what recipes refer to (several profiles may not claim one name).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..fileio.errors import InputError, Problem
from ..fileio.yamlio import load_yaml, schema_problems
from .ports import PORT_LIMIT

PACKAGE_PROFILES = Path(__file__).resolve().parents[3] / "profiles"
DATA_PLACEHOLDERS = ("model_dir", "trace_dir")  # the cluster's data directories, recipes' placeholders


def default_profiles_dir() -> Path:
    """profiles/ of the workflow being run (cwd), else of this checkout."""
    here = Path.cwd() / "profiles"
    return here if here.is_dir() else PACKAGE_PROFILES


@dataclass(frozen=True)
class Cluster:
    name: str
    launcher: str
    nodes: int
    gpus_per_node: int
    source: str
    gpu_type: str = ""
    cpus_per_job: int = 2
    mem_mb_per_node: int = 8000
    container_runtime: str | None = None
    container_mounts: tuple[str, ...] = ()
    container_base: tuple[str, ...] = ()  # bwrap (the test rig): what stands in for an image's contents
    engine_python: str = "python3"
    engine_pythons: dict = field(default_factory=dict, hash=False, compare=False)
    cpu_engine: dict | None = field(default=None, hash=False, compare=False)
    aiperf: str = "aiperf"
    hf_home: str | None = None
    tokenizer: str | None = None
    placeholders: dict = field(default_factory=dict, hash=False, compare=False)
    control_plane: dict = field(default_factory=dict, hash=False, compare=False)
    readiness_timeout_s: float = 900.0
    runtime_margin_s: float = 300.0
    port_base: int = 20000
    port_block: int = 512
    port_slots: int = 16
    rehearsal_max_duration_s: float = 20.0
    rehearsal_max_concurrency: int = 32
    doc: dict = field(default_factory=dict, hash=False, compare=False)  # the file as written (for `why`)

    def python_for(self, kind: str) -> str:
        return self.engine_pythons.get(kind, self.engine_python)

    def data_roots(self) -> tuple[str, ...]:
        """Where a recipe's model and trace paths may lie: the model and trace dirs, and both sides of
        the container's mounts (a relative root is under the workflow directory)."""
        roots = [self.placeholders[k] for k in DATA_PLACEHOLDERS if k in self.placeholders]
        for m in self.container_mounts:
            roots += [side.replace("{workdir}", ".") for side in m.split(":")[:2]]
        return tuple(dict.fromkeys(roots))

    def data_path_problem(self, path: str) -> str | None:
        """Why ``path`` (a model or trace) may not be read, or None: it must lie under a data root,
        compared as written (``..`` resolved, no symlink read: rendering touches no file)."""
        if "{" in path and ".." not in PurePosixPath(path).parts:
            return None  # a runtime placeholder (the job's own directories), or an unfilled one (refused apart)
        anchor = PurePosixPath("/__workflow__")
        norm = PurePosixPath(os.path.normpath(anchor / path))
        roots = self.data_roots()
        if any(norm.is_relative_to(PurePosixPath(os.path.normpath(anchor / r))) for r in roots):
            return None
        shown = ", ".join(roots) or "none declared"
        return f"{path} lies under none of cluster {self.name}'s data roots ({shown}: model_dir, trace_dir, mounts)"


def _from_doc(doc: dict, source: str) -> Cluster:
    container = doc.get("container") or {}
    rehearsal = doc.get("rehearsal") or {}
    kwargs = {
        k: doc[k]
        for k in (
            "gpu_type",
            "cpus_per_job",
            "mem_mb_per_node",
            "engine_python",
            "aiperf",
            "hf_home",
            "tokenizer",
            "readiness_timeout_s",
            "runtime_margin_s",
            "port_base",
            "port_block",
            "port_slots",
        )
        if k in doc
    }
    return Cluster(
        name=doc["name"],
        launcher=doc["launcher"],
        nodes=doc["nodes"],
        gpus_per_node=doc["gpus_per_node"],
        source=source,
        container_runtime=container.get("runtime"),
        container_mounts=tuple(container.get("mounts", ())),
        container_base=tuple(container.get("base", ())),
        placeholders={k: str(v) for k, v in (doc.get("placeholders") or {}).items()},
        control_plane=dict(doc.get("control_plane") or {}),
        engine_pythons=dict(doc.get("engine_pythons") or {}),
        cpu_engine=doc.get("cpu_engine"),
        rehearsal_max_duration_s=rehearsal.get("max_duration_s", 20.0),
        rehearsal_max_concurrency=rehearsal.get("max_concurrency", 32),
        doc=doc,
        **kwargs,
    )


def load_cluster_file(path: Path, label: str | None = None) -> Cluster:
    """One cluster's facts, shape-checked; its ``engine_pythons`` keys are the kinds' to check
    (kinds.engine_python_problems, asked by render/loading.load_recipes: the kinds sit above this module)."""
    label = label or str(path)
    doc, problems = load_yaml(path, label)
    if not problems:
        problems = schema_problems(doc, "cluster.schema.yaml", label)
    if problems:
        raise InputError(problems)
    c = _from_doc(doc, label)
    top = c.port_base + c.port_slots * c.port_block
    if top > PORT_LIMIT:
        raise InputError(
            [
                Problem(
                    label,
                    "port_slots",
                    f"port_base + port_slots x port_block reaches {top}: keep every port below {PORT_LIMIT} "
                    "(Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit int; 32768+ are ephemeral ports)",
                )
            ]
        )
    return c


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


@functools.cache
def _load_all(profiles_dir: Path) -> tuple[dict, tuple[Problem, ...]]:
    clusters: dict[str, Cluster] = {}
    problems: list[Problem] = []
    root = profiles_dir.parent
    for path in sorted(profiles_dir.glob("*/cluster.yaml")):
        try:
            c = load_cluster_file(path, _rel(path, root))
        except InputError as e:
            problems += e.problems
            continue
        if c.name in clusters:
            problems.append(
                Problem(c.source, "name", f"cluster {c.name!r} is already defined by {clusters[c.name].source}")
            )
            continue
        clusters[c.name] = c
    return clusters, tuple(problems)


def all_clusters(profiles_dir: Path | None = None) -> dict[str, Cluster]:
    clusters, problems = _load_all(Path(profiles_dir or default_profiles_dir()).resolve())
    if problems:
        raise InputError(list(problems))
    return clusters
