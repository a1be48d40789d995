"""Problems found in user input: always file + field + reason, never a traceback."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# terminal colour/cursor sequences (CSI and OSC) that engines write into their logs
_TERMINAL_CODES = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def plain_text(text: str) -> str:
    """``text`` without terminal escape sequences: log tails quoted in messages and failure.json."""
    return _TERMINAL_CODES.sub("", text)


def _escaped(ch: str) -> str:
    if ch in "\n\r\t":
        return repr(ch)[1:-1]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: object) -> str:
    """``text`` safe to print on one terminal line: control and format characters (newlines, escape
    codes, bidi overrides) written as escapes, so user input never forges or hides a line."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(_escaped(ch) if unicodedata.category(ch) in _UNPRINTED else ch for ch in text)


_UNPRINTED = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


@dataclass(frozen=True, order=True)
class Problem:
    file: str
    field: str
    reason: str

    def __str__(self) -> str:
        """One line, whatever the file name, key or value quoted in it holds."""
        where = f"{shown(self.file)}: {shown(self.field)}" if self.field else shown(self.file)
        return f"{where}: {shown(self.reason)}"


class InputError(Exception):
    """One or more problems in recipes or cluster facts."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(set(problems))
        super().__init__("\n".join(str(p) for p in self.problems))

    def report(self) -> str:
        n = len(self.problems)
        lines = [f"servesweep: {n} problem{'s' if n != 1 else ''} found:"]
        lines += [f"  {p}" for p in self.problems]
        return "\n".join(lines)


def field_path(parts) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out
