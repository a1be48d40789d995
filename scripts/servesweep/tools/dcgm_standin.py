"""A stand-in DCGM exporter: DCGM's metric names and labels in Prometheus text, from a known power
curve per GPU, so that aiperf's GPU telemetry and energy figures can be checked on machines without
a GPU. Serves ``/metrics`` on 127.0.0.1 only.

GPU i draws ``base_i + swing_i * sin(2 pi (t - t0) / period)`` watts at wall-clock time t; its energy
counter (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ) is that curve's exact integral since t0, on top of
a large starting value as a real GPU's counter since boot would be.

    python -m servesweep.tools.dcgm_standin --port 9500 --gpus 2 --base 300 --swing 100 --period 8

Where a stack starts one on each of its nodes (``telemetry: {source: exporter}``) it binds the node's
address (``--bind {addr:self}``: the client on another node reads it), and ``--base-at ADDR=W``
gives the exporter bound to ADDR its own base, so that each node's curve is told apart.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BIND = "127.0.0.1"
COUNTER_AT_START_MJ = 5.0e9  # a counter that has run for days before the stand-in starts
MODEL = "NVIDIA H200 (stand-in)"


@dataclass(frozen=True)
class Curve:
    """One GPU's known power curve (W) and its integral (J)."""

    base_w: float
    swing_w: float
    period_s: float
    t0: float  # wall-clock seconds where the sine starts and the counter adds from

    def power_w(self, t: float) -> float:
        return self.base_w + self.swing_w * math.sin(2 * math.pi * (t - self.t0) / self.period_s)

    def energy_j(self, a: float, b: float) -> float:
        """The curve's integral over wall-clock [a, b]."""
        w = 2 * math.pi / self.period_s
        cos = lambda t: math.cos(w * (t - self.t0))  # noqa: E731
        return self.base_w * (b - a) - self.swing_w / w * (cos(b) - cos(a))


def curves(gpus: int, base_w: float, swing_w: float, period_s: float, t0: float) -> list[Curve]:
    """GPU i draws base + 10 % per index more, so that every GPU (and every node's) is told apart."""
    return [Curve(base_w * (1 + 0.1 * i), swing_w, period_s, t0) for i in range(gpus)]


FIELDS = (  # name, type, help, value of (curve, t)
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda c, t: c.power_w(t)),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).",
     lambda c, t: COUNTER_AT_START_MJ + 1000.0 * c.energy_j(c.t0, t)),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda c, t: round(100 * c.power_w(t) / 700)),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda c, t: 81920),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda c, t: 40 + round(c.power_w(t) / 20)),
)  # fmt: skip


def exposition(gpu_curves: list[Curve], hostname: str, t: float) -> str:
    """The Prometheus text of every field of every GPU at wall-clock ``t``, labelled as dcgm-exporter does."""
    lines = []
    for name, kind, help_text, value in FIELDS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for i, c in enumerate(gpu_curves):
            labels = (
                f'gpu="{i}",UUID="GPU-standin-{hostname}-{i}",pci_bus_id="00000000:{i + 1:02x}:00.0",'
                f'device="nvidia{i}",modelName="{MODEL}",Hostname="{hostname}"'
            )
            lines.append(f"{name}{{{labels}}} {value(c, t):.6f}")
    return "\n".join(lines) + "\n"


def server(port: int, gpu_curves: list[Curve], hostname: str, bind: str = BIND) -> ThreadingHTTPServer:
    """The exporter bound to ``bind``:``port`` (0: any free port), not yet serving."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = exposition(gpu_curves, hostname, time.time()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # aiperf scrapes several times a second: no line per scrape
            pass

    return ThreadingHTTPServer((bind, port), Handler)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed on the first line)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--base", type=float, default=300.0, help="GPU 0's mean power, W")
    ap.add_argument("--swing", type=float, default=100.0, help="the sine's amplitude, W")
    ap.add_argument("--period", type=float, default=8.0, help="the sine's period, s")
    ap.add_argument("--t0", type=float, default=None, help="wall-clock start of the curves (default: now)")
    ap.add_argument("--hostname", default="standin")
    ap.add_argument("--bind", default=BIND, help="the address to listen on (a node's own, for a remote client)")
    ap.add_argument("--base-at", action="append", default=[], metavar="ADDR=W", help="--base when bound to ADDR")
    a = ap.parse_args(argv)
    base = _base_at(a.base_at, a.bind, a.base, ap)
    if a.gpus < 1 or a.period <= 0 or a.swing > base:
        ap.error("need --gpus >= 1, --period > 0 and --swing <= --base (power never negative)")
    t0 = time.time() if a.t0 is None else a.t0
    srv = server(a.port, curves(a.gpus, base, a.swing, a.period, t0), a.hostname, a.bind)
    print(f"dcgm-standin listening on {a.bind}:{srv.server_address[1]} base={base:g} t0={t0!r}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


def _base_at(pairs: list[str], bind: str, default: float, ap: argparse.ArgumentParser) -> float:
    """The base power for the address bound, from every ``ADDR=WATTS`` pair (each one checked)."""
    bases = {}
    for pair in pairs:
        addr, _, watts = pair.partition("=")
        try:
            bases[addr] = float(watts)
        except ValueError:
            ap.error(f"--base-at {pair!r}: want ADDR=WATTS")
    return bases.get(bind, default)


if __name__ == "__main__":
    sys.exit(main())
