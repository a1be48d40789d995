"""Strict YAML loading and schema checking shared by recipes and cluster facts."""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import jsonschema_rs
import yaml

from . import inputguard
from .errors import Problem, field_path
from .files import write_if_changed

SCHEMA_DIR = Path(__file__).resolve().parents[3] / "schemas"


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: ~10x faster


class _StrictLoader(_BASE_LOADER):
    """Safe loading as YAML 1.2's core schema reads plain scalars, with duplicate keys refused (PyYAML
    keeps the last) and only text keys. PyYAML's YAML 1.1 would turn `010` into 8, `1:30` into 90,
    `off` into False and `0x1F` into 31; here they stay the text written (an integer is plain
    decimal), and the schema names a field whose type is then wrong."""

    yaml_implicit_resolvers: dict = {}


# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution), narrowed where 1.1 and 1.2
# disagree: an integer with a leading zero, octal or hex is text, so no form reads two ways
_CORE_RESOLVERS = (
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", r"^[-+]?(?:0|[1-9][0-9]*)$", "-+0123456789"),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|(?:0|[1-9][0-9]*)(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+.0123456789",
    ),
)
for _tag, _pattern, _first in _CORE_RESOLVERS:
    _StrictLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


def _construct_bool(loader, node):
    return loader.construct_scalar(node).lower() == "true"


def _construct_int(loader, node):
    return int(loader.construct_scalar(node), 10)


def _construct_float(loader, node):
    text = loader.construct_scalar(node).lower()
    return float(text.replace(".inf", "inf").replace(".nan", "nan"))


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str):
            shown = key_node.value if isinstance(key_node, yaml.ScalarNode) else f"a {key_node.id}"
            raise yaml.constructor.ConstructorError(
                None, None, f"a mapping key must be text, not {shown!r} ({type(key).__name__})", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen[key] = True
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
# a date-like value (`2026-01-01`) stays the text it is: the schema then names the field and type
_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))


def _refuse_tag(loader, node):
    """Only plain maps, lists and scalars: a tag that builds bytes, a set or an ordered map is refused."""
    raise yaml.constructor.ConstructorError(
        None, None, f"the YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')} is not allowed here", node.start_mark
    )


for _tag in ("binary", "set", "omap", "pairs", "merge", "value"):
    _StrictLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse_tag)


def _load(text: str):
    """Strict YAML, after the size/nesting/alias budget (a ValueError says which was exceeded)."""
    too_much = inputguard.structure_problem(text)
    if too_much:
        raise ValueError(too_much)
    return yaml.load(text, Loader=_StrictLoader)


class ParseCache:
    """Parsed YAML by the sha256 of its text, kept between runs in one JSON file.

    PyYAML spends ~0.4 ms of Python per recipe building objects, and every dry run reads every
    recipe again; unchanged texts come from here instead (validation still runs on them). Only
    documents that survive a JSON round trip are kept; each entry carries a checksum of its key and
    document, and one that does not match (a damaged or edited cache) is parsed again from the file.
    """

    # names the loader's semantics: a cache parsed by another reading of YAML is never used
    FORMAT = f"servesweep.yaml-cache/3 yaml-1.2-core pyyaml {yaml.__version__}"

    def __init__(self, path: Path):
        self.path, self.kept, self.used = Path(path), {}, {}  # used: key -> [check, document JSON]
        try:
            data = json.loads(self.path.read_bytes())
            if isinstance(data, dict) and data.get("format") == self.FORMAT and isinstance(data.get("docs"), dict):
                self.kept = data["docs"]
        except (OSError, ValueError):
            pass
        self.loaded = set(self.kept)

    @staticmethod
    def _check(key: str, encoded: str) -> str:
        return hashlib.sha256(f"{key}\n{encoded}".encode()).hexdigest()[:16]

    def parse(self, text: str) -> object:
        key = hashlib.sha256(text.encode()).hexdigest()
        entry = self.kept.pop(key, None)  # popped: a second file with the same text gets its own objects
        if isinstance(entry, list) and len(entry) == 2:
            encoded = json.dumps(entry[1], separators=(",", ":"))
            if entry[0] == self._check(key, encoded):
                self.used[key] = encoded  # now, before anyone can change the document
                return entry[1]
        doc = _load(text)
        try:
            encoded = json.dumps(doc, separators=(",", ":"))
            if json.loads(encoded) == doc:
                self.used[key] = encoded
        except (TypeError, ValueError):  # e.g. an int key
            pass
        return doc

    def save(self) -> None:
        """Keep what this run used, so the file follows the current recipes."""
        if set(self.used) == self.loaded:
            return
        docs = ",".join(f'"{k}":["{self._check(k, v)}",{v}]' for k, v in sorted(self.used.items()))
        try:
            write_if_changed(self.path, f'{{"format":{json.dumps(self.FORMAT)},"docs":{{{docs}}}}}')
        except OSError:  # a cache that cannot be written only costs the next run its parse time
            pass


def load_yaml(path: Path, label: str | None = None, cache: ParseCache | None = None) -> tuple[object, list[Problem]]:
    label = label or str(path)
    refused = inputguard.file_problem(Path(path))
    if refused:
        return None, [Problem(label, "", refused)]
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return None, [Problem(label, "", f"cannot read: {e}")]
    try:
        return (cache.parse(text) if cache else _load(text)), []
    except ValueError as e:
        return None, [Problem(label, "(structure)", str(e))]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        return None, [Problem(label, where, f"malformed YAML: {problem}")]


@functools.cache
def schema(name: str) -> dict:
    return yaml.load((SCHEMA_DIR / name).read_text(), Loader=_BASE_LOADER)


@functools.cache
def fast_validator(name: str) -> jsonschema_rs.Draft202012Validator:
    """Rust validator: ~100x faster than jsonschema, so a valid document costs microseconds."""
    return jsonschema_rs.Draft202012Validator(schema(name))


@functools.cache
def validator(name: str):
    """The Python validator, whose error objects carry the schema for good messages. Imported
    only when a document is invalid: the import alone costs a dry run ~0.2 s."""
    import jsonschema

    return jsonschema.Draft202012Validator(schema(name))


def _known_keys(err) -> list[str]:
    return sorted((err.schema.get("properties") or {}).keys())


MESSAGE_CHARS = 300  # a schema message quotes the value: a huge value must not flood the report


def _describe(err) -> list[tuple[str, str]]:
    return [
        (f, r if len(r) <= MESSAGE_CHARS else f"{r[: MESSAGE_CHARS - 40]} … ({len(r)} characters)")
        for f, r in _reasons(err)
    ]


def _reasons(err) -> list[tuple[str, str]]:
    path = list(err.absolute_path)
    if err.validator == "maxItems" and isinstance(err.instance, list):
        return [(field_path(path), f"{len(err.instance)} items is too long: at most {err.validator_value}")]
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        known = _known_keys(err)
        out = []
        for key in sorted(k for k in err.instance if k not in known):
            hint = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            reason = f"unknown key {key!r}"
            reason += f" (did you mean {hint[0]!r}?)" if hint else f"; allowed keys: {', '.join(known)}"
            out.append((field_path([*path, key]), reason))
        return out
    if err.validator == "maxProperties" and isinstance(err.instance, dict):
        keys = ", ".join(map(str, err.instance))
        return [(field_path(path), f"give exactly one of these, not several: {keys}")]
    if err.validator == "minProperties" and isinstance(err.instance, dict) and not err.instance:
        known = ", ".join(_known_keys(err))
        return [(field_path(path), f"must not be empty; give one of: {known}")]
    if err.validator == "oneOf" and err.context:
        from jsonschema.exceptions import best_match

        best = best_match(err.context)
        return [(field_path(path), best.message)]
    if err.validator == "pattern":
        return [(field_path(path), f"{err.instance!r} does not match the required form {err.validator_value}")]
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return [(field_path([*path, missing]), "required key is missing")]
    return [(field_path(path), err.message)]


@dataclass(frozen=True)
class _RustError:
    """A jsonschema-rs error in the shape the messages read from jsonschema's errors."""

    absolute_path: tuple
    message: str
    validator = None  # no keyword-specific wording: the message is used as it is


def schema_errors(doc: object, schema_name: str) -> list:
    """``doc``'s errors against a schema: none, at Rust speed, for a valid document; otherwise the
    Python validator's (they carry the schema, for good messages), or Rust's if only it finds any
    (the validators can disagree: Rust's `$` rejects a trailing newline)."""
    fast = fast_validator(schema_name)
    if fast.is_valid(doc):
        return []
    return list(validator(schema_name).iter_errors(doc)) or [
        _RustError(tuple(e.instance_path), e.message) for e in fast.iter_errors(doc)
    ]


def schema_problems(doc: object, schema_name: str, label: str) -> list[Problem]:
    numbers = inputguard.number_problems(doc, schema(schema_name))
    return [Problem(label, field or "(top level)", reason) for field, reason in numbers] + [
        Problem(label, field or "(top level)", reason)
        for err in schema_errors(doc, schema_name)
        for field, reason in _describe(err)
        if field not in {f for f, _ in numbers}
    ]


def checked_json(path: Path, schema_name: str) -> tuple[object, str | None]:
    """A file read back (result, capacity, cache): (document, None) if it parses and matches its
    schema, else (None, why not). Never trusted, never a traceback."""
    path = Path(path)
    if path.is_symlink() or path.parent.is_symlink():
        return None, "a symbolic link (it or its folder): never followed"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a link swapped in after the check is refused too
        with os.fdopen(fd, "rb") as f:
            doc = json.loads(f.read())
    except OSError as e:
        return None, f"cannot read: {e.strerror}"
    except ValueError as e:
        return None, f"not JSON ({e})"
    errors = schema_errors(doc, schema_name)
    if errors:
        where = ".".join(map(str, errors[0].absolute_path)) or "(top level)"
        return None, f"does not match {schema_name}: {where}: {errors[0].message[:120]}"
    return doc, None
