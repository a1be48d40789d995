"""nginx in front of several frontends: its config, generated from the plan at run time."""

from __future__ import annotations

from pathlib import Path

from ..contract.plan import Plan
from .spawn import Context


def config_text(plan: Plan, ctx: Context) -> str:
    b = plan.balancer
    me = b["process"]
    upstreams = "".join(f"    server {ctx.resolve(u, me)} max_fails=0;\n" for u in b["upstreams"])
    header = (b.get("session_header") or "").lower().replace("-", "_")
    # One conversation keeps its frontend (and so its router's session affinity); requests
    # without the header spread round robin.
    affinity = f"    hash $http_{header} consistent;\n" if header else ""
    listen = f"{ctx.addr(me)}:{ctx.port(me, 'http')}"
    return (
        # one process: a master's workers outlive it when it is SIGKILLed (a cancelled Slurm step),
        # and a worker left behind would keep serving the dead stack's port
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid nginx.pid;\nerror_log stderr warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n  access_log off;\n  client_body_temp_path tmp/body;\n  proxy_temp_path tmp/proxy;\n"
        "  fastcgi_temp_path tmp/fastcgi;\n  uwsgi_temp_path tmp/uwsgi;\n  scgi_temp_path tmp/scgi;\n"
        f"  upstream frontends {{\n{affinity}{upstreams}    keepalive 256;\n  }}\n"
        f"  server {{\n    listen {listen};\n"
        "    location = /servesweep-health { return 200 'ok'; }\n"
        "    location / {\n      proxy_pass http://frontends;\n      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n      proxy_buffering off;\n      proxy_read_timeout 3600s;\n'
        "    }\n  }\n}\n"
    )


def write_config(plan: Plan, ctx: Context, prefix: Path) -> Path:
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    path = prefix / "nginx.conf"
    path.write_text(config_text(plan, ctx))
    return path
