"""A running stack against another user of the same host, as another job would try: the stack's
etcd and NATS refuse anyone without the stack's credential (every etcd API, its peer port, NATS's
client port; NATS has no monitor port), the credential is in no argv, log or plan, and its files are
owner-only; the point itself still runs (every Dynamo process authenticated)."""

from __future__ import annotations

import json
import re
import socket
import ssl
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from servesweep.render import listeners

from helpers import ROOT, copy_workflow, descendants, no_processes_left, running_point, wait_for_text, write_recipe

pytestmark = pytest.mark.integration


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def _nats_answer(port: int) -> str:
    """What NATS says to a client that connects without credentials."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.recv(4096)  # INFO
        s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
        return s.recv(4096).decode(errors="replace")


def _refused(url: str, body: dict | None = None, tls: ssl.SSLContext | None = None) -> str | None:
    """None if the call is refused (no TLS session, or no 2xx answer); else what answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=5, context=tls) as r:
            return f"{r.status}: {r.read(300)!r}"
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        return None


def _no_client_cert() -> ssl.SSLContext:
    """A client that trusts any server and presents no certificate, as a stranger on the host would."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    return ctx


def _foreign_cert(tmp: Path) -> ssl.SSLContext:
    """A client with a certificate of its own, signed by no CA of the stack."""
    key, cert = tmp / "foreign.key", tmp / "foreign.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=foreign"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    ctx = _no_client_cert()
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


ETCD_PROBES = [  # what the audit reached without credentials under user/password auth
    ("v3/lease/grant", {"TTL": 60}), ("v3/lease/leases", {}), ("v3/lease/timetolive", {"ID": 1, "keys": True}),
    ("v3/maintenance/status", {}), ("v3/cluster/member/list", {}), ("metrics", None), ("health", None),
    ("v3/kv/range", {"key": "djEv", "range_end": "djEw"}), ("v3/kv/put", {"key": "djEvZm9yZWlnbg==", "value": "e30="}),
]  # fmt: skip


def test_another_job_cannot_touch_the_stacks_control_plane(tmp_path, reliability):
    """The audit, repeated with no credentials: etcd's lease, maintenance, member and key APIs, its
    /metrics and peer port; NATS's client port (and no monitor port). Each is refused; every port a
    stack process listens on is in the port table and on loopback (with the NATS event plane: no
    session publisher), and the workers' admin routes are refused through the guard."""
    reliability("security", "etcd and NATS refuse a client without the stack's credential")
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    base = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    planes = {"discovery": "etcd", "event_plane": "nats"}
    name = write_recipe(wf, base, "locked", duration=12, mutate=lambda d: d.update(control_plane=planes))
    with no_processes_left(wf), running_point(wf, name) as p:
        wait_for_text(wf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        procs = {k: k.cmdline() for k in descendants(p.pid)}
        etcd = next(c for c in procs.values() if c and c[0].endswith("etcd"))
        nats_proc, nats = next((k, c) for k, c in procs.items() if c and "nats-server" in c[0])
        client, peer = _flag(etcd, "--listen-client-urls"), _flag(etcd, "--listen-peer-urls")
        assert client.startswith("https://") and peer.startswith("https://127.0.0.1:"), (client, peer)
        for tls in (_no_client_cert(), _foreign_cert(tmp_path), None):
            for path, body in ETCD_PROBES:
                answer = _refused(f"{client.replace('https:', 'http:') if tls is None else client}/{path}", body, tls)
                assert answer is None, (path, answer)
            for path in ("members", "version"):
                assert _refused(f"{peer}/{path}", tls=tls or _no_client_cert()) is None, path
        assert "Authorization Violation" in _nats_answer(int(_flag(nats, "-p")))
        assert _listening(nats_proc) == {int(_flag(nats, "-p"))}  # no monitor port
        assert _audit_listeners(procs, "nats") == []  # no frontend port on every interface
        _assert_loopback_only(procs)
        _guard_refuses_admin_routes(procs)
        run_dir = wf / f"logs/{name}/c2"
        creds = json.loads((run_dir / "credentials.json").read_text())
        for f in ("credentials.json", "nats-auth.conf", "tls/node.key"):
            assert stat.S_IMODE((run_dir / f).stat().st_mode) == 0o600, f
        assert not (run_dir / "tls/ca.key").exists()  # no other certificate can be signed for this stack
        for cmd in procs.values():  # never on a command line
            assert not any(v in " ".join(cmd) for v in creds.values()), cmd
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]  # every Dynamo process reached both with the stack's credential
    assert "control plane healthy: etcd, nats" in err
    for f in [*wf.glob("logs/**/*.log"), *wf.glob("results/**/*.json"), *wf.glob("*.plan.json")]:
        assert not any(v in f.read_text(errors="replace") for v in creds.values()), f


def _listening(proc) -> set[int]:
    import psutil

    return {c.laddr.port for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def _audit_listeners(procs: dict, event_plane: str) -> list[int]:
    """Every listener of every stack process (what `ss -ltnp` lists for their pids) is a row of
    docs/security.md's port table (render/listeners, the table's one home); returns the frontend's
    ports on every interface."""
    import psutil

    problems, wild = [], []
    for proc, cmd in procs.items():
        try:
            found = [(c.laddr.ip, c.laddr.port) for c in proc.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            continue
        problems += listeners.unlisted(cmd, found, event_plane, "127.0.0.1")
        if listeners.program(cmd) == "dynamo.frontend":
            wild += [port for ip, port in found if ip in ("0.0.0.0", "::")]
    assert not problems, problems
    return wild


SUBSCRIBE = """
import sys, time, zmq
s = zmq.Context().socket(zmq.SUB)
s.setsockopt(zmq.SUBSCRIBE, b"session_affinity_events")
s.setsockopt(zmq.RCVTIMEO, 1000)
s.connect(f"tcp://127.0.0.1:{sys.argv[1]}")
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        parts = s.recv_multipart()
    except zmq.Again:
        continue
    if b"session_id" in parts[-1]:
        sys.stdout.write(repr(parts[-1]))
        break
"""


def _a_stranger_reads_session_ids(wf: Path, port: int) -> str:
    """What a ZMQ subscriber with no credential reads on the frontend's publisher (the engine venv's pyzmq)."""
    python = wf / ".venvs/engine/bin/python"
    r = subprocess.run([str(python), "-c", SUBSCRIBE, str(port)], capture_output=True, text=True, timeout=60)
    return r.stdout


def _assert_loopback_only(procs) -> None:
    """`ss -ltn` for the stack's processes: with the NATS event plane (no ZMQ event-plane ports, which
    Dynamo 1.6.1 binds on every interface: docs/security.md) every listener is on loopback."""
    import psutil

    for proc, cmd in procs.items():
        try:
            conns = proc.net_connections("tcp")
        except psutil.NoSuchProcess:
            continue
        for c in conns:
            if c.status == psutil.CONN_LISTEN:
                assert c.laddr.ip in ("127.0.0.1", "::1"), (" ".join(cmd)[:120], c.laddr)


def _guard_refuses_admin_routes(procs) -> None:
    """A worker's system port, as anyone reaches it: through the node's guard, read-only."""
    guard = next(k for k in procs if any("sysguard.py" in a for a in procs[k]))
    for port in _listening(guard):
        assert _http(port, "/engine/control/sleep", "POST")[0] == 403


def _chat(port: int) -> None:
    body = {"model": "tiny-llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()


def _free_port() -> int:
    """A free port below 32768 (Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit int)."""
    import random

    for port in random.sample(range(29000, 32000), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise AssertionError("no free port below 32768")


def _invalid_point(tmp_path, name: str, intrude) -> str:
    """Run one mocker point; ``intrude(procs)`` acts mid-benchmark; return the driver's stderr."""
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    base = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    write_recipe(wf, base, name, duration=20)  # long enough for an intruder to start under load
    with no_processes_left(wf), running_point(wf, name) as p:
        wait_for_text(wf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        stop = intrude({k: (k.cmdline(), k) for k in descendants(p.pid)}, wf)
        try:
            _, err = p.communicate(timeout=180)
        finally:
            stop()
    assert p.returncode == 1 and not (wf / f"results/{name}/c2.json").exists(), err[-3000:]
    return err


def test_foreign_requests_mid_benchmark_invalidate_the_point(tmp_path, reliability):
    reliability("security", "foreign requests mid-benchmark")

    def intrude(procs, wf):
        fe = next(c for c, _ in procs.values() if "dynamo.frontend" in " ".join(c))
        for _ in range(20):
            _chat(int(_flag(fe, "--http-port")))
        return lambda: None

    err = _invalid_point(tmp_path, "intruded", intrude)
    assert "foreign traffic: the stack served" in err and "aiperf sent" in err


def test_a_foreign_worker_registering_mid_benchmark_invalidates_the_point(tmp_path, reliability):
    reliability("security", "foreign registration mid-benchmark")
    import subprocess

    def intrude(procs, wf):
        cmd, proc = next((c, k) for c, k in procs.values() if "dynamo.mocker" in " ".join(c))
        cmd = list(cmd)
        env = dict(proc.environ(), DYN_SYSTEM_PORT=str(_free_port()))
        log = open(wf / "rogue.log", "w")  # noqa: SIM115 - closed in stop()
        rogue = subprocess.Popen(cmd, cwd=wf, env=env, stdout=log, stderr=log, start_new_session=True)

        def stop():
            rogue.kill()
            rogue.wait(timeout=30)
            log.close()

        return stop

    err = _invalid_point(tmp_path, "joined", intrude)
    # seen while aiperf runs (the registration watch), not only at its end; named by aiperf's phase
    seen = r"frontend sees registrations \{'backend': [3-9]\} (mid-benchmark|during aiperf's)"
    assert re.search(seen, err), err[-2000:]
    assert "or a foreign worker joined" in err


def _tls_answer(port: int, ca: str, cert: tuple[str, str] | None) -> str:
    """What a TLS client gets from 127.0.0.1:port: "ok" (spoken to), or the TLS error."""
    import ssl

    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    if cert:
        ctx.load_cert_chain(*cert)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, ctx.wrap_socket(raw) as s:
            s.sendall(b"\0" * 16)
            s.settimeout(2)
            try:
                s.recv(64)
            except TimeoutError:
                pass
            return "ok"
    except (ssl.SSLError, OSError) as e:
        return f"{type(e).__name__}: {e}"


def test_a_worker_takes_requests_only_from_holders_of_the_stacks_certificate(tmp_path, reliability):
    """The TCP request plane runs mutual TLS with a CA made for this stack alone: a client with no
    certificate, or with another stack's, is refused at the handshake; the stack's own is served."""
    import subprocess

    import psutil

    reliability("security", "the request plane refuses a client without the stack's certificate")
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    base = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    name = write_recipe(wf, base, "mtls", duration=12)
    other = tmp_path / "other"
    other.mkdir()
    key, pem = str(other / "k.pem"), str(other / "c.pem")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    subprocess.run(["openssl", "req", "-x509", *ec, "-keyout", key, "-out", pem, "-subj", "/CN=x"], check=True)
    with no_processes_left(wf), running_point(wf, name) as p:
        wait_for_text(wf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        tls = wf / f"logs/{name}/c2/tls"
        assert sorted(f.name for f in tls.iterdir()) == ["ca.pem", "node.key", "node.pem"]  # the CA key is gone
        assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in tls.iterdir())
        worker = next(k for k in descendants(p.pid) if "dynamo.mocker" in " ".join(k.cmdline()))
        ports = {c.laddr.port for c in worker.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        ca, own = str(tls / "ca.pem"), (str(tls / "node.pem"), str(tls / "node.key"))
        plane = [port for port in ports if "CERTIFICATE_REQUIRED" in _tls_answer(port, ca, None).upper()]
        assert plane, {port: _tls_answer(port, ca, None) for port in ports}
        for port in plane:
            refused = _tls_answer(port, ca, (pem, key)).upper()  # another stack's certificate
            assert "CERTIFICATE_UNKNOWN" in refused or "UNKNOWN_CA" in refused, refused
            assert _tls_answer(port, ca, own) == "ok"
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]  # the frontend and workers spoke mutual TLS all along


def _http(port: int, path: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", method=method, data=b"{}" if method == "POST" else None
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, ""


def test_a_workers_admin_routes_are_out_of_reach_its_health_and_metrics_are_not(tmp_path, reliability):
    """Dynamo's system server (with /engine/control/* and no way to authenticate them) binds loopback;
    the node's sysguard serves only GET /health, /live and /metrics on the public system port. Every
    listener of the stack (ZMQ event plane, the default) is in the port table, and the frontend's
    publisher on every interface hands a stranger the clients' session ids (docs/security.md)."""
    import psutil

    reliability("security", "a worker's admin routes are not served on its public system port")
    wf = copy_workflow(tmp_path / "wf", recipes=[])
    base = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    name = write_recipe(wf, base, "sysguard", duration=10)
    with no_processes_left(wf), running_point(wf, name) as p:
        wait_for_text(wf / f"logs/{name}/c2/driver.log", "bench: aiperf")
        procs = descendants(p.pid)
        publisher = _audit_listeners({k: k.cmdline() for k in procs}, "zmq")
        assert len(publisher) == 1, publisher  # the frontend's session publisher: a known exposure
        seen = _a_stranger_reads_session_ids(wf, publisher[0])
        assert re.search(r"session_id.{1,12}[0-9a-f]{8}-[0-9a-f]{4}-", seen), seen
        guard = next(k for k in procs if any("sysguard.py" in a for a in k.cmdline()))
        public = {c.laddr.port for c in guard.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        assert len(public) == 2, public  # one per worker
        workers = [k for k in procs if "dynamo.mocker" in " ".join(k.cmdline())]
        own = {c.laddr.port for w in workers for c in w.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
        assert not public & own  # the workers do not listen there themselves
        _assert_no_worker_binds_every_interface_but_the_event_plane(workers)
        _wait_for_kv_events_at_the_router(procs)
        for port in public:
            assert _http(port, "/health")[0] == 200
            status, body = _http(port, "/metrics")
            assert status == 200 and "dynamo_component" in body
            for path, method in [("/engine/control/sleep", "POST"), ("/engine/control/sleep", "GET"),
                                 ("/engine/pause_generation", "POST"), ("/health", "POST")]:  # fmt: skip
                assert _http(port, path, method)[0] == 403, (path, method)
        out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]
    client = json.loads((wf / f"results/{name}/c2.json").read_text())["figures"]["client"]
    assert client["cpu_s"] > 0 and client["cores"] >= 1  # its point also measured its client's CPU (run/client_cpu)


def _assert_no_worker_binds_every_interface_but_the_event_plane(workers) -> None:
    """The mocker's ZMQ KV-event relay (tcp://*) is not started; what a worker still binds on every
    interface is Dynamo 1.6.1's ZMQ event plane, on kernel-assigned ports (README, threat model)."""
    import psutil

    wild = {
        c.laddr.port
        for w in workers
        for c in w.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.ip in ("0.0.0.0", "::")
    }
    low, _ = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert all(port >= low for port in wild), wild  # ours are below the ephemeral range


def _wait_for_kv_events_at_the_router(procs) -> None:
    """Without the relay the mocker still publishes its KV events: the frontend's router indexes them."""
    import re
    import time

    fe = next(k for k in procs if "dynamo.frontend" in " ".join(k.cmdline()))
    port = int(_flag(fe.cmdline(), "--http-port"))
    stored = re.compile(r'kv_cache_events_applied\{[^}]*event_type="stored",status="ok"[^}]*\} ([0-9.e+]+)')
    deadline, seen = time.monotonic() + 90, 0.0
    while time.monotonic() < deadline and not seen:
        seen = sum(float(v) for v in stored.findall(_http(port, "/metrics")[1]))
        time.sleep(0.5)
    assert seen > 0, "the router indexed no KV event of the mockers"


@pytest.mark.parametrize(
    ("head", "passed"),
    [
        (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n", "/health"),
        (b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", "/metrics?x=1"),
        (b"GET /live HTTP/1.0\r\n\r\n", "/live"),
        (b"POST /health HTTP/1.1\r\n\r\n", None),
        (b"GET /engine/control/sleep HTTP/1.1\r\n\r\n", None),
        (b"GET /healthz HTTP/1.1\r\n\r\n", None),
        (b"GET /health/../engine/control/sleep HTTP/1.1\r\n\r\n", None),
        (b"\xff\xfe garbage\r\n\r\n", None),
        (b"GET\r\n\r\n", None),
    ],
)
def test_the_sysguard_passes_on_only_its_read_only_routes(head, passed):
    import importlib.util

    spec = importlib.util.spec_from_file_location("sysguard", ROOT / "scripts/servesweep/run/sysguard.py")
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    assert guard.allowed(head) == passed
