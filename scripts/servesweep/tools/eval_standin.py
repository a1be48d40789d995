"""A stand-in OpenAI-compatible chat server for accuracy evals: it answers each multiple-choice
question with the letter its answer key gives, so a known share is right and a known share wrong,
and a question it has no key for with a sentence no grader can read (unparsed). The whole eval path
(aiperf's accuracy mode, run/evals' parsing, the summary) is then checked against a score known in
advance. Answers are lighteval's MMLU form (`` B``: the grader strips it and compares the letter);
streamed or not, as the request asks. Serves ``/v1/chat/completions`` on 127.0.0.1 only.

    python -m servesweep.tools.eval_standin --port 8000 --key key.json   # {question: letter}
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BIND = "127.0.0.1"
LETTERS = "ABCD"
UNGRADABLE = "I cannot tell."  # no lone A-D letter, no "answer is": every grader tier misses it


def answer_key(rows: list[dict], wrong: int) -> dict[str, str]:
    """{question: letter} for MMLU-shaped rows (question, choices, answer index): the gold letter,
    except for the first ``wrong`` questions, which get the next letter round."""
    return {r["question"]: LETTERS[(r["answer"] + (i < wrong)) % len(LETTERS)] for i, r in enumerate(rows)}


def question_of(messages: list[dict]) -> str:
    """The question of an MMLU prompt: the last user message's last ``Question: <text>`` line."""
    users = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    text = users[-1] if users and isinstance(users[-1], str) else ""
    return text.rsplit("Question: ", 1)[-1].split("\n", 1)[0] if "Question: " in text else ""


class Standin(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, key: dict[str, str]):
        self.key = key
        self.asked: list[str] = []  # every question, in the order asked
        self.lock = threading.Lock()
        super().__init__((BIND, port), Handler)

    def reply(self, messages: list[dict]) -> str:
        question = question_of(messages)
        with self.lock:
            self.asked.append(question)
        letter = self.key.get(question)
        return f" {letter}" if letter else UNGRADABLE


class Handler(BaseHTTPRequestHandler):
    server: Standin

    def log_message(self, *args) -> None:  # quiet: aiperf's log is the record
        pass

    def do_POST(self):  # noqa: N802 - http.server's name
        if self.path.split("?")[0] != "/v1/chat/completions":
            self.send_error(404)
            return
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            messages = body["messages"]
        except (ValueError, KeyError, TypeError) as e:
            self.send_error(400, f"not a chat request: {e}")
            return
        content = self.server.reply(messages)
        prompt = sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))
        cached = {"cached_tokens": 0}  # as vLLM reports it; without it aiperf warns, a warning the eval would carry
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": 1,
            "total_tokens": prompt + 1,
            "prompt_tokens_details": cached,
        }
        head = {"id": "standin", "created": int(time.time()), "model": body.get("model", "standin")}
        if body.get("stream"):
            self._stream(head, content, usage if (body.get("stream_options") or {}).get("include_usage") else None)
            return
        choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        whole = head | {"object": "chat.completion", "choices": [choice], "usage": usage}
        self._send(200, "application/json", json.dumps(whole).encode())

    def _stream(self, head: dict, content: str, usage: dict | None) -> None:
        """Server-sent events: the role, the answer, the stop, the usage when asked for, [DONE]."""
        head = head | {"object": "chat.completion.chunk"}
        deltas = [({"role": "assistant", "content": ""}, None), ({"content": content}, None), ({}, "stop")]
        events = [head | {"choices": [{"index": 0, "delta": d, "finish_reason": f}]} for d, f in deltas]
        if usage:
            events.append(head | {"choices": [], "usage": usage})
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        self._send(200, "text/event-stream", data.encode())

    def _send(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serving(key: dict[str, str]) -> Iterator[tuple[Standin, str]]:
    """The stand-in on a free port, served from a thread; (server, base URL). Stopped on the way out."""
    server = Standin(0, key)
    thread = threading.Thread(target=server.serve_forever, name="eval-standin", daemon=True)
    thread.start()
    try:
        yield server, f"http://{BIND}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free one)")
    ap.add_argument("--key", type=Path, help="JSON {question: letter}; without it nothing is gradable")
    a = ap.parse_args(argv)
    try:
        key = json.loads(a.key.read_text()) if a.key else {}
    except (OSError, ValueError) as e:
        ap.error(f"--key {a.key}: not readable as JSON ({e})")
    if not isinstance(key, dict) or not all(isinstance(v, str) and v in LETTERS for v in key.values()):
        ap.error(f"--key {a.key}: not an answer key ({{question: one of {', '.join(LETTERS)}}})")
    server = Standin(a.port, key)
    print(f"eval standin: http://{BIND}:{server.server_address[1]}, {len(key)} answers keyed", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
