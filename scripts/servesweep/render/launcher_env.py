"""Every environment variable the launcher sets or decides, read off the launcher's own code: a
recipe setting one would override the launcher's value or be silently overridden by it."""

from __future__ import annotations

from itertools import product

from . import engines, flags
from .kinds._dynamo import FRAME_ENV

# the request/response planes and the TCP request plane's port: the launcher places every listener
# in the stack's port block and picks the planes (a recipe's own value would move one outside it)
PLANE_CHOICES = frozenset({"DYN_TCP_RPC_PORT", "DYN_RESPONSE_PLANE", "DYN_REQUEST_PLANE", "DYN_EVENT_PLANE"})


def _planes_env() -> set[str]:
    """What the stack's planes set, over every choice of discovery, event plane and TLS."""
    keys: set[str] = set()
    for discovery, event_plane, tls in product(("file", "etcd"), ("zmq", "nats"), (True, False)):
        keys |= set(engines.Planes(discovery, event_plane, tls).env())
    return keys


LAUNCHER_ENV = frozenset(
    {*engines.host_env(), *_planes_env(), *FRAME_ENV, *engines.ETCD_CLIENT_TLS, *flags.OWNED_ENV, *PLANE_CHOICES}
)


def owned(kind: str) -> frozenset[str]:
    """The variables a recipe for engine ``kind`` may not set."""
    return LAUNCHER_ENV | flags.owned_env(kind)
