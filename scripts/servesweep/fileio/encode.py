"""Canonical text: sorted compact JSON (what fingerprints hash), and numbers as argv items."""

from __future__ import annotations

import hashlib
import json

# json's C encoder (indent would force the slow Python one); one encoder object, since
# json.dumps with options builds a new one per call.
encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
encode_key = json.encoder.encode_basestring  # what json.dumps uses for keys with ensure_ascii=False


def canonical(obj) -> str:
    return encode(obj) + "\n"


def pretty(obj) -> str:
    return json.dumps(obj, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def num_arg(x) -> str:
    """A number as a CLI argument: 16, not 16.0."""
    return str(int(x)) if float(x).is_integer() else str(x)
