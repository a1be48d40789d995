"""run-profile: an engine profile as a target, ``results/<recipe>/profile-c<conc>/``. It runs as a
check does (run/check_turn): a turn on the recipe's warm or held stack, whose engines started with
the profiler idle (render/profiling, ``stack: shared``), or on a stack of its own (``stack: own``).
The profiler is started through the engine's own endpoint on each profiled process, a short load of
its own runs for the window (or until the engine has recorded its steps), the profiler is stopped,
and the trace files this capture wrote (a shared stack may hold an earlier one's) are copied into
the target with a small index (``index.json``). A turn is the stack's alone, so no point's window
overlaps the capture, and no figure of this load is a point's."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..contract import paths
from ..contract.plan import Plan
from ..fileio.encode import digest
from . import check_turn
from .ready import PointFailed

SCHEMA = "servesweep.profile/1"
SETTINGS_SCHEMA = "servesweep.profile-settings/1"  # render/profiling writes it
STEPS_DEADLINE_S = 120.0  # a load that has not let the engine record its steps by then fails the profile
TRACE_DEADLINE_S = 300.0  # the stop answers once the engine wrote its traces (a large one takes a while)
REQUEST_TIMEOUT_S = 60.0
MAX_TOKENS = 32
PROMPT = "Profile this engine: count from one to fifty, one number per line."


def read_settings(path: Path) -> dict:
    """The profile's settings as render wrote them (paths.PROFILE_SETTINGS); ValueError if not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not readable as JSON ({e})") from None
    ok = isinstance(doc, dict) and doc.get("schema") == SETTINGS_SCHEMA and isinstance(doc.get("processes"), list)
    if not ok or not any(p.get("start") for p in doc["processes"]):
        raise ValueError(f"{path}: not a profile settings file with a process to profile ({SETTINGS_SCHEMA})")
    return doc


class Load:
    """``concurrency`` clients sending chat requests back to back until stopped: the profile's own load."""

    def __init__(self, client: str, model: str, concurrency: int):
        body = {"model": model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS}
        self.request = json.dumps(body | {"temperature": 0}).encode()
        self.url, self.done = f"{client}/v1/chat/completions", threading.Event()
        self.sent = self.ok = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(concurrency)]

    def _client(self) -> None:
        while not self.done.is_set():
            req = urllib.request.Request(self.url, self.request, {"content-type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                    r.read()
                    good = 200 <= r.status < 300
            except (urllib.error.URLError, OSError, TimeoutError):
                good = False
                self.done.wait(0.2)  # a refusing server is not hammered
            with self._lock:
                self.sent, self.ok = self.sent + 1, self.ok + good

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.done.set()
        end = time.monotonic() + REQUEST_TIMEOUT_S  # one deadline for all: a hung request is left behind
        for t in self.threads:
            t.join(max(end - time.monotonic(), 0))


def http_post(url: str, body: dict, timeout: float) -> tuple[int, str]:
    """(status, answer text); the profiler endpoints answer with an empty body (0: no answer)."""
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        return 0, str(e)


def _post(ctx, proc: dict, which: str, tolerate=None) -> None:
    """POST the profiler's start or stop on one process; PointFailed on a refusal (``tolerate``: say it)."""
    url = ctx.resolve(proc[which], proc["name"])
    body = json.loads(ctx.resolve(json.dumps(proc["body"]), proc["name"])) if which == "start" else {}
    code, answer = http_post(url, body, REQUEST_TIMEOUT_S if which == "start" else TRACE_DEADLINE_S)
    if code != 200:
        why = f"profile: {which} on {proc['name']}: HTTP {code} from {url}: {str(answer)[:200]}"
        if tolerate is None:
            raise PointFailed(why)
        tolerate(why)


def trace_files(ctx, proc: dict, earlier: frozenset = frozenset()) -> list[Path]:
    """The process's trace files, less those there before this capture started (``earlier``)."""
    folder = Path(ctx.resolve(proc["traces"], proc["name"]))
    found = {f for pattern in proc["files"] for f in folder.rglob(pattern)} if folder.is_dir() else ()
    return sorted(p for p in found if p.is_file() and p not in earlier)


def _settled(ctx, procs: list[dict], earlier: frozenset) -> dict[str, list[Path]] | None:
    """Each profiled process's trace files once every one has some and none grew since the last look."""
    found = {p["name"]: trace_files(ctx, p, earlier) for p in procs}
    return found if all(found.values()) else None


def wait_for_traces(ctx, procs: list[dict], deadline_s: float, stack=None, earlier=frozenset()) -> dict:
    """Poll until every process's new traces are there and their sizes hold still; PointFailed past the deadline."""
    end, last = time.monotonic() + deadline_s, None
    while time.monotonic() < end:
        if stack is not None:
            stack.check("mid-profile")
        found = _settled(ctx, procs, earlier)
        sizes = found and {n: [f.stat().st_size for f in fs] for n, fs in found.items()}
        if sizes and sizes == last:
            return found
        last = sizes
        time.sleep(0.5)
    missing = [p["name"] for p in procs if not trace_files(ctx, p, earlier)]
    raise PointFailed(f"profile: no settled trace files within {deadline_s:.0f} s (none from {missing or 'nobody'})")


def _capture(plan: Plan, stack, settings: dict, say) -> tuple[dict, dict]:
    """(load figures, trace files per process): start, load, stop, traces."""
    ctx, procs = stack.info.context(plan), settings["processes"]
    targets = [p for p in procs if p["start"]]
    client = ctx.resolve(plan.client_url, "")
    earlier = frozenset(f for p in procs for f in trace_files(ctx, p))  # a shared stack's earlier captures
    for p in targets:
        _post(ctx, p, "start")
    say(f"profile: {settings['kind']} profiler started on {', '.join(p['name'] for p in targets)}")
    started, since = time.monotonic(), time.time()
    with Load(client, plan.model["name"], settings["concurrency"]) as load:
        if settings["steps"]:  # the engine stops its profiler itself after its steps
            wait_for_traces(ctx, targets, STEPS_DEADLINE_S, stack, earlier)
        else:
            while time.monotonic() - started < settings["window_s"]:
                stack.check("mid-profile")
                load.done.wait(0.2)
    seconds = round(time.monotonic() - started, 3)
    for p in targets:  # after its steps the engine has stopped itself: a refusal then is only said
        _post(ctx, p, "stop", say if settings["steps"] else None)
    say(f"profile: {load.ok} of {load.sent} requests answered in {seconds} s; waiting for the traces")
    found = wait_for_traces(ctx, procs, TRACE_DEADLINE_S, earlier=earlier)
    window = {"start": round(since, 3), "end": round(since + seconds, 3)}
    return {"seconds": seconds, "requests": load.sent, "answered": load.ok, "window": window}, found


def _publish(found: dict[str, list[Path]], ctx, settings: dict, out_dir: Path) -> list[dict]:
    """The traces copied into a fresh folder, renamed into place whole: the target never half exists."""
    partial = out_dir.with_name(f".{out_dir.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    rows = []
    for p in settings["processes"]:
        base, files = Path(ctx.resolve(p["traces"], p["name"])), []
        for f in found.get(p["name"], []):
            rel = Path(p["role"]) / p["name"] / f.relative_to(base)
            (partial / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, partial / rel)
            files.append({"path": str(rel), "bytes": f.stat().st_size})
        rows.append({"role": p["role"], "process": p["name"], "files": files})
    if out_dir.exists():
        shutil.rmtree(out_dir)
    partial.rename(out_dir)
    return rows


def run_profile(plan_path: Path, settings_path: Path, out_dir: Path, join: Path | None = None) -> int:
    try:
        settings = read_settings(settings_path)
    except ValueError as e:
        print(f"servesweep: {e}")
        return 2
    out_dir = Path(out_dir)

    def measure(plan: Plan, stack, run_dir: Path, say) -> dict:
        load, found = _capture(plan, stack, settings, say)
        rows = _publish(found, stack.info.context(plan), settings, out_dir)
        ident = check_turn.identity(plan, stack) | {"settings": digest(Path(settings_path).read_text())}
        window = {k: settings[k] for k in ("kind", "window_s", "steps", "concurrency", "roles")}
        window["stack"] = settings.get("stack", "own")
        return {"schema": SCHEMA, "identity": ident, "profile": window, "load": load, "processes": rows}

    check = f"profile-c{settings['concurrency']}"
    return check_turn.take_turn(plan_path, out_dir / paths.PROFILE_INDEX, check, "profile.schema.yaml", measure, join)
