"""`python -m tools.reliability.soak`: simulated typing against the real server over stdio,
for a long time.

A typist works through `--files` Python files (stdlib modules, on disk in a temporary workspace
and open as buffers) at `--keys-per-second`: each keystroke is a didChange followed by an inline
completion request, and a request still unanswered when the next key comes is cancelled with
$/cancelRequest, as editors do. At the end of each typed line the typist stops for up to
`--pause-ms` to read the suggestion; now and then one is accepted (typed in whole). In the first
minute the typist visits every file once, then moves to another one every `--switch-seconds`.
Once a minute the server's RSS, threads and open file descriptors are read from /proc and the
client-side latency of the minute's answered requests summarised.

Prints JSON: `minutes` (one row per minute: requests, answered, cancelled, errors, p50/p99 ms,
rssMiB, threads, fds) and `summary`: every request answered or cancelled (`unanswered` must be
0), `rssGrowthPct` from the end of the first minute to the end, thread and fd ranges after the
first minute, and p99 of the first full minute against the last.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from memosight_lsp.bench.lsp_client import SERVER_COMMAND, StdioServer, added_text
from memosight_lsp.inference import native_kernels
from tools.reliability.procs import proc_status, python_env

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SOURCES = (
    "textwrap.py",
    "shlex.py",
    "glob.py",
    "fnmatch.py",
    "string.py",
    "argparse.py",
    "csv.py",
    "heapq.py",
    "bisect.py",
    "calendar.py",
    "difflib.py",
    "inspect.py",
)
TYPED_FROM = ("ftplib.py", "pprint.py", "optparse.py", "gettext.py")
CANCELLED = -32800


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability.soak", description=__doc__)
    parser.add_argument("--model", help="model folder (default: the embedded model)")
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--lines", type=int, default=400, help="lines kept of each source file")
    parser.add_argument("--keys-per-second", type=float, default=8.0)
    parser.add_argument(
        "--pause-ms",
        type=float,
        default=1500,
        help="at the end of each typed line the typist stops this long to read the suggestion",
    )
    parser.add_argument("--accept-rate", type=float, default=0.05, help="per answered hint")
    parser.add_argument(
        "--switch-seconds",
        type=float,
        default=20.0,
        help="time in one file; in the first minute the typist visits every file once, so the "
        "caches of all of them are warm when the RSS baseline is taken",
    )
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--interval", type=float, default=60.0, help="seconds per report row")
    parser.add_argument("--log-file", help="the server's log (default: discarded)")
    parser.add_argument(
        "--server", help="the server command (default: this Python's -m memosight_lsp)"
    )
    return parser


class Typist:
    """The documents as the editor holds them, and where the cursor types next."""

    def __init__(self, rng: random.Random, texts: dict[str, list[str]], snippets: list[str]):
        self.rng = rng
        self.lines = texts  # uri -> lines
        self.versions = dict.fromkeys(texts, 1)
        self.snippets = snippets
        self.uri = ""
        self.line = self.column = 0
        self.pending = ""

    def switch(self) -> None:
        """Another file, a fresh line under a random code line, a line of code to type there."""
        self.uri = self.rng.choice(sorted(self.lines))
        lines = self.lines[self.uri]
        code = [
            i for i, row in enumerate(lines) if row.strip() and not row.lstrip().startswith("#")
        ]
        self.line = self.rng.choice(code or [0])
        self.column = len(lines[self.line])
        self.pending = "\n" + self.rng.choice(self.snippets)

    def key(self) -> tuple[dict, bool]:
        """The didChange params of the next keystroke, and whether it ended a line."""
        if not self.pending:
            self.pending = "\n" + self.rng.choice(self.snippets)
        char, self.pending = self.pending[0], self.pending[1:]
        return self.insert(char), not self.pending

    def insert(self, text: str) -> dict:
        lines = self.lines[self.uri]
        at = {"line": self.line, "character": self.column}
        row = lines[self.line]
        head, tail = row[: self.column], row[self.column :]
        pieces = (head + text + tail).split("\n")
        lines[self.line : self.line + 1] = pieces
        self.line += len(pieces) - 1
        self.column = len(pieces[-1]) - len(tail)
        self.versions[self.uri] += 1
        return {
            "textDocument": {"uri": self.uri, "version": self.versions[self.uri]},
            "contentChanges": [{"range": {"start": at, "end": at}, "text": text}],
        }

    def cursor(self) -> dict:
        return {
            "textDocument": {"uri": self.uri},
            "position": {"line": self.line, "character": self.column},
            "context": {"triggerKind": 2},
        }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))], 1)


def workspace(root: Path, files: int, lines: int) -> dict[str, list[str]]:
    texts: dict[str, list[str]] = {}
    for name in SOURCES[:files]:
        rows = (STDLIB / name).read_text().splitlines()[:lines]
        path = root / name
        path.write_text("\n".join(rows) + "\n")
        texts[path.as_uri()] = [*rows, ""]
    return texts


def snippets() -> list[str]:
    rows: list[str] = []
    for name in TYPED_FROM:
        for row in (STDLIB / name).read_text().splitlines():
            stripped = row.strip()
            if 12 <= len(stripped) <= 70 and not stripped.startswith(("#", '"', "'")):
                rows.append(row.rstrip())
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="memosight-soak-") as tmp:
        root = Path(tmp) / "ws"
        root.mkdir()
        texts = workspace(root, args.files, args.lines)
        typist = Typist(rng, texts, snippets())
        log = open(args.log_file, "ab") if args.log_file else None  # noqa: SIM115
        env = python_env({"XDG_CACHE_HOME": str(Path(tmp) / "cache")})
        command = shlex.split(args.server) if args.server else SERVER_COMMAND
        server = StdioServer(command, env=env, cwd=tmp, stderr=log or subprocess.DEVNULL)
        try:
            return soak(args, server, root, texts, typist, rng)
        finally:
            server.stop()
            if log is not None:
                log.close()


def soak(
    args: argparse.Namespace,
    server: StdioServer,
    root: Path,
    texts: dict[str, list[str]],
    typist: Typist,
    rng: random.Random,
) -> dict[str, Any]:
    options = {
        "model": {"path": args.model},
        "completion": {"maxNewTokens": args.max_new_tokens},
    }
    init = {
        "processId": None,
        "rootUri": root.as_uri(),
        "capabilities": {},
        "initializationOptions": options,
        "workspaceFolders": [{"uri": root.as_uri(), "name": "soak"}],
    }
    if server.request("init", "initialize", init, 120) is None:
        raise RuntimeError("the server did not answer initialize")
    server.notify("initialized", {})
    for uri, lines in texts.items():
        item = {"uri": uri, "languageId": "python", "version": 1, "text": "\n".join(lines)}
        server.notify("textDocument/didOpen", {"textDocument": item})
    typist.switch()
    first = server.request("warm", "textDocument/inlineCompletion", typist.cursor(), 300)
    if first is None:
        raise RuntimeError("the model did not answer a first completion")

    sent: dict[str, float] = {}  # id -> when
    outcome: dict[str, str] = {}  # id -> answered | cancelled | error
    latency: dict[str, float] = {}
    rows: list[dict[str, Any]] = []
    period = 1.0 / args.keys_per_second
    started = time.monotonic()
    end = started + args.minutes * 60
    next_row = started + args.interval
    next_switch = started + 60 / max(1, len(texts))
    live: str | None = None  # the request of the last keystroke
    n = 0
    row_ids: list[str] = []
    tick = started
    while tick < end:
        tick += period
        time.sleep(max(0.0, tick - time.monotonic()))
        collect(server, sent, outcome, latency)
        if live is not None and live not in outcome:
            server.notify("$/cancelRequest", {"id": live})  # typed on: the editor gives up
        if live is not None and outcome.get(live) == "answered" and rng.random() < args.accept_rate:
            text = hint_of(server.responses[live])
            if text:
                server.notify("textDocument/didChange", typist.insert(text))
        if time.monotonic() > next_switch:
            typist.switch()
            warming = time.monotonic() - started < 60  # the first minute: a tour of every file
            stay = 60 / max(1, len(texts)) if warming else args.switch_seconds
            next_switch = time.monotonic() + stay
        params, line_end = typist.key()
        server.notify("textDocument/didChange", params)
        n += 1
        live = f"k{n}"
        sent[live] = time.monotonic()
        row_ids.append(live)
        server.send(
            {
                "jsonrpc": "2.0",
                "id": live,
                "method": "textDocument/inlineCompletion",
                "params": typist.cursor(),
            }
        )
        if line_end and args.pause_ms > 0:  # read the suggestion before typing on
            server.wait_for(live, args.pause_ms / 1000)
            tick = time.monotonic()
        if time.monotonic() >= next_row:
            rows.append(report_row(server, row_ids, outcome, latency, started))
            row_ids = []
            next_row += args.interval
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(outcome) < len(sent):
        collect(server, sent, outcome, latency)
        time.sleep(0.1)
    if row_ids:  # the keystrokes after the last full row: part of that row
        if rows:
            row_ids = rows.pop()["ids"] + row_ids
        rows.append(report_row(server, row_ids, outcome, latency, started))
    for row in rows:
        row.pop("ids")
    stats = server.request("stats", "memosight/stats", {}, 30)
    return {"minutes": rows, "summary": summarise(rows, sent, outcome), "serverStats": stats}


def hint_of(response: dict) -> str | None:
    items = (response.get("result") or {}).get("items") or []
    return added_text(items[0]) if items else None


def collect(server: StdioServer, sent, outcome, latency) -> None:
    """Record the responses that came in since the last call (`outcome` keeps the rest out)."""
    waiting = sent.keys() - outcome.keys()
    for msg_id in [i for i in waiting if i in server.responses]:
        response = server.responses[msg_id]
        if "error" in response:
            cancelled = response["error"].get("code") == CANCELLED
            outcome[msg_id] = "cancelled" if cancelled else "error"
        else:
            outcome[msg_id] = "answered"
            latency[msg_id] = (server.received_at[msg_id] - sent[msg_id]) * 1000


def report_row(server, ids, outcome, latency, started) -> dict[str, Any]:
    times = [latency[i] for i in ids if i in latency]
    status = proc_status(server.pid)
    return {
        "ids": ids,
        "minute": round((time.monotonic() - started) / 60, 2),
        "requests": len(ids),
        "answered": sum(outcome.get(i) == "answered" for i in ids),
        "cancelled": sum(outcome.get(i) == "cancelled" for i in ids),
        "errors": sum(outcome.get(i) == "error" for i in ids),
        "p50Ms": percentile(times, 50),
        "p99Ms": percentile(times, 99),
        "rssMiB": round(status.get("rssKiB", 0) / 1024, 1),
        "threads": status.get("threads"),
        "fds": status.get("fds"),
    }


def summarise(rows, sent, outcome) -> dict[str, Any]:
    first = next((i for i, r in enumerate(rows) if r["minute"] >= 1.0), 0)  # end of minute 1
    after_first = rows[first + 1 :] or rows[first:]
    base = rows[first]["rssMiB"] if rows else None
    last = rows[-1]["rssMiB"] if rows else None
    p99s = [r["p99Ms"] for r in rows if r["p99Ms"] is not None]
    return {
        "requests": len(sent),
        "answered": sum(v == "answered" for v in outcome.values()),
        "cancelled": sum(v == "cancelled" for v in outcome.values()),
        "errors": sum(v == "error" for v in outcome.values()),
        "unanswered": len(sent) - len(outcome),
        "rssAfterFirstMinuteMiB": base,
        "rssEndMiB": last,
        "rssGrowthPct": round(100 * (last - base) / base, 1) if base and last else None,
        "threads": [
            min(r["threads"] or 0 for r in after_first),
            max(r["threads"] or 0 for r in after_first),
        ],
        "fds": [min(r["fds"] or 0 for r in after_first), max(r["fds"] or 0 for r in after_first)],
        "p99FirstMs": p99s[0] if p99s else None,
        "p99LastMs": p99s[-1] if p99s else None,
        "p99MedianMs": statistics.median(p99s) if p99s else None,
    }


def spread(rows: list[dict[str, Any]], key: str) -> list[int]:
    """[lowest, highest] of a column."""
    values = [r[key] for r in rows if r[key] is not None]
    return [min(values), max(values)] if values else []


def main(argv: list[str] | None = None) -> int:
    result = run(build_parser().parse_args(argv))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0 if result["summary"]["unanswered"] == 0 and not result["summary"]["errors"] else 1


if __name__ == "__main__":
    # As `memosight bench` does: the servers started here build the native kernels in the
    # foreground before they answer, so no measurement runs on torch's kernels by accident.
    os.environ.setdefault(native_kernels.ENV_SWITCH, "wait")
    sys.exit(main())
