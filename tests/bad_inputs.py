"""The bad-input corpus: each case is a recipe file and what its error must name.

A case is (id, file text or a mutation of a valid recipe, expected field, expected
words of the reason). Kept as code so each mutation stays one readable line.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
AGG = yaml.safe_load((ROOT / "recipes" / "local-agg-2x-mocker.yaml").read_text())
DIS = yaml.safe_load((ROOT / "recipes" / "local-disagg-1p1d-mocker.yaml").read_text())


@dataclass(frozen=True)
class Case:
    id: str
    field: str  # must appear in the message line for this file
    reason: str  # must appear too (case-insensitive)
    mutate: Callable[[dict], object] | None = None
    text: str | None = None
    base: str = "agg"
    file_stem: str | None = None  # when the file name must differ from the case id

    def render(self) -> tuple[str, str]:
        """(file stem, file text)"""
        stem = self.file_stem or self.id
        if self.text is not None:
            return stem, self.text
        doc = copy.deepcopy(AGG if self.base == "agg" else DIS)
        doc["name"] = self.id
        out = self.mutate(doc) if self.mutate else None
        doc = doc if out is None else out
        return stem, yaml.safe_dump(doc, sort_keys=False)


def _set(path: str, value):
    def f(doc):
        node = doc
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
        node[keys[-1]] = value

    return f


def _del(path: str):
    def f(doc):
        node = doc
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        del node[keys[-1]]

    return f


def _rename(path: str, new: str):
    def f(doc):
        node = doc
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        node[new] = node.pop(keys[-1])

    return f


def _args(*extra, where="engine"):
    def f(doc):
        if where == "engine":
            doc["engine"]["args"] = list(doc["engine"].get("args", [])) + list(extra)
        else:
            doc["topology"]["disaggregated"][where]["args"] = list(extra)

    return f


def _vllm(replicas=2, *extra):
    def f(doc):
        doc["engine"] = {"kind": "dynamo.vllm", "args": list(extra)}
        doc["topology"] = {"aggregated": {"replicas": replicas, "tp": 1}}

    return f


def _agentx(then):
    """A valid AgentX scenario (aiperf's lock, a pinned Weka corpus), then one conflicting change."""

    def f(doc):
        scen = doc["scenario"]
        scen["aiperf_scenario"] = "inferencex-agentx-mvp"
        scen["dataset"] = {"public": {"name": "semianalysis_cc_traces_weka_062126"}}
        scen["duration_s"] = 1800
        scen["warmup"] = {"agentic_cache_s": 600, "agentic_grace_s": 1800}
        then(doc)

    return f


def _all(*fs):
    def f(doc):
        for g in fs:
            g(doc)

    return f


CASES = [
    Case("malformed-yaml", "line 2", "malformed yaml", text="name: malformed-yaml\n  clusters: [local\n"),
    Case(
        "duplicate-key",
        "line",
        "duplicate key 'clusters'",
        text="name: duplicate-key\nclusters: [local]\nclusters: [local]\n",
    ),
    Case("top-level-list", "(top level)", "mapping", text="- name: top-level-list\n"),
    Case("empty-file", "(top level)", "mapping", text=""),
    Case("tab-indent", "line", "malformed yaml", text="name: tab-indent\nmodel:\n\tpath: x\n"),
    Case("unknown-top-key", "concurency", "did you mean 'concurrency'", _rename("concurrency", "concurency")),
    Case(
        "misspelled-replicas",
        "topology.aggregated.replcas",
        "did you mean 'replicas'",
        _rename("topology.aggregated.replicas", "replcas"),
    ),
    Case("misspelled-engine-args", "engine.argz", "did you mean 'args'", _rename("engine.args", "argz")),
    Case(
        "misspelled-duration",
        "scenario.duraton_s",
        "did you mean 'duration_s'",
        _rename("scenario.duration_s", "duraton_s"),
    ),
    Case("misspelled-slo", "slo.ttft_p95", "did you mean 'ttft_p95_s'", _rename("slo.ttft_p95_s", "ttft_p95")),
    Case("unknown-key-no-hint", "frontend.banana", "allowed keys", _set("frontend.banana", 1)),
    Case(
        "replicas-wrong-type",
        "topology.aggregated.replicas",
        "is not of type 'integer'",
        _set("topology.aggregated.replicas", "two"),
    ),
    Case("concurrency-string", "concurrency", "is not of type 'array'", _set("concurrency", "16")),
    Case("concurrency-negative", "concurrency[0]", "less than the minimum", _set("concurrency", [-4, 8])),
    Case("concurrency-zero", "concurrency[1]", "less than the minimum", _set("concurrency", [4, 0])),
    Case("concurrency-duplicate", "concurrency", "duplicate concurrency values: [4]", _set("concurrency", [4, 8, 4])),
    Case("concurrency-empty", "concurrency", "should be non-empty", _set("concurrency", [])),
    Case("concurrency-float", "concurrency[0]", "is not of type 'integer'", _set("concurrency", [4.5])),
    Case(
        "eval-unknown-task",
        "evals.mmlu.tasks",
        "mmlu has no task 'algebra'",
        _set("evals", {"mmlu": {"tasks": ["algebra"]}}),
    ),
    Case(
        "eval-tasks-without-tasks",
        "evals.gsm8k.tasks",
        "gsm8k has no tasks",
        _set("evals", {"gsm8k": {"tasks": ["main"]}}),
    ),
    Case("eval-unknown-benchmark", "evals", "is not one of", _set("evals", {"mmlu-pro": {}})),
    Case("capacity-max-below-min", "capacity.max", "max 4 is below min 16", _set("capacity", {"min": 16, "max": 4})),
    Case("capacity-without-slo", "capacity", "needs an slo", _all(_set("capacity", {"min": 2, "max": 8}), _del("slo"))),
    Case(
        "capacity-zero-tolerance",
        "capacity.tolerance",
        "less than the minimum",
        _set("capacity", {"min": 2, "max": 8, "tolerance": 0}),
    ),  # fmt: skip
    Case("capacity-no-max", "capacity.max", "required key is missing", _set("capacity", {"min": 2})),
    Case(
        "capacity-misspelled",
        "capacity.tolerence",
        "did you mean 'tolerance'",
        _set("capacity", {"min": 2, "max": 8, "tolerence": 2}),
    ),  # fmt: skip
    Case("engine-kind-unknown", "engine.kind", "unknown engine kind", _set("engine.kind", "dynamo.tgi")),
    Case("router-mode-unknown", "frontend.router.mode", "is not one of", _set("frontend.router.mode", "fastest")),
    Case("too-many-gpus", "topology", "needs 2 nodes", _set("topology.aggregated", {"replicas": 3, "tp": 4})),
    Case(
        "dp-tp-pp-mismatch",
        "topology.aggregated.gpus",
        "does not equal dp 1 x tp 2 x pp 2 = 4",
        _set("topology.aggregated", {"replicas": 1, "tp": 2, "pp": 2, "gpus": 2}),
    ),
    Case(
        "worker-straddles-node",
        "topology.aggregated",
        "straddle",
        _set("topology.aggregated", {"replicas": 1, "tp": 12}),
    ),
    Case(
        "multi-node-per-worker",
        "topology.aggregated.launch",
        "use launch per_node",
        _set("topology.aggregated", {"replicas": 1, "tp": 16}),
    ),
    Case(
        "sglang-two-replicas",
        "topology.aggregated.replicas",
        "dynamo.sglang supports one replica",
        _set("engine", {"kind": "dynamo.sglang"}),
    ),
    Case(
        "vllm-kv-events-multi",
        "engine.args[0]",
        "one KV-event endpoint on loopback, from the port plan",
        _vllm(2, "--kv-events-config", '{"publisher":"zmq"}'),
    ),
    Case(
        "vllm-kv-events-one-replica",
        "engine.args[0]",
        "--kv-events-config is owned by the launcher",
        _vllm(1, "--kv-events-config", '{"publisher":"zmq","endpoint":"tcp://*:5557"}'),
    ),
    Case("owned-port", "engine.args[6]", "--port is owned by the launcher", _args("--port", 9000)),
    Case("owned-host", "engine.args[6]", "--host is owned by the launcher", _args("--host=0.0.0.0")),
    Case("owned-dp-local", "engine.args[6]", "DP layout", _args("--data-parallel-size-local", 2)),
    Case("owned-dp-start-rank", "engine.args[6]", "DP layout", _args("--data-parallel-start-rank", 0)),
    Case("owned-tp-flag", "engine.args[6]", "set topology tp", _args("--tensor-parallel-size", 2)),
    Case("owned-zmq-ports", "engine.args[6]", "binds every interface", _args("--zmq-kv-events-ports", "5557")),
    Case(
        "owned-frontend-port",
        "frontend.args[0]",
        "--http-port is owned by the launcher",
        _set("frontend.args", ["--http-port", "8000"]),
    ),
    Case(
        "owned-cuda-env",
        "engine.env.CUDA_VISIBLE_DEVICES",
        "set by the launcher",
        _set("engine.env", {"CUDA_VISIBLE_DEVICES": "0"}),
    ),
    Case("owned-system-port-env", "env.DYN_SYSTEM_PORT", "set by the launcher", _set("env.DYN_SYSTEM_PORT", "9090")),
    Case(
        "broken-json-engine",
        "engine.args[7]",
        "--attention-config is not valid json",
        _args("--attention-config", '{"backend": "FLASHINFER",'),
    ),
    Case(
        "broken-json-role",
        "topology.disaggregated.decode.args[1]",
        "--kv-transfer-config is not valid json",
        _args("--kv-transfer-config", "{kv_connector: Nixl}", where="decode"),
        base="dis",
    ),
    Case(
        "unfilled-placeholder",
        "model.path",
        "placeholder {weights_dir} is not filled by cluster 'local'",
        _set("model.path", "{weights_dir}/tiny"),
    ),
    Case("reserved-placeholder", "engine.args[6]", "reserved for the launcher", _args("{port:self.http}")),
    Case("unsafe-name", "name", "does not match the required form", _set("name", "Bad Name!"), file_stem="unsafe-name"),
    Case("name-dotdot", "name", "does not match the required form", _set("name", "a..b"), file_stem="name-dotdot"),
    Case("name-slash", "name", "does not match the required form", _set("name", "../etc/x"), file_stem="name-slash"),
    Case("name-mismatch", "name", "must match the file name 'name-mismatch-file'", file_stem="name-mismatch-file"),
    Case("unknown-cluster", "clusters[0]", "unknown cluster 'hgx99'", _set("clusters", ["hgx99"])),
    Case("flag-and-value-in-one-item", "engine.args[6]", "two items", _args("--max-num-seqs 8")),
    Case("duration-and-requests", "scenario", "not both", _set("scenario.requests", 100)),
    Case("no-duration-no-requests", "scenario.duration_s", "give duration_s or requests", _del("scenario.duration_s")),
    Case(
        "both-topologies",
        "topology",
        "exactly one",
        _set("topology.disaggregated", {"prefill": {"workers": 1}, "decode": {"workers": 1}}),
    ),
    Case("empty-topology", "topology", "must not be empty", _set("topology", {})),
    Case(
        "per-gpu-with-tp",
        "topology.disaggregated.decode.launch",
        "per_gpu launch needs tp = pp = 1",
        _set("topology.disaggregated.decode", {"workers": 1, "tp": 2, "launch": "per_gpu"}),
        base="dis",
    ),
    Case(
        "plain-vllm-disagg",
        "topology.disaggregated",
        "plain vllm has no disaggregated serving",
        _set("engine", {"kind": "vllm"}),
        base="dis",
    ),
    Case("plain-sglang-frontend", "frontend", "without the Dynamo frontend", _set("engine", {"kind": "sglang"})),
    Case(
        "sglang-owned-tp",
        "engine.args[0]",
        "set topology tp",
        lambda d: d.pop("frontend") and d.update(engine={"kind": "sglang", "args": ["--tp-size", 2]}),
    ),
    Case(
        "trtllm-topology-dp",
        "topology.aggregated.dp",
        "--enable-attention-dp",
        lambda d: d["engine"].update(kind="dynamo.trtllm", args=[]) or d["topology"]["aggregated"].update(dp=2),
    ),
    Case(
        "trtllm-owned-flag",
        "engine.args[0]",
        "--disaggregation-mode is owned by the launcher",
        _set("engine", {"kind": "dynamo.trtllm", "args": ["--disaggregation-mode", "prefill"]}),
    ),
    Case("missing-model", "model", "required key is missing", _del("model")),
    Case("bad-env-name", "env", "does not match", _set("env", {"1BAD": "x"})),
    Case(
        "session-header-spaces",
        "scenario.session_header",
        "does not match the required form",
        _set("scenario.session_header", "x session"),
    ),
    Case(
        "error-rate-over-one", "validity.max_error_rate", "greater than the maximum", _set("validity.max_error_rate", 2)
    ),
    Case(
        "two-dataset-kinds", "scenario.dataset", "exactly one", _set("scenario.dataset.synthetic", {"isl": 1, "osl": 1})
    ),
    Case("secret-wrong-shape", "env.HF_TOKEN", "", _set("env.HF_TOKEN", {"from": "HF_TOKEN"})),
    Case("shell-string-in-args", "engine.args[6]", "two items", _args("--foo bar; rm -rf /")),
    Case("stack-reuse-not-bool", "stack.reuse", "is not of type 'boolean'", _set("stack.reuse", "no")),
    Case("zero-frontends", "frontend.count", "less than the minimum", _set("frontend.count", 0)),
    Case("unknown-discovery", "control_plane.discovery", "is not one of", _set("control_plane.discovery", "consul")),
    Case("user-hybrid-lb", "engine.args[6]", "owned by the launcher", _args("--data-parallel-hybrid-lb")),
    Case("plain-vllm-frontend", "frontend", "without the Dynamo frontend", _set("engine", {"kind": "vllm"})),
    Case("user-etcd-endpoints", "env.ETCD_ENDPOINTS", "set by the launcher", _set("env.ETCD_ENDPOINTS", "http://x:1")),
    Case("literal-secret", "env.HF_TOKEN", "looks like a credential", _set("env.HF_TOKEN", "hf_abcdef123456")),
    Case(
        "literal-api-key",
        "engine.env.WANDB_API_KEY",
        "from_env: WANDB_API_KEY",
        _set("engine.env", {"WANDB_API_KEY": "x"}),
    ),
    Case(
        "reset-without-effect", "stack.reset_prefix_cache", "does nothing", _set("stack", {"reset_prefix_cache": True})
    ),
    Case("linger-negative", "stack.linger_s", "minimum", _set("stack", {"linger_s": -5})),
    Case("linger-text", "stack.linger_s", "not of type", _set("stack", {"linger_s": "forever"})),
    Case(
        "linger-without-reuse",
        "stack.linger_s",
        "no stack outlives its point",
        _set("stack", {"reuse": False, "linger_s": 60}),
    ),
    Case("image-on-local", "image", "has no container runtime", _set("image", "vllm/vllm-openai:v0.32.0")),
    Case("kv-store-unused", "kv_store", "it would do nothing", _set("kv_store", {"protocol": "tcp"})),
    Case("engine-version-on-mocker", "engine.version", "no engine package of its own", _set("engine.version", "1.0")),
    Case(
        "commit-pin-install",
        "dynamo.install",
        "build it into the image",
        _set("dynamo", {"git": "a" * 40, "install": True}),
    ),
    Case("two-dynamo-pins", "dynamo", "is valid under each of", _set("dynamo", {"git": "a" * 40, "version": "1.6.1"})),
    Case("dynamo-pin-bad-version", "dynamo.version", "does not match", _set("dynamo", {"version": "latest"})),
    Case(
        "abbreviated-owned-frontend-flag",
        "frontend.args[0]",
        "--http-h abbreviates --http-host",
        _set("frontend.args", ["--http-h", "0.0.0.0"]),
    ),
    Case(
        "abbreviated-owned-engine-flag",
        "engine.args[6]",
        "--data-parallel-addr abbreviates",
        _args("--data-parallel-addr", "10.0.0.1"),
    ),
    # each setting in the process that reads it; benchmarks as aiperf locks them (issue #37)
    Case(
        "router-env-on-workers",
        "engine.env.DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS",
        "read by the KV router in dynamo.frontend, never by a worker",
        _set("engine.env", {"DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS": "3600"}),
    ),
    Case(
        "router-env-on-decode",
        "topology.disaggregated.decode.env.DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS",
        "move it to frontend.env",
        _set("topology.disaggregated.decode.env", {"DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS": "3600"}),
        base="dis",
    ),
    Case(
        "system-env-on-frontend",
        "frontend.env.DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS",
        "set by the launcher per process",
        _set("frontend.env", {"DYN_SYSTEM_USE_ENDPOINT_HEALTH_STATUS": '["generate"]'}),
    ),
    Case(
        "agentx-on-a-local-trace",
        "scenario.dataset",
        "a Weka corpus aiperf can verify",
        _all(_set("scenario.aiperf_scenario", "inferencex-agentx-mvp"), _set("scenario.duration_s", 900)),
    ),
    Case("agentx-too-short", "scenario.duration_s", "runs at least 900 s", _agentx(_set("scenario.duration_s", 600))),
    Case(
        "agentx-request-warmup",
        "scenario.warmup.requests",
        "warms up by agentic replay",
        _agentx(_set("scenario.warmup", {"requests": 8})),
    ),
    Case("agentx-request-count", "scenario.requests", "runs for a duration", _agentx(_set("scenario.requests", 99))),
    Case(
        "agentx-completions",
        "scenario.endpoint",
        "replays conversations",
        _agentx(_set("scenario.endpoint", "completions")),
    ),
    Case(
        "agentic-warmup-on-mooncake",
        "scenario.warmup.agentic_cache_s",
        "agentic replay of a Weka trace only",
        _set("scenario.warmup", {"agentic_cache_s": 10}),
    ),
    Case(
        "warmup-requests-and-duration",
        "scenario.warmup",
        "not both",
        _set("scenario.warmup", {"requests": 4, "duration_s": 5}),
    ),
    # hostile input that must not crash a run (issue #40)
    Case("binary-tag", "line 2", "!!binary is not allowed", text="name: binary-tag\nclusters: !!binary aGVsbG8=\n"),
    Case("set-tag", "line 2", "!!set is not allowed", text="name: set-tag\nclusters: !!set {local: null}\n"),
    Case("env-nul", "env.X", "holds a NUL byte", _set("env", {"X": "a\x00b"})),
    Case("env-huge", "env.X", "the value is 40000 bytes; at most 32768", _set("env", {"X": "x" * 40000})),
    Case("env-name-equals", "env", "does not match", _set("env", {"A=B": "1"})),
    Case("name-plots", "name", "the workflow uses for its own outputs", _set("name", "plots"), file_stem="plots"),
    Case(
        "name-summary",
        "name",
        "the workflow uses for its own outputs",
        _set("name", "summary.md"),
        file_stem="summary.md",
    ),
    # hostile or unlucky input: floats and dates for integers, infinities, absurd counts, deep nesting, alias bombs
    Case("float-replicas", "topology.aggregated.replicas", "whole number", _set("topology.aggregated.replicas", 2.0)),
    Case("float-tp", "topology.aggregated.tp", "whole number", _set("topology.aggregated.tp", 2.0)),
    Case("float-concurrency", "concurrency[0]", "whole number", _set("concurrency", [96.0])),
    Case("huge-concurrency", "concurrency[0]", "greater than the maximum", _set("concurrency", [10**30])),
    Case("infinite-duration", "scenario.duration_s", ".inf/.nan", _set("scenario.duration_s", float("inf"))),
    Case("nan-slo", "slo.ttft_p95_s", ".inf/.nan", _set("slo.ttft_p95_s", float("nan"))),
    Case(
        "date-duration",
        "scenario.duration_s",
        "is not of type 'number'",
        text=yaml.safe_dump({**AGG, "name": "date-duration"}, sort_keys=False).replace(
            "duration_s: 20", "duration_s: 2026-01-01"
        ),
    ),
    Case(
        "trace-outside-data",
        "scenario.dataset.trace.path",
        "none of cluster local's data roots",
        _set("scenario.dataset.trace.path", "/etc/shadow"),
    ),
    Case(
        "trace-climbs-out",
        "scenario.dataset.trace.path",
        "none of cluster local's data roots",
        _set("scenario.dataset.trace.path", "{trace_dir}/../../etc/passwd"),
    ),
    Case("too-many-points", "concurrency", "is too long", _set("concurrency", list(range(1, 10_001)))),
    Case("model-outside-data", "model.path", "none of cluster local's data roots", _set("model.path", "/root")),
    Case("deep-nesting", "(structure)", "nested deeper than", text="name: " + "[" * 1000 + "]" * 1000 + "\n"),
    Case("very-deep-nesting", "(structure)", "nested deeper than", text="name: " + "[" * 30000 + "]" * 30000 + "\n"),
    Case(
        "alias-bomb",
        "(structure)",
        "aliases are expanded",
        text="a0: &a0 [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
    ),
]


def _written(case_id: str, old: str, new: str) -> str:
    """The valid recipe's text with one value written as YAML 1.1 would read differently."""
    text = yaml.safe_dump({**AGG, "name": case_id}, sort_keys=False, width=1000)
    assert old in text, old
    return text.replace(old, new, 1)


def _aliased(case_id: str, field: str, value: str, times: int) -> str:
    """A recipe whose ``field`` list repeats one anchored string ``times`` times."""
    return f"name: {case_id}\nbig: &s {value}\n{field}: [{', '.join(['*s'] * times)}]\n"


# held-out kinds of issue #51: each refused at load, naming file + field + reason, nothing rendered
SAFE_CHECK_CASES = [
    Case("python-names-a-program", "engine.python", "not a python cluster 'local' declares",
         _set("engine.python", "./make-marker.sh")),
    Case("yaml11-octal", "concurrency[0]", "is not of type 'integer'",
         text=_written("yaml11-octal", "- 4\n", "- 010\n")),
    Case("yaml11-hex", "concurrency[0]", "is not of type 'integer'", text=_written("yaml11-hex", "- 4\n", "- 0x1F\n")),
    Case("yaml11-sexagesimal", "scenario.duration_s", "is not of type 'number'",
         text=_written("yaml11-sexagesimal", "duration_s: 20", "duration_s: 1:30")),
    Case("yaml11-off", "frontend.router.session_affinity.mode", "is not one of",
         text=_written("yaml11-off", "mode: hard", "mode: off")),
    Case("yaml11-yes-boolean", "stack.reuse", "is not of type 'boolean'", _set("stack.reuse", "yes")),
    Case("int-key", "line 2", "a mapping key must be text", text="name: int-key\nenv: {123: x}\n"),
    Case("null-key", "line 2", "a mapping key must be text", text="name: null-key\nenv: {~: x}\n"),
    Case("complex-key", "line 3", "a mapping key must be text", text="name: complex-key\nenv:\n  ? [a, b]\n  : x\n"),
    Case("recursive-alias", "(structure)", "recursive alias", text="name: recursive-alias\nclusters: &d [*d]\n"),
    Case("alias-amplified", "(structure)", "characters of values once aliases are expanded",
         text=_aliased("alias-amplified", "concurrency", "x" * 60_000, 40)),
    Case("env-total", "env", "total 150", _set("env", {f"V{i}": "x" * 30_000 for i in range(5)})),
    Case("launcher-rpc-port", "env.DYN_TCP_RPC_PORT", "set by the launcher", _set("env", {"DYN_TCP_RPC_PORT": "1"})),
    Case("launcher-response-plane", "engine.env.DYN_RESPONSE_PLANE", "set by the launcher",
         _set("engine.env", {"DYN_RESPONSE_PLANE": "nats"})),
    Case("launcher-cache-home", "env.XDG_CACHE_HOME", "set by the launcher", _set("env", {"XDG_CACHE_HOME": "/tmp"})),
    Case("name-selection-file", "name", "selection-*.json", _set("name", "selection-local.json"),
         file_stem="selection-local.json"),
    Case("name-missing-file", "name", "missing-*.json", _set("name", "missing-local.json"),
         file_stem="missing-local.json"),
    Case("data-root-brace", "scenario.dataset.trace.path", "{EVIL} is not a data directory",
         _set("scenario.dataset.trace.path", "/elsewhere/{EVIL}/t.jsonl")),
    Case("forged-line", "bogus\\nservesweep: 0 problems found\\x1b[2J", "unknown key",
         _set("bogus\nservesweep: 0 problems found\x1b[2J", 1)),
    Case("grace-1e300", "scenario.grace_s", "greater than the maximum", _set("scenario.grace_s", 1e300)),
    Case("readiness-1e300", "readiness.timeout_s", "greater than the maximum", _set("readiness.timeout_s", 1e300)),
    Case("duration-1e-300", "scenario.duration_s", "less than the minimum of 1", _set("scenario.duration_s", 1e-300)),
]  # fmt: skip
CASES += SAFE_CHECK_CASES


def write_cases(recipes_dir: Path) -> dict[str, Case]:
    """Write every case; return file label -> case."""
    out = {}
    for c in CASES:
        stem, text = c.render()
        path = recipes_dir / f"{stem}.yaml"
        path.write_text(text)
        out[f"recipes/{path.name}"] = c
    return out
