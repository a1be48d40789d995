"""Strict YAML loading and schema checking shared by recipes and cluster facts."""

from __future__ import annotations

import difflib
import functools
from pathlib import Path

import jsonschema
import yaml

from .errors import Problem, field_path

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's parser when present: ~10x faster


class _StrictLoader(_BASE_LOADER):
    """Safe loading that rejects duplicate keys (PyYAML silently keeps the last)."""


def _construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen[key] = True
    return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path, label: str | None = None) -> tuple[object, list[Problem]]:
    label = label or str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [Problem(label, "", "file not found")]
    except (OSError, UnicodeDecodeError) as e:
        return None, [Problem(label, "", f"cannot read: {e}")]
    try:
        return yaml.load(text, Loader=_StrictLoader), []
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        return None, [Problem(label, where, f"malformed YAML: {problem}")]


@functools.cache
def schema(name: str) -> dict:
    path = SCHEMA_DIR / name
    doc = yaml.safe_load(path.read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return doc


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(name))


def _known_keys(err: jsonschema.ValidationError) -> list[str]:
    return sorted((err.schema.get("properties") or {}).keys())


def _describe(err: jsonschema.ValidationError) -> list[tuple[str, str]]:
    path = list(err.absolute_path)
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
        best = jsonschema.exceptions.best_match(err.context)
        return [(field_path(path), best.message)]
    if err.validator == "pattern":
        return [(field_path(path), f"{err.instance!r} does not match the required form {err.validator_value}")]
    if err.validator == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return [(field_path([*path, missing]), "required key is missing")]
    return [(field_path(path), err.message)]


def schema_problems(doc: object, schema_name: str, label: str) -> list[Problem]:
    problems = []
    for err in validator(schema_name).iter_errors(doc):
        for field, reason in _describe(err):
            problems.append(Problem(label, field or "(top level)", reason))
    return problems
