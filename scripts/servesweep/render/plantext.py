"""A plan's canonical text as templates: the layout (concurrency-independent) encoded once per
recipe, each point filling in only the values it sets."""

from __future__ import annotations

from dataclasses import dataclass

from ..fileio.encode import digest, encode, encode_key

POINT_KEYS = ("benchmark", "point", "resources")  # what a point sets on its layout
# What the client side decides (with POINT_KEYS): left out of a stack's server identity, so points
# of recipes that differ only here share one stack. The prefix reset is a client action per point; the
# dataset (``data``) is the client's to read.
CLIENT_KEYS = ("recipe", "recipe_file", "validity", "stack", "data", *POINT_KEYS)


@dataclass(frozen=True)
class Template:
    """A dict's canonical text with holes for some values: static text and hole names alternate."""

    pieces: tuple[str, ...]

    @classmethod
    def of(cls, fixed: dict[str, str], holes: dict[str, str]) -> Template:
        """``fixed``: key -> encoded value; ``holes``: key -> name of the value that fills it."""
        pieces, text = [], "{"
        for i, key in enumerate(sorted([*fixed, *holes])):
            text += ("," if i else "") + encode_key(key) + ":"
            if key in holes:
                pieces += [text, holes[key]]
                text = ""
            else:
                text += fixed[key]
        return cls((*pieces, text + "}\n"))

    def fill(self, values: dict[str, str]) -> str:
        p = self.pieces
        return "".join([p[i] if i % 2 == 0 else values[p[i]] for i in range(len(p))])


@dataclass(frozen=True)
class LayoutTexts:
    """Templates of a layout's plan text, its fingerprinted body and its curve (no concurrency),
    and the digest of its server identity (no client-side field at all)."""

    plan: Template
    body: Template
    curve: Template
    server: str

    @classmethod
    def of(cls, base: dict) -> LayoutTexts:
        fixed = {k: encode(v) for k, v in base.items() if k not in POINT_KEYS}
        body = {k: k for k in POINT_KEYS}
        curve = {"benchmark": "curve_benchmark", "resources": "resources"}
        return cls(
            Template.of(fixed, {**body, "fingerprints": "fingerprints"}),
            Template.of(fixed, body),
            Template.of(fixed, curve),
            digest(Template.of({k: v for k, v in fixed.items() if k not in CLIENT_KEYS}, {}).fill({})),
        )
