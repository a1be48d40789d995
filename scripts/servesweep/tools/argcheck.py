"""Parse rendered argv with each engine's own argument parser, inside the engine's Python.

Run as a plain script by the Python a cluster names for an engine kind (it imports nothing of
servesweep): reads ``{"checks": [{"id", "parser": {"style", "target", "dist"}, "argv"}], "deadline_s"}``
on stdin, prints one JSON line ``[{"id", "status": ok|error|skipped, "message", "parser"}]``. ``argv`` is
what follows ``python -m <module>``, with runtime references already replaced by sample values.

A parser that exits instead of returning (``--help``, ``--version``, a dump or print flag) refuses the
argv: the engine would have exited the same way instead of serving. Each check has its own deadline
and reports "timed out" past it (a parser blocked on a file an argument names never hangs the check).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import signal
import sys


class ArgError(Exception):
    pass


class TimedOut(Exception):
    pass


# flags that make a parser print and exit: named in the refusal so it points at the recipe's item
_EARLY_EXIT_FLAG = re.compile(r"^(-h|-V|--[A-Za-z0-9-]*(help|version|dump|print|list|show)[A-Za-z0-9-]*)$")


def _raising(parser_cls):
    class Raising(parser_cls):
        def error(self, message):  # argparse would print and exit(2)
            raise ArgError(message)

    return Raising


def _version(dist: str) -> str:
    from importlib import metadata

    for name in (dist, f"{dist}-cpu"):
        try:
            return f"{dist} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return dist


def _vllm(argv: list[str], target: str, dist: str) -> str:
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # allow_abbrev=False: else `--max-num-seq 4` is silently taken for --max-num-seqs
    parser = make_arg_parser(_raising(FlexibleArgumentParser)(allow_abbrev=False))
    validate_parsed_serve_args(parser.parse_args(argv))
    return _version(dist) + " serve parser"


def _sglang(argv: list[str], target: str, dist: str) -> str:
    from sglang.srt.server_args import ServerArgs

    parser = _raising(argparse.ArgumentParser)(allow_abbrev=False)
    ServerArgs.add_cli_args(parser)
    parser.parse_args(argv)
    return _version(dist) + " ServerArgs"


def _exiting(parse, argv: list[str]) -> None:
    """Dynamo's parsers print to stderr and exit(2): turn that into an error with their message."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parse(argv)
    except SystemExit as e:
        if e.code in (0, None):
            raise
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
        last = lines[-1].split("error: ", 1)[-1] if lines else f"exit code {e.code}"
        raise ArgError(last) from None


def _parse_args(argv: list[str], target: str, dist: str) -> str:
    """A module whose ``parse_args(argv)`` is the process's own parser (Dynamo's backends)."""
    import importlib

    _exiting(importlib.import_module(target).parse_args, argv)
    return _version(dist) + f" {target.removesuffix('.args')} parser"


def _frontend(argv: list[str], target: str, dist: str) -> str:
    from dynamo.frontend.frontend_args import FrontendArgGroup, FrontendConfig

    def parse(args: list[str]) -> None:
        parser = argparse.ArgumentParser(allow_abbrev=False)
        FrontendArgGroup().add_arguments(parser)
        known, unknown = parser.parse_known_args(args)
        FrontendConfig.from_cli_args(known).validate()
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")

    _exiting(parse, argv)
    return _version(dist) + " dynamo.frontend parser"


STYLES = {
    "vllm_serve": _vllm,
    "sglang_server_args": _sglang,
    "parse_args": _parse_args,
    "dynamo_frontend": _frontend,
}


def _early_exit(code, argv: list[str]) -> str:
    flags = [a.split("=", 1)[0] for a in argv if _EARLY_EXIT_FLAG.match(a.split("=", 1)[0])]
    named = f"{' '.join(flags)}: " if flags else ""
    return (
        f"{named}the parser exited (status {code}) instead of returning: a flag such as --help, --version "
        "or a dump/print flag ends the engine before it serves"
    )


def _on_deadline(signum, frame):
    raise TimedOut


def check(parser: dict, argv: list[str], deadline_s: float = 90.0) -> dict:
    label = parser.get("target") or parser["style"]
    previous = signal.signal(signal.SIGALRM, _on_deadline)
    signal.setitimer(signal.ITIMER_REAL, deadline_s)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # stdout carries only the answers
            answer = STYLES[parser["style"]](argv, parser.get("target", ""), parser.get("dist", ""))
        return {"status": "ok", "message": "", "parser": answer}
    except TimedOut:
        return {"status": "skipped", "message": f"timed out after {deadline_s:g} s", "parser": label}
    except SystemExit as e:  # argparse's --help/--version, a parser's own exit
        if e.code not in (0, None) and not isinstance(e.code, int):
            return {"status": "error", "message": str(e.code), "parser": label}
        return {"status": "error", "message": _early_exit(e.code, argv), "parser": label}
    except ArgError as e:
        return {"status": "error", "message": str(e), "parser": label}
    except ImportError as e:  # the engine is not installed in this Python
        return {"status": "skipped", "message": f"{type(e).__name__}: {e}", "parser": label}
    except Exception as e:  # noqa: BLE001 - a parser's own validation (ValueError, AssertionError, ...)
        return {"status": "error", "message": f"{type(e).__name__}: {e}", "parser": label}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def main() -> int:
    logging_quiet()
    request = json.load(sys.stdin)
    deadline = float(request.get("deadline_s", 90.0))
    out = [{"id": c["id"], **check(c["parser"], c["argv"], deadline)} for c in request["checks"]]
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


def logging_quiet() -> None:
    import logging
    import os

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("DYN_LOG", "error")
    logging.disable(logging.WARNING)


if __name__ == "__main__":
    raise SystemExit(main())
