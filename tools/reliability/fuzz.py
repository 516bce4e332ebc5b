"""`python -m tools.reliability.fuzz`: malformed and wrong-shaped LSP thrown at the real
server over stdio.

Seeded (`--seed`) and bounded (`--messages`, `--seconds`). One long session gets batches of
messages, each mixing:
- malformed framing: short and long bodies, bad, missing and huge Content-Lengths, huge headers,
  bytes between frames, bodies that are no JSON, invalid UTF-8, deep nesting, 5,000-digit numbers;
- valid JSON-RPC with wrong shapes for every method the server has (METHODS): params and ids of
  wrong types, nulls, negative and huge numbers, unknown fields, lone surrogates, NUL bytes and,
  every `--big-every` messages, a 10 MB string;
- floods of didChange with random edits (in and out of range, stale versions, whole-text
  replacements) against random open and unknown documents, with completions in between.
After each batch (once its own requests are answered: each may be a model run, and on a busy
machine they queue; more than 60 s counts as a hang) the base settings are restored and a
well-formed completion must be answered within `--hang-seconds` (10 s). Separate short
sessions check the lifecycle out of order: requests before `initialize`, a second `initialize`,
the issue's short frame, requests after `shutdown`, `exit` without `shutdown`, and a client that
closes stdin.

Prints JSON: messages (by kind), crashes (the process died), hangs (no liveness answer in time;
a hung server is killed and the run goes on with a new one), liveness (answers, the median and
slowest, the slowest batch to be answered), unanswered (fuzzed requests with a string or int id
that never got a response from a server that did not hang), errorResponses
by code (expected: the fuzz sends invalid requests; -32603 is a handler failing on bad input),
badOutput (stdout that is no frame), serverTracebacks (in the server's log), rss (start after
the first batch, peak, end after closing every document) and lifecycle violations.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from memosight_lsp.bench.lsp_client import SERVER_COMMAND, StdioServer, encode, frame
from memosight_lsp.config import Settings, settings_to_wire
from memosight_lsp.inference import native_kernels
from tools.reliability.procs import proc_status, python_env

# Every method the server registers (server/features.py and pygls's built-ins), requests and
# notifications; tests/test_reliability_fuzz.py checks the list against the real server.
# shutdown, exit and initialize are also exercised by the lifecycle sessions.
REQUESTS = (
    "initialize",
    "textDocument/inlineCompletion",
    "textDocument/completion",
    "memosight/stats",
    "memosight/context",
    "memosight/nextEdit",
    "workspace/executeCommand",
)
NOTIFICATIONS = (
    "initialized",
    "workspace/didChangeConfiguration",
    "textDocument/didOpen",
    "textDocument/didChange",
    "textDocument/didSave",
    "textDocument/didClose",
    "workspace/didChangeWorkspaceFolders",
    "notebookDocument/didOpen",
    "notebookDocument/didChange",
    "notebookDocument/didClose",
    "window/workDoneProgress/cancel",
    "$/setTrace",
    "$/cancelRequest",
    "memosight/cursor",
)
LIFECYCLE = ("shutdown", "exit")
METHODS = REQUESTS + NOTIFICATIONS + LIFECYCLE
UNKNOWN = ("textDocument/hover", "foo/bar", "", "$/unknown", "memosight/nope")

BIG = 10 * 1024 * 1024
LIVE_TEXT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    "
LIVE_POSITION = {"line": 5, "character": 4}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability.fuzz", description=__doc__)
    parser.add_argument("--model", help="model folder (default: the embedded model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--messages", type=int, default=10_000, help="fuzzed messages to send")
    parser.add_argument("--seconds", type=float, default=900, help="stop after this long")
    parser.add_argument("--batch", type=int, default=100, help="messages between liveness checks")
    parser.add_argument("--big-every", type=int, default=1000, help="a 10 MB string every N")
    parser.add_argument("--hang-seconds", type=float, default=10.0)
    parser.add_argument("--lifecycle-sessions", type=int, default=3)
    parser.add_argument("--log-file", help="keep the server's log here (default: a temp file)")
    parser.add_argument(
        "--server",
        help="the server command (default: this Python's -m memosight_lsp); on a hang it gets "
        "SIGUSR1 before it is killed (a wrapper can register faulthandler for it)",
    )
    return parser


# -- values -------------------------------------------------------------------------------------


class Values:
    """Random values of the kinds a fuzzer wants: evil scalars and strings, and mutations."""

    def __init__(self, rng: random.Random, big_every: int) -> None:
        self.rng = rng
        self.big_every = big_every
        self.count = 0
        self._big = ("x = 1\n" * (BIG // 6 + 1))[:BIG]

    def evil(self) -> Any:
        rng = self.rng
        self.count += 1
        if self.big_every and self.count % self.big_every == 0:
            return self._big
        return rng.choice(
            [
                None,
                -1,
                -(2**63),
                2**63,
                2**31,
                10**30,
                1e308,
                -0.0,
                1.5,
                True,
                False,
                "",
                "\ud800",
                "\udfff\ud800x",
                "\x00",
                "a\x00b" * 10,
                "😋" * 50,
                "\u202e\u200b",
                "file:///../../etc/passwd",
                "x" * rng.randint(1, 5000),
                [],
                {},
                [None, -1, "x"],
                {"unknown": {"deep": [1, 2, {"x": None}]}},
            ]
        )

    def mutate(self, value: Any, depth: int = 0) -> Any:
        """The value with a few parts replaced, dropped or added (most parts kept)."""
        rng = self.rng
        if depth > 6 or rng.random() < 0.12:
            return self.evil()
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                roll = rng.random()
                if roll < 0.08:
                    continue  # dropped
                out[key] = self.mutate(item, depth + 1) if roll < 0.5 else item
            if rng.random() < 0.15:
                out[rng.choice(["unknown", "__proto__", "", "\ud800", "x" * 100])] = self.evil()
            return out
        if isinstance(value, list):
            items = [self.mutate(v, depth + 1) for v in value]
            if rng.random() < 0.1:
                items.append(self.evil())
            return items
        return value if rng.random() < 0.7 else self.evil()


# -- documents ----------------------------------------------------------------------------------


class Documents:
    """The fuzzer's picture of the documents it opened, for edits that are mostly valid."""

    def __init__(self, rng: random.Random, root: Path) -> None:
        self.rng = rng
        self.root = root
        self.open: dict[str, tuple[int, list[str]]] = {}  # uri -> (version, lines)

    def uri(self) -> str:
        rng = self.rng
        if self.open and rng.random() < 0.6:
            return rng.choice(sorted(self.open))
        name = rng.choice(["a.py", "b.py", "sub/c.py", "d.js", "e.rs", "notes.md", "x.bin"])
        return rng.choice(
            [
                (self.root / f"fuzz{rng.randint(0, 30)}_{name}").as_uri(),
                (self.root / name).as_uri(),
                f"file://{self.root}/../outside_{rng.randint(0, 3)}.py",
                f"untitled:Untitled-{rng.randint(1, 4)}",
                f"file:///nonexistent/deep/{rng.randint(0, 5)}.py",
                "file://host/share/x.py",
                "http://example.invalid/x.py",
                "not a uri",
                "file:///tmp/%00.py",
            ]
        )

    def text(self) -> str:
        rng = self.rng
        pieces = [
            "def f(x):\n    return x\n",
            "class A:\n    def m(self):\n        pass\n",
            "import os\n",
            "\r\n",
            "😋 = 1\n",
            "\x00",
            "\ud800",
            "    " * 20,
            "x" * 200,
            "\n" * 30,
        ]
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))

    def did_open(self) -> dict:
        uri = self.uri()
        text = self.text()
        self.open[uri] = (1, text.split("\n"))
        language = self.rng.choice(["python", "javascript", "rust", "markdown", "", "💥"])
        return {"textDocument": {"uri": uri, "languageId": language, "version": 1, "text": text}}

    def position(self, lines: list[str] | None) -> dict:
        rng = self.rng
        if lines and rng.random() < 0.8:
            line = rng.randrange(len(lines))
            return {"line": line, "character": rng.randint(0, len(lines[line]) + 1)}
        return {"line": rng.choice([0, 1, 10**6, 2**31 - 1]), "character": rng.randint(0, 500)}

    def did_change(self) -> dict:
        rng = self.rng
        uri = self.uri()
        version, lines = self.open.get(uri, (0, []))
        version += 1 if rng.random() < 0.9 else rng.choice([-5, 0, 1000])
        changes: list[dict] = []
        for _ in range(rng.choice([1, 1, 1, 2, 5])):
            text = rng.choice(["a", "b", "(", ")", "\n", "    ", "😋", "", "def g():\n", "\t"])
            if rng.random() < 0.05:
                changes.append({"text": self.text()})  # the whole document
                continue
            start = self.position(lines)
            end = start if rng.random() < 0.7 else self.position(lines)
            changes.append({"range": {"start": start, "end": end}, "text": text})
        if uri in self.open:
            self.open[uri] = (version, lines)  # the server's copy may differ: fine, it clamps
        return {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes}

    def cursor(self) -> dict:
        uri = self.uri()
        lines = self.open.get(uri, (0, None))[1]
        return {"textDocument": {"uri": uri}, "position": self.position(lines)}


# -- messages -----------------------------------------------------------------------------------


class Fuzzer:
    def __init__(self, rng: random.Random, root: Path, big_every: int) -> None:
        self.rng = rng
        self.root = root
        self.values = Values(rng, big_every)
        self.docs = Documents(rng, root)
        self.ids = 0

    def next_id(self) -> Any:
        """Mostly unique string or int ids (tracked); sometimes ids JSON-RPC does not allow."""
        self.ids += 1
        roll = self.rng.random()
        if roll < 0.5:
            return f"fz-{self.ids}"
        if roll < 0.95:
            return 1_000_000 + self.ids
        return self.rng.choice([None, 1.5, True, {"id": 1}, [1], -1])

    def valid_params(self, method: str) -> Any:
        d = self.docs
        rng = self.rng
        if method == "initialize":
            return {"processId": None, "rootUri": self.root.as_uri(), "capabilities": {}}
        if method in ("textDocument/inlineCompletion", "textDocument/completion"):
            return {**d.cursor(), "context": {"triggerKind": rng.choice([1, 2, 3, 0, 99])}}
        if method == "memosight/context":
            return {**d.cursor(), "budget": rng.choice([None, 0, 16, 10**9, -1])}
        if method == "memosight/cursor":
            return d.cursor()
        if method == "memosight/stats":
            return rng.choice([{}, None, []])
        if method == "workspace/executeCommand":
            return {"command": rng.choice(["memosight.x", ""]), "arguments": [1, None]}
        if method == "workspace/didChangeConfiguration":
            tree = {
                "completion": {"maxNewTokens": rng.choice([1, 8, 0, 5000, -3])},
                "context": {"budgetTokens": rng.choice([0, 64, 1024, 10**9])},
                "languages": {"python": rng.random() < 0.9},
            }
            return {"settings": rng.choice([{"memosight": tree}, tree, None, {}])}
        if method == "textDocument/didOpen":
            return d.did_open()
        if method == "textDocument/didChange":
            return d.did_change()
        if method in ("textDocument/didSave", "textDocument/didClose"):
            uri = d.uri()
            if method == "textDocument/didClose":
                d.open.pop(uri, None)
            return {"textDocument": {"uri": uri}, "text": d.text()}
        if method == "workspace/didChangeWorkspaceFolders":
            folder = rng.choice(
                [self.root / "sub", self.root / "missing", self.root / "a.py", self.root]
            )
            entry = {"uri": folder.as_uri(), "name": "f"}
            added, removed = ([entry], []) if rng.random() < 0.5 else ([], [entry])
            return {"event": {"added": added, "removed": removed}}
        if method.startswith("notebookDocument/"):
            uri = (self.root / "nb.ipynb").as_uri()
            return {
                "notebookDocument": {
                    "uri": uri,
                    "notebookType": "jupyter",
                    "version": 1,
                    "cells": [{"kind": 2, "document": uri + "#c1"}],
                },
                "cellTextDocuments": [
                    {"uri": uri + "#c1", "languageId": "python", "version": 1, "text": "x"}
                ],
            }
        if method == "window/workDoneProgress/cancel":
            return {"token": rng.choice(["t", 1, None])}
        if method == "$/setTrace":
            return {"value": rng.choice(["off", "messages", "verbose", "loud"])}
        if method == "$/cancelRequest":
            return {"id": rng.choice([f"fz-{max(1, self.ids - 1)}", 1_000_000 + self.ids, "nope"])}
        return {}

    def shaped(self) -> tuple[dict, Any]:
        """A JSON-RPC message for a random method with mutated params; (message, tracked id)."""
        rng = self.rng
        methods = REQUESTS + NOTIFICATIONS
        method = rng.choice(methods) if rng.random() < 0.93 else rng.choice(UNKNOWN)
        params = self.valid_params(method)
        if rng.random() < 0.85:
            params = self.values.mutate(params)
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        is_request = method in REQUESTS or (method in UNKNOWN and rng.random() < 0.5)
        if rng.random() < 0.05:
            is_request = not is_request
        tracked = None
        if is_request:
            message["id"] = self.next_id()
            if isinstance(message["id"], str | int) and not isinstance(message["id"], bool):
                tracked = message["id"]
        if rng.random() < 0.04:
            message["jsonrpc"] = rng.choice(["1.0", 2, None])
        if rng.random() < 0.03:
            del message["params"]
        return message, tracked

    def framing(self) -> bytes:
        """Bytes of one malformed frame (the next well-formed frame must still be read)."""
        rng = self.rng
        body = json.dumps({"jsonrpc": "2.0", "method": "memosight/stats", "id": None}).encode()
        kind = rng.randrange(14)
        if kind == 0:  # short body: the desynchronising case
            return b"Content-Length: %d\r\n\r\n" % (len(body) + rng.randint(1, 10**6)) + body[:5]
        if kind == 1:  # long body
            return frame(body)[:-3].replace(b"%d" % len(body), b"%d" % (len(body) - 7), 1)
        if kind == 2:
            value = rng.choice([b"x", b"-1", b"", b"1e3", b"0x10"])
            return b"Content-Length: " + value + b"\r\n\r\n"
        if kind == 3:
            return b"Content-Type: application/json\r\n\r\n" + body  # no Content-Length
        if kind == 4:
            return b"X-Big: " + b"h" * rng.randint(10_000, 200_000) + b"\r\n\r\n"
        if kind == 5:
            return b"Content-Length: %d\r\n\r\n" % (10**12) + body
        if kind == 6:
            return bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300)))
        if kind == 7:
            return frame(b"{this is not json")
        if kind == 8:
            return frame(b'{"jsonrpc": "2.0", "method": "x", "params": "\xff\xfe\xed\xa0\x80"}')
        if kind == 9:
            depth = rng.choice([1000, 100_000])
            return frame(b"[" * depth + b"]" * depth)
        if kind == 10:
            return frame(b'{"jsonrpc": "2.0", "id": ' + b"9" * 5000 + b', "method": "x"}')
        if kind == 11:
            return frame(b"")
        if kind == 12:
            return frame(rng.choice([b"[]", b'"x"', b"42", b"null", b"[{}]", b"true"]))
        return b"Content-Length: %d\n\n" % len(body) + body  # LF-only header


# -- sessions -----------------------------------------------------------------------------------


class Session:
    """One server under fuzz: start, restore settings, liveness check, stop."""

    def __init__(self, args: argparse.Namespace, root: Path, log: Any) -> None:
        self.args = args
        self.root = root
        self.log = log
        self.live_uri = (root / "live.py").as_uri()
        self.checks = 0
        self.server = self.start()
        if self.live(120) is None:
            raise RuntimeError("the server did not answer the first completion")

    def settings(self) -> dict:
        """The whole settings tree (defaults but for the model and a short completion): sent
        after each batch, it undoes whatever the fuzzed settings changed."""
        tree = settings_to_wire(Settings())
        tree["model"]["path"] = self.args.model
        tree["completion"]["maxNewTokens"] = 8
        tree["languages"] = {"python": True}
        return tree

    def start(self) -> StdioServer:
        env = python_env({"XDG_CACHE_HOME": str(self.root / ".cache")})
        server = StdioServer(server_command(self.args), env=env, cwd=self.root, stderr=self.log)
        settings = self.settings()
        server.answer_server_request = lambda r: answer_server_request(r, settings)
        init = {
            "processId": None,
            "rootUri": self.root.as_uri(),
            "capabilities": {
                "window": {"workDoneProgress": True},
                "workspace": {"configuration": True, "workspaceFolders": True},
            },
            "initializationOptions": settings,
            "workspaceFolders": [{"uri": self.root.as_uri(), "name": "fuzz"}],
        }
        if server.request("init", "initialize", init, 120) is None:
            raise RuntimeError("the server did not answer initialize")
        server.notify("initialized", {})
        server.notify(
            "textDocument/didOpen",
            {
                "textDocument": {
                    "uri": self.live_uri,
                    "languageId": "python",
                    "version": 1,
                    "text": LIVE_TEXT,
                }
            },
        )
        return server

    def restore(self) -> None:
        self.server.notify("workspace/didChangeConfiguration", {"settings": self.settings()})

    def live(self, timeout: float | None = None) -> dict | None:
        """A well-formed completion at a fixed cursor; its response, None when unanswered."""
        self.checks += 1
        params = {
            "textDocument": {"uri": self.live_uri},
            "position": LIVE_POSITION,
            "context": {"triggerKind": 1},
        }
        return self.server.request(
            f"live-{self.checks}",
            "textDocument/inlineCompletion",
            params,
            self.args.hang_seconds if timeout is None else timeout,
        )


DRAIN_SECONDS = 60.0


def drain(server: StdioServer, tracked: dict, timeout: float) -> float | None:
    """Seconds until every tracked request sent to `server` is answered (None: not in time)."""
    started = time.monotonic()
    waiting = [i for i, (to, _) in tracked.items() if to is server and i not in server.responses]
    for msg_id in waiting:
        left = timeout - (time.monotonic() - started)
        if left <= 0 or server.wait_for(msg_id, left) is None:
            return None
    return time.monotonic() - started


def server_command(args: argparse.Namespace) -> list[str]:
    return shlex.split(args.server) if args.server else list(SERVER_COMMAND)


def answer_server_request(request: dict, settings: dict) -> dict:
    if request.get("method") == "workspace/configuration":
        items = (request.get("params") or {}).get("items") or []
        return {"jsonrpc": "2.0", "id": request["id"], "result": [settings for _ in items]}
    return {"jsonrpc": "2.0", "id": request["id"], "result": None}


def run_main_session(args: argparse.Namespace, root: Path, log: Any) -> dict[str, Any]:
    rng = random.Random(args.seed)
    fuzzer = Fuzzer(rng, root, args.big_every)
    kinds: Counter[str] = Counter()
    tracked: dict[Any, tuple[StdioServer, str]] = {}  # id -> (to whom, what), for the report
    crashes: list[dict] = []
    hangs: list[dict] = []
    rss: list[int] = []
    started = time.monotonic()
    session = Session(args, root, log)
    liveness: dict[str, Any] = {"answered": 0, "withText": 0, "errors": 0}
    drains: list[float | None] = []
    live_ms: list[float] = []
    sent = batch_no = 0
    servers = [session.server]
    while sent < args.messages and time.monotonic() - started < args.seconds:
        batch_no += 1
        batch_end = min(args.messages, sent + args.batch)
        while sent < batch_end:
            roll = rng.random()
            if roll < 0.15:
                kinds["framing"] += 1
                session.server.write(fuzzer.framing())
                sent += 1
            elif roll < 0.162:  # a didChange flood with completions in between
                for _ in range(min(batch_end - sent, rng.randint(10, 60))):
                    if rng.random() < 0.08:
                        msg_id = fuzzer.next_id()
                        method = rng.choice(["textDocument/inlineCompletion", "memosight/context"])
                        params = {**fuzzer.docs.cursor(), "context": {"triggerKind": 1}}
                        session.server.send(
                            {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
                        )
                        if isinstance(msg_id, str | int) and not isinstance(msg_id, bool):
                            tracked[msg_id] = (session.server, method)
                    else:
                        params = fuzzer.docs.did_change()
                        session.server.notify("textDocument/didChange", params)
                    kinds["didChangeFlood"] += 1
                    sent += 1
            else:
                message, msg_id = fuzzer.shaped()
                kinds["wrongShape"] += 1
                session.server.send(message)
                if msg_id is not None:
                    tracked[msg_id] = (session.server, json.dumps(message)[:300])
                sent += 1
        # The batch's own requests first (each may be a model run: on a loaded machine they
        # queue for seconds), then the liveness completion on a server that has caught up.
        drained = drain(session.server, tracked, DRAIN_SECONDS)
        drains.append(drained)
        session.restore()
        asked = time.monotonic()
        answer = session.live() if drained is not None else None
        if answer is not None:
            live_ms.append((time.monotonic() - asked) * 1000)
            liveness["answered"] += 1
            if "error" in answer:
                liveness["errors"] += 1
            elif answer.get("result"):
                liveness["withText"] += 1
            status = proc_status(session.server.pid)
            if status:
                rss.append(status["rssKiB"])
            continue
        died = not session.server.alive()
        record: dict[str, Any] = {"batch": batch_no, "afterMessages": sent}
        if died:
            record["exitCode"] = session.server.proc.poll()
            crashes.append(record)
        else:
            hangs.append(record)
            if args.server:
                os.kill(session.server.pid, signal.SIGUSR1)  # a stack dump, where asked
            if drained is None:
                record["stuck"] = f"the batch's requests unanswered after {DRAIN_SECONDS:.0f}s"
            else:  # stuck or only slow? Wait a minute more for that answer before giving up
                late = session.server.wait_for(f"live-{session.checks}", 60)
                record["answeredAfterS"] = round(time.monotonic() - asked, 1) if late else None
        session.server.kill()
        session = Session(args, root, log)  # go on with a fresh server
        servers.append(session.server)
    # Close what was opened, then measure memory once more.
    for uri in sorted(fuzzer.docs.open):
        session.server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    drain(session.server, tracked, DRAIN_SECONDS)
    session.live(60)
    end = proc_status(session.server.pid)
    # Requests to a server killed for a hang are that hang, not unanswered on top of it.
    lost = {id(s) for s in servers[:-1]}
    unanswered = []
    for msg_id, (server, what) in tracked.items():
        if id(server) not in lost and msg_id not in server.responses:
            unanswered.append(f"{msg_id}: {what}")
    if unanswered and args.server:
        os.kill(session.server.pid, signal.SIGUSR1)  # a stack dump, where a wrapper asks
        time.sleep(1.0)
    done = [d for d in drains if d is not None]
    liveness["batchDrainMaxS"] = round(max(done), 1) if done else None
    liveness["p50Ms"] = round(statistics.median(live_ms), 1) if live_ms else None
    liveness["maxMs"] = round(max(live_ms), 1) if live_ms else None
    codes: Counter[int] = Counter()
    for server in servers:
        for response in list(server.responses.values()) + server.null_id_errors:
            if "error" in response:
                codes[int(response["error"].get("code", 0))] += 1
    bad_output = [line for s in servers for line in s.bad_output]
    exit_code = session.server.stop()
    return {
        "messages": sum(kinds.values()),
        "byKind": dict(kinds),
        "batches": batch_no,
        "seconds": round(time.monotonic() - started, 1),
        "crashes": crashes,
        "hangs": hangs,
        "liveness": liveness,
        "unanswered": len(unanswered),
        "unansweredIds": unanswered[:20],
        "trackedRequests": len(tracked),
        "errorResponses": {str(k): v for k, v in sorted(codes.items())},
        "parseErrors": sum(len(s.null_id_errors) for s in servers),
        "badOutput": bad_output[:20],
        "rssMiB": {
            "afterFirstBatch": round(rss[0] / 1024, 1) if rss else None,
            "peak": round(max(rss) / 1024, 1) if rss else None,
            "end": round(end.get("rssKiB", 0) / 1024, 1) if end else None,
        },
        "threadsEnd": end.get("threads"),
        "fdsEnd": end.get("fds"),
        "exitCode": exit_code,
    }


def run_lifecycle(args: argparse.Namespace, root: Path, log: Any, variant: int) -> dict[str, Any]:
    """Out-of-order lifecycle on a fresh server; returns counts and any rule it broke."""
    env = python_env({"XDG_CACHE_HOME": str(root / ".cache")})
    server = StdioServer(server_command(args), env=env, cwd=root, stderr=log)
    violations: list[str] = []
    sent = 0

    def expect(msg_id: Any, method: str, params: Any, code: int | None) -> None:
        nonlocal sent
        sent += 1
        # The first answer waits for the server to start (imports: seconds on a busy machine).
        answer = server.request(msg_id, method, params, args.hang_seconds if sent > 1 else 120)
        if answer is None:
            violations.append(f"{method} ({msg_id}) unanswered")
        elif code is None and "error" in answer:
            violations.append(f"{method} ({msg_id}) failed: {answer['error']}")
        elif code is not None and answer.get("error", {}).get("code") != code:
            violations.append(f"{method} ({msg_id}) answered {answer}, expected error {code}")

    cursor = {
        "textDocument": {"uri": (root / "a.py").as_uri()},
        "position": LIVE_POSITION,
        "context": {"triggerKind": 1},
    }
    for n, method in enumerate(["memosight/stats", "textDocument/inlineCompletion", "foo/bar"]):
        expect(f"pre-{n}", method, cursor, -32002)
    server.notify("textDocument/didOpen", {"textDocument": {"uri": "file:///x.py"}})
    sent += 1
    init: dict[str, Any] = {"processId": None, "rootUri": None, "capabilities": {}}
    expect("init", "initialize", init, None)
    expect("init-again", "initialize", init, -32600)
    server.notify("initialized", {})
    sent += 1
    if variant == 0:  # the frame: 5 bytes announced, 3 sent; what follows is answered
        server.write(b"Content-Length: 5\r\n\r\nabc")
        sent += 1
    expect("stats", "memosight/stats", {}, None)
    code = None
    if variant == 0:  # shutdown, then requests, then exit: code 0
        expect("shutdown", "shutdown", None, None)
        expect("after", "memosight/stats", {}, -32600)
        expect("after-2", "textDocument/completion", cursor, -32600)
        server.notify("textDocument/didOpen", {"textDocument": {"uri": "file:///y.py"}})
        server.notify("exit")
        sent += 2
        expected = 0
    elif variant == 1:  # exit without shutdown: code 1
        server.notify("exit")
        sent += 1
        expected = 1
    else:  # the client goes away: stdin closes, the process must leave by itself
        server.close_stdin()
        expected = 1
    try:
        code = server.proc.wait(args.hang_seconds)
    except Exception:
        violations.append(f"variant {variant}: still running {args.hang_seconds}s after the end")
        server.kill()
    if code is not None and code != expected:
        violations.append(f"variant {variant}: exit code {code}, expected {expected}")
    violations += server.bad_output
    return {"messages": sent, "violations": violations}


def run_lifecycles(args: argparse.Namespace, root: Path, log: Any) -> list[dict[str, Any]]:
    """The lifecycle sessions, side by side (each is mostly a server starting up)."""
    with ThreadPoolExecutor(max(1, min(3, args.lifecycle_sessions))) as pool:
        return list(
            pool.map(
                lambda variant: run_lifecycle(args, root, log, variant % 3),
                range(args.lifecycle_sessions),
            )
        )


def count_tracebacks(log_path: Path) -> int:
    try:
        return log_path.read_text(errors="replace").count("Traceback (most recent call last)")
    except OSError:
        return 0


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole fuzz run (main session, then the lifecycle sessions); the JSON report."""
    with tempfile.TemporaryDirectory(prefix="memosight-fuzz-") as tmp:
        root = Path(tmp) / "ws"
        (root / "sub").mkdir(parents=True)
        (root / "a.py").write_text("def helper(x):\n    return x * 2\n")
        (root / "sub" / "c.py").write_text("from a import helper\n\nvalue = helper(3)\n")
        log_path = Path(args.log_file) if args.log_file else Path(tmp) / "server.log"
        with open(log_path, "ab") as log:
            result = run_main_session(args, root, log)
            lifecycle = run_lifecycles(args, root, log)
        result["lifecycle"] = {
            "sessions": len(lifecycle),
            "messages": sum(s["messages"] for s in lifecycle),
            "violations": [v for s in lifecycle for v in s["violations"]],
        }
        result["messages"] += result["lifecycle"]["messages"]
        result["serverTracebacks"] = count_tracebacks(log_path)
        result["seed"] = args.seed
        result["model"] = args.model or "embedded"
    return result


def main(argv: list[str] | None = None) -> int:
    result = run(build_parser().parse_args(argv))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0 if not (result["crashes"] or result["hangs"]) else 1


__all__ = ["METHODS", "Fuzzer", "encode", "main", "run"]


if __name__ == "__main__":
    # As `memosight bench` does: the servers started here build the native kernels in the
    # foreground before they answer, so no measurement runs on torch's kernels by accident.
    os.environ.setdefault(native_kernels.ENV_SWITCH, "wait")
    sys.exit(main())
