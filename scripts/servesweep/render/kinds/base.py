"""The one interface every engine kind implements (a module per kind in this folder)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engines import EngineInput, ProcessSpec

# (field, reason) pairs: the recipe module turns them into problems naming the recipe's file
Findings = list[tuple[str, str]]


@dataclass(frozen=True)
class ArgParser:
    """How the engine's own parser checks rendered arguments, inside the engine's Python
    (``tools/argcheck`` knows the styles; the kind names the style, its target and the package
    whose version labels the answer)."""

    style: str  # vllm_serve | sglang_server_args | parse_args (module's parse_args(argv)) | dynamo_frontend
    target: str = ""  # the module, for parse_args
    dist: str = ""

    def to_json(self) -> dict:
        return {"style": self.style, "target": self.target, "dist": self.dist}


@dataclass(frozen=True)
class PrefixReset:
    """An engine's prefix-cache reset between the points of a warm stack: an HTTP POST on one of
    the process's ports, available only when the recipe opts in (``stack.reset_prefix_cache``)."""

    path: str
    port: str
    opt_in: str  # what opting in turns on, for the recipe's description and messages


# (capture kind: torch | nsys, the trace folder, engine steps or None) -> (argv, env) a process needs
Enable = Callable[[str, str, int | None], tuple[list[str], dict]]


@dataclass(frozen=True)
class Profiler:
    """An engine's own profiler (render/profiling): what a profiled process needs at start, and the
    HTTP POSTs on one of its ports that start and stop it (body: what the start request sends)."""

    start: str
    stop: str
    port: str
    enable: Enable
    start_body: Callable[[str, str, int | None], dict] = lambda *_: {}
    steps_at_start: bool = True  # a step count is part of the start-up config (else of the start body)


def _none(*_args) -> Findings:
    return []


def _no_shared_ports(kv_router: bool, disagg: bool, multi_process_dp: bool) -> tuple[bool, bool, bool]:
    return False, False, False


@dataclass(frozen=True)
class EngineKind:
    """Everything kind-specific: core code asks the kind and never compares its name."""

    name: str
    process: Callable[[EngineInput], ProcessSpec]  # argv, env, ports, health, registrations of one process
    dynamo: bool  # under Dynamo's runtime: control plane, frontend + router, ai-dynamo versions
    distributions: tuple[str, ...]  # packages carrying the engine's version (the first installed counts)
    metrics: Mapping  # the run side's metric names (plan ``server_metrics``)
    parser: ArgParser | None = None
    # (KV-event block, NIXL block, DP RPC port) one logical worker's processes share
    shared_ports: Callable[[bool, bool, bool], tuple[bool, bool, bool]] = _no_shared_ports
    owned_flags: Mapping[str, str] = field(default_factory=dict)  # beyond the launcher's common ones
    owned_env: frozenset[str] = frozenset()
    per_gpu: bool = False  # one process per GPU (a DP rank each)
    kv_events_per_replica: bool = False  # the launcher gives each replica its own KV-event endpoint
    prefix_reset: PrefixReset | None = None
    profiler: Profiler | None = None  # a recipe's profile section needs one (render/profiling)
    problems: Callable[..., Findings] = _none  # (recipe): kind-specific recipe checks
    placement_problems: Callable[..., Findings] = _none  # (placed slots, cluster name)
    rehearsal: str = "dynamo.mocker"  # the kind that stands in for it on a laptop
    # engine flag -> the stand-in's flag that models it: a rehearsal keeps these (scheduler limits the
    # mocker simulates), renamed, and drops every other engine argument
    rehearsal_flags: Mapping[str, str] = field(default_factory=dict)

    def server_metrics(self) -> dict:
        """The plan's ``server_metrics``: the kind's metric names and the packages whose running
        versions the result records as the engine's."""
        return {
            "spec_decode": None,  # a kind whose engine exports speculative-decoding counters names them
            **self.metrics,
            "distributions": ["ai-dynamo"] if self.dynamo else list(self.distributions),
        }
