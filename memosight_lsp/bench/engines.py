"""`memosight bench engines`: N simulated editors typing against one serving engine.

Each editor is a real language server (`memosight-lsp` over stdio, its own process, driven by
bench/lsp_client.py) holding one real file of the standard library cut at a line; it types
the rest of that file one character at a time, `--keystroke-ms` apart on average (half to twice
that, seeded). As editors do, it asks for an inline completion once `--debounce-ms` passed
without a keystroke; a request still open at the next keystroke is cancelled
(`$/cancelRequest`, newest wins). At the end of a word the user waits for the answer and reads
it (`--read-ms`) before typing on.

Prints JSON, one entry per editor count: requests answered (with a suggestion or empty),
cancelled and lost (no answer within 60 s, or an error: must be 0), client-side latency of the
answered requests (p50 / p95 / max; `engineBound` leaves out answers the type-through cache
gave, `--no-cache` sends every request to the engine), completions per second, the engine's
prefix-cache hit rate (vLLM: its /metrics counters over the run; others: what the engine
reported per request, summed from memosight/stats) and the servers' own counters summed.

    memosight bench engines --backend vllm --url http://127.0.0.1:8000 --editors 1 4 16
    memosight bench engines --local PATH --editors 1 4     # one in-process model per editor
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memosight_lsp.engines import http as engine_http
from memosight_lsp.engines.vllm import VllmClient, prefix_cache_counts
from memosight_lsp.session.stats import percentile

from .lsp_client import (
    REQUEST_CANCELLED,
    SERVER_COMMAND,
    ResponseError,
    StdioServer,
    first_text,
    inline_params,
    insertion,
)

STDLIB = Path(sysconfig.get_paths()["stdlib"])
# One file per editor (16 distinct ones), typed from START_LINE on.
SOURCES = (
    "argparse.py", "textwrap.py", "csv.py", "shlex.py", "difflib.py", "fractions.py",
    "heapq.py", "calendar.py", "string.py", "tokenize.py", "pprint.py", "glob.py",
    "fnmatch.py", "bisect.py", "queue.py", "dataclasses.py",
)  # fmt: skip
START_LINE = 120
LOST_AFTER_S = 60.0  # an open request with no answer by then is lost
COUNTED = (
    "requests", "modelCalls", "typeThroughHits", "precomputeCalls", "precomputeHits",
    "cancelled", "superseded", "dropped", "empty", "engineErrors", "engineTimeouts",
    "engineUnavailable", "engineCachedTokens", "enginePrefilledTokens",
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memosight bench engines", description=__doc__)
    parser.add_argument("--backend", default="vllm", help="vllm, llama.cpp, ollama or openai")
    parser.add_argument("--url", help="the engine's base URL")
    parser.add_argument("--name", help="model.name: the model the engine serves")
    parser.add_argument("--local", metavar="PATH", help="no engine: one in-process model each")
    # The server's defaults: each editor's server runs what `auto` picks (the report says what).
    parser.add_argument("--dtype", default="auto", help="--local: model.dtype")
    parser.add_argument("--quantization", default="auto", help="--local: model.quantization")
    parser.add_argument("--editors", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--keystrokes", type=int, default=300, help="per editor")
    parser.add_argument("--keystroke-ms", type=int, default=100, help="between keystrokes")
    parser.add_argument("--read-ms", type=int, default=300, help="pause after an answer")
    parser.add_argument(
        "--debounce-ms", type=int, default=150, help="editor-side debounce (Neovim plugin's)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--timeout-ms", type=int, default=20_000, help="model.timeoutMs")
    parser.add_argument("--no-cache", action="store_true", help="type-through and precompute off")
    parser.add_argument("--out", help="also write the JSON here")
    return parser


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)  # answered, ms
    engine_bound: list[float] = field(default_factory=list)  # answered, not by type-through
    answered: int = 0
    with_text: int = 0
    cancelled: int = 0
    lost: int = 0
    errors: list[str] = field(default_factory=list)


class Editor:
    """One language server and the file its user types."""

    def __init__(self, number: int, workspace: Path, args: argparse.Namespace) -> None:
        self.number = number
        self.args = args
        source = (STDLIB / SOURCES[number % len(SOURCES)]).read_text().split("\n")
        self.path = workspace / f"editor{number}_{SOURCES[number % len(SOURCES)]}"
        self.text = "\n".join(source[:START_LINE]) + "\n"
        self.to_type = "\n".join(source[START_LINE:])[: args.keystrokes]
        self.uri = self.path.as_uri()
        self.version = 1
        self.server: StdioServer | None = None
        self.tally = Tally()
        self.pending: tuple[str, asyncio.Future, float] | None = None
        self.requests = 0
        self.ids = 0

    def options(self) -> dict[str, Any]:
        args = self.args
        if args.local:
            model: dict[str, Any] = {
                "path": args.local,
                "dtype": args.dtype,
                "quantization": args.quantization,
            }
        else:
            model = {"backend": args.backend, "url": args.url, "timeoutMs": args.timeout_ms}
            if args.name:
                model["name"] = args.name
        completion = {"maxNewTokens": args.max_new_tokens}
        if args.no_cache:
            completion.update(typeThrough=False, precomputeNext=False)
        return {"model": model, "completion": completion}

    @property
    def client(self) -> StdioServer:
        assert self.server is not None, "start() first"
        return self.server

    async def start(self, workspace: Path) -> None:
        self.server = StdioServer(SERVER_COMMAND)
        await self.client.initialize(self.options(), [workspace])
        document = {"uri": self.uri, "languageId": "python", "version": 1, "text": self.text}
        self.client.notify("textDocument/didOpen", {"textDocument": document})

    def cursor(self) -> tuple[int, int]:
        line = self.text.count("\n")
        return line, len(self.text) - self.text.rfind("\n") - 1

    def type_char(self, ch: str) -> None:
        line, character = self.cursor()
        self.version += 1
        self.text += ch
        change = insertion(self.uri, self.version, line, character, ch)
        self.client.notify("textDocument/didChange", change)

    def ask(self) -> None:
        """An inline completion request at the cursor; the one still open is cancelled."""
        if self.pending is not None and not self.pending[1].done():
            self.client.notify("$/cancelRequest", {"id": self.pending[0]})
        self.ids += 1
        msg_id = f"e{self.number}-{self.ids}"
        params = inline_params(self.uri, *self.cursor())
        future = self.client.send_request("textDocument/inlineCompletion", params, msg_id)
        started = time.perf_counter()
        future.add_done_callback(lambda f: self.record(f, started))
        self.pending = (msg_id, future, started)
        self.requests += 1

    def record(self, future: asyncio.Future, started: float) -> None:
        ms = (time.perf_counter() - started) * 1000
        tally = self.tally
        if future.cancelled():
            tally.lost += 1
            return
        err = future.exception()
        if isinstance(err, ResponseError) and err.code == REQUEST_CANCELLED:
            tally.cancelled += 1
            return
        if err is not None:
            tally.errors.append(f"{type(err).__name__}: {err}")
            return
        tally.answered += 1
        tally.latencies.append(ms)
        if first_text(future.result()):
            tally.with_text += 1

    async def type_all(self) -> None:
        """Keystrokes `keystroke_ms` apart on average (half to twice that, seeded per editor);
        a request once `debounce_ms` passed without one, as editors debounce; at a word's end
        the user waits for the answer and reads it."""
        args = self.args
        rng = random.Random(self.number)
        for index, ch in enumerate(self.to_type):
            self.type_char(ch)
            word_end = ch.isspace() and index > 0 and not self.to_type[index - 1].isspace()
            gap = rng.uniform(0.5, 2.0) * args.keystroke_ms / 1000
            if word_end:
                await asyncio.sleep(args.debounce_ms / 1000)
                self.ask()
                await self.settle(self.pending[1])  # type: ignore[index]
                await asyncio.sleep(args.read_ms / 1000)
            elif gap > args.debounce_ms / 1000:
                await asyncio.sleep(args.debounce_ms / 1000)
                self.ask()  # the next keystroke may come before the answer: it cancels it
                await asyncio.sleep(gap - args.debounce_ms / 1000)
            else:
                await asyncio.sleep(gap)
        if self.pending is not None:
            await self.settle(self.pending[1])

    async def settle(self, future: asyncio.Future) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(future), LOST_AFTER_S)
        except asyncio.TimeoutError:
            future.cancel()  # counted as lost by record()
        except Exception:
            pass  # recorded by record()

    async def stats(self) -> dict[str, Any]:
        return await self.client.call("memosight/stats", {})

    async def stop(self) -> None:
        await self.client.shutdown(10)


async def wait_ready(editor: Editor, timeout_s: float = 300) -> None:
    """Until the server's model (or engine) is ready: a first completion at the start text."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        numbers = await editor.stats()
        if numbers.get("state") == "ready":
            return
        if numbers.get("state") == "error":
            raise RuntimeError(f"editor {editor.number}: {numbers.get('modelMessage')}")
        editor.ask()  # the first request starts the load / the probe
        await editor.settle(editor.pending[1])  # type: ignore[index]
        await asyncio.sleep(0.5)
    raise TimeoutError(f"editor {editor.number}: the model is not ready after {timeout_s} s")


def engine_counters(args: argparse.Namespace) -> dict[str, float] | None:
    if args.local or args.backend != "vllm" or not args.url:
        return None
    try:
        return VllmClient(args.url).metrics(engine_http.deadline_in(10))
    except engine_http.EngineError:
        return None


async def run(args: argparse.Namespace, editors: int) -> dict[str, Any]:
    workspace = Path(tempfile.mkdtemp(prefix="memosight-bench-engines-"))
    crew = [Editor(i, workspace, args) for i in range(editors)]
    try:
        for editor in crew:
            await editor.start(workspace)
        await asyncio.gather(*(wait_ready(e) for e in crew))
        for editor in crew:  # the warm-up's requests are not part of the run
            editor.tally = Tally()
            editor.requests = 0
        before = [await e.stats() for e in crew]
        metrics_before = engine_counters(args)
        started = time.perf_counter()
        await asyncio.gather(*(e.type_all() for e in crew))
        wall = time.perf_counter() - started
        metrics_after = engine_counters(args)
        after = [await e.stats() for e in crew]
    finally:
        for editor in crew:
            with contextlib.suppress(Exception):  # one that will not stop must not lose the numbers
                await editor.stop()
        shutil.rmtree(workspace, ignore_errors=True)
    return summarize(args, crew, before, after, metrics_before, metrics_after, wall)


def summarize(args, crew, before, after, metrics_before, metrics_after, wall) -> dict[str, Any]:
    latencies = [ms for e in crew for ms in e.tally.latencies]
    server = {
        name: sum(
            int(a.get(name) or 0) - int(b.get(name) or 0)
            for a, b in zip(after, before, strict=True)
        )
        for name in COUNTED
    }
    requests = sum(e.requests for e in crew)
    answered = sum(e.tally.answered for e in crew)
    cancelled = sum(e.tally.cancelled for e in crew)
    lost = sum(e.tally.lost for e in crew) + sum(len(e.tally.errors) for e in crew)
    engine_calls = server["modelCalls"] + server["precomputeCalls"]
    # Answers from the type-through cache cost no model call: the slowest `answered - calls`
    # requests are taken as the engine's (an engine answer never beats a cache hit).
    engine_answers = max(0, answered - server["typeThroughHits"])
    engine_bound = sorted(latencies)[len(latencies) - engine_answers :] if engine_answers else []
    reported = server["engineCachedTokens"] + server["enginePrefilledTokens"]
    hit_rate: dict[str, Any] = {
        "reportedPerRequest": round(server["engineCachedTokens"] / reported, 4)
        if reported
        else None
    }
    if metrics_before is not None and metrics_after is not None:
        queries0, hits0 = prefix_cache_counts(metrics_before)
        queries1, hits1 = prefix_cache_counts(metrics_after)
        queried = queries1 - queries0
        hit_rate["engineMetrics"] = round((hits1 - hits0) / queried, 4) if queried else None
        hit_rate["queriedTokens"] = int(queried)
        name = "vllm:request_success_total"  # summed over finished_reason
        finished = metrics_after.get(name, 0.0) - metrics_before.get(name, 0.0)
        hit_rate["engineRequestsFinished"] = int(finished)
    return {
        "editors": len(crew),
        # What each in-process model ran in (--local: auto's pick unless asked); None: an engine.
        "precision": sorted({str(a["modelPrecision"]) for a in after if a.get("modelPrecision")})
        or None,
        "requests": requests,
        "answered": answered,
        "withSuggestion": sum(e.tally.with_text for e in crew),
        "cancelled": cancelled,
        "lost": lost,
        "errors": [err for e in crew for err in e.tally.errors][:5],
        "accountedFor": answered + cancelled + lost == requests,
        "latencyMs": _spread(latencies),
        "engineBoundLatencyMs": _spread(engine_bound),
        "wallSeconds": round(wall, 2),
        "engineCallsPerSecond": round(engine_calls / wall, 3) if wall else None,
        "suggestionsPerSecond": round(sum(e.tally.with_text for e in crew) / wall, 3),
        "prefixCacheHitRate": hit_rate,
        "server": server,
    }


def _spread(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    return {
        "n": len(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": round(max(values), 3),
        "mean": round(statistics.fmean(values), 3),
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.local and not args.url:
        print("memosight bench engines: --url (or --local PATH) is needed", file=sys.stderr)  # noqa: T201
        return 2
    runs: list[dict[str, Any]] = []
    results: dict[str, Any] = {
        "engine": {"local": args.local}
        if args.local
        else {"backend": args.backend, "url": args.url, "name": args.name},
        "machine": f"{os.cpu_count()} CPU cores (engine, servers and this client share them)",
        "workload": {
            "keystrokesPerEditor": args.keystrokes,
            "keystrokeMs": args.keystroke_ms,
            "readMs": args.read_ms,
            "debounceMs": args.debounce_ms,
            "maxNewTokens": args.max_new_tokens,
            "typeThroughAndPrecompute": not args.no_cache,
            "startLine": START_LINE,
        },
        "runs": runs,
    }
    for editors in args.editors:
        runs.append(asyncio.run(run(args, editors)))
        print(json.dumps(runs[-1]), file=sys.stderr)  # noqa: T201 - progress
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)  # noqa: T201 - the benchmark's output is its JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
