"""docs/security.md's port table is render/listeners' table, and it lists every port a plan gives a
process (every recipe, every cluster, rehearsal, both event planes); the live audit's matcher holds
the listeners measured on a local stack and refuses one more (tests/test_security.py runs it live)."""

from __future__ import annotations

import json

import pytest
import yaml

from servesweep.render import listeners
from servesweep.render.loading import load_recipe
from servesweep.render.plan import render

from helpers import CLUSTERS, ROOT

FRONTEND = ["python", "-m", "dynamo.frontend", "--http-port", "24259"]
MOCKER = ["python", "-m", "dynamo.mocker", "--model-path", "m"]
GUARD = ["python", "/wf/scripts/servesweep/run/sysguard.py", "127.0.0.1:24261=24262"]
# measured with `ss -ltnpH` on local-agg-2x-mocker (Dynamo 1.6.1, file discovery, ZMQ event plane)
MEASURED_ZMQ = {
    "frontend": [("127.0.0.1", 29888), ("127.0.0.1", 38929), ("0.0.0.0", 43705)],
    "mocker": [("127.0.0.1", 29891), ("127.0.0.1", 40235)] + [("0.0.0.0", p) for p in (34989, 36581, 36377, 33821)],
    "guard": [("127.0.0.1", 29890), ("127.0.0.1", 29893)],
}
ARGV = {"frontend": FRONTEND, "mocker": MOCKER, "guard": GUARD}


def test_the_doc_holds_the_table_the_audit_reads():
    doc = (ROOT / "docs/security.md").read_text()
    assert listeners.markdown() in doc, "docs/security.md's port table differs from render/listeners.markdown()"


def _plans():
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        recipe = load_recipe(path)
        for cluster in recipe.clusters:
            yield render(recipe, CLUSTERS[cluster], recipe.concurrency[0])
            yield render(recipe, CLUSTERS[cluster], recipe.concurrency[0], CLUSTERS["local"])


def test_every_port_a_plan_gives_a_process_is_in_the_table():
    seen = [listeners.unlisted_plan_ports(plan) for plan in _plans()]
    assert len(seen) > 10 and not [p for problems in seen for p in problems]


def test_the_nats_event_plane_and_its_ports_are_in_the_table(tmp_path):
    doc = yaml.safe_load((ROOT / "recipes/local-agg-2x-mocker.yaml").read_text())
    doc["control_plane"] = {"discovery": "etcd", "event_plane": "nats"}
    (tmp_path / "nats.yaml").write_text(yaml.safe_dump(doc | {"name": "nats"}))
    plan = render(load_recipe(tmp_path / "nats.yaml"), CLUSTERS["local"], 4)
    assert {p["role"] for p in plan["processes"]} >= {"etcd", "nats", "frontend", "sysguard"}
    assert listeners.unlisted_plan_ports(plan) == []


def test_an_unlisted_plan_port_is_named():
    plan = {"processes": [{"name": "frontend", "role": "frontend", "argv": FRONTEND, "ports": {"http": {}, "x": {}}}]}
    assert listeners.unlisted_plan_ports(json.loads(json.dumps(plan))) == [
        "frontend (dynamo.frontend): port 'x' is not in docs/security.md's port table"
    ]


def test_the_measured_listeners_of_a_local_stack_are_all_listed():
    for name, found in MEASURED_ZMQ.items():
        assert listeners.unlisted(ARGV[name], found, "zmq", "127.0.0.1") == [], name


@pytest.mark.parametrize(
    ("name", "extra", "plane"),
    [
        ("frontend", ("0.0.0.0", 41000), "zmq"),  # a second publisher on every interface
        ("frontend", ("0.0.0.0", 43705), "nats"),  # the publisher, where the NATS event plane has none
        ("mocker", ("0.0.0.0", 24100), "zmq"),  # a planned port on every interface (the mocker's relay)
        ("mocker", ("0.0.0.0", 45000), "zmq"),  # a fifth event-plane port
        ("guard", ("0.0.0.0", 29999), "zmq"),
    ],
)
def test_a_listener_the_table_does_not_hold_is_named(name, extra, plane):
    found = [a for a in MEASURED_ZMQ[name] if plane == "zmq" or a[0] != "0.0.0.0"]
    problems = listeners.unlisted(ARGV[name], [*found, extra], plane, "127.0.0.1")
    prefix = f"{listeners.program(ARGV[name])} listens on {extra[0]}:"  # which one of a row's ports is over: any
    assert len(problems) == 1 and problems[0].startswith(prefix), problems
    assert problems[0].endswith(f"not in docs/security.md's port table for {listeners.table_processes(ARGV[name])}")


def test_an_unknown_program_listening_is_named():
    assert listeners.unlisted(["/usr/bin/socat", "tcp-listen:9"], [("127.0.0.1", 9)], "zmq", "127.0.0.1")
