"""`memosight bench latency`: the real server over stdio, driven by a JSON-RPC client.

Prints JSON with
- typeThrough: server-side latency of a type-through hit (p50/p99; goal p99 < 5 ms) and the
  client-side round trip;
- completion16: median end-to-end latency of a 16-token completion on a 1,000-line file;
- afterAccept: median end-to-end latency of the request right after accepting a suggestion
  (served by the speculative precompute when it finished while the user read the suggestion).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from .lsp_client import SERVER_COMMAND, StdioServer, first_text, inline_params, insertion

SOURCE_FILE = Path(sysconfig.get_paths()["stdlib"]) / "argparse.py"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memosight bench latency", description=__doc__)
    parser.add_argument("--model", help="model folder or .gguf file (default: the embedded model)")
    parser.add_argument("--lines", type=int, default=1000, help="lines in the test file")
    parser.add_argument("--samples", type=int, default=8, help="completions per measurement")
    parser.add_argument("--read-ms", type=int, default=600, help="time the user reads a hint")
    parser.add_argument("--device", default="cpu")
    return parser


def test_file(lines: int) -> list[str]:
    source = SOURCE_FILE.read_text().splitlines()
    return [source[i % len(source)] for i in range(lines)]


def cursors(rows: list[str], count: int) -> list[tuple[int, int]]:
    """Cursors mid-line in code lines spread over the file (the line's rest is cut off)."""
    picks = [
        i for i, row in enumerate(rows) if len(row.strip()) > 20 and row.strip()[0] not in "#\"'"
    ]
    step = max(1, len(picks) // (count + 1))
    return [(i, len(rows[i]) // 2) for i in picks[step::step][:count]]


class Bench:
    def __init__(self, client: StdioServer) -> None:
        self.client = client
        self.uris = 0

    def open(self, rows: list[str], cursor: tuple[int, int]) -> tuple[str, list[str]]:
        line, column = cursor
        rows = list(rows)
        rows[line] = rows[line][:column]
        self.uris += 1
        uri = f"file:///bench/latency_{self.uris}.py"
        text = "\n".join(rows) + "\n"
        document = {"uri": uri, "languageId": "python", "version": 1, "text": text}
        self.client.notify("textDocument/didOpen", {"textDocument": document})
        return uri, rows

    async def inline(self, uri: str, line: int, character: int) -> tuple[str | None, float]:
        started = time.perf_counter()
        params = inline_params(uri, line, character)
        result = await self.client.call("textDocument/inlineCompletion", params)
        elapsed = (time.perf_counter() - started) * 1000
        return first_text(result), elapsed

    def insert(self, uri: str, version: int, line: int, character: int, text: str) -> None:
        self.client.notify("textDocument/didChange", insertion(uri, version, line, character, text))

    async def stats(self) -> dict[str, Any]:
        return await self.client.call("memosight/stats", {})

    def configure(self, **completion: Any) -> None:
        settings = {"memosight": {"completion": completion}}
        self.client.notify("workspace/didChangeConfiguration", {"settings": settings})


def after(line: int, character: int, text: str) -> tuple[int, int]:
    rows = text.split("\n")
    return (
        (line, character + len(text)) if len(rows) == 1 else (line + len(rows) - 1, len(rows[-1]))
    )


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    client = StdioServer(SERVER_COMMAND)
    options = {
        "model": {"path": args.model, "device": args.device},
        "completion": {"maxNewTokens": 16, "multiline": "always", "precomputeNext": False},
    }
    await client.initialize(options)
    bench = Bench(client)
    rows = test_file(args.lines)
    spots = cursors(rows, args.samples)
    try:
        # Warm up: load the model, first forward passes.
        uri, _ = bench.open(rows, spots[0])
        for _ in range(2):
            await bench.inline(uri, *spots[0])

        # 16-token completions, each on a fresh buffer (no cache can help).
        before = await bench.stats()
        completion_ms, shown = [], []
        for spot in spots:
            uri, _ = bench.open(rows, spot)
            text, ms = await bench.inline(uri, *spot)
            completion_ms.append(ms)
            shown.append((uri, spot, text))
        mid = await bench.stats()

        # Type-through: type each suggestion, character by character (up to 24 per suggestion).
        client_ms = []
        for uri, (line, column), text in shown:
            version = 1
            for ch in (text or "")[: min(24, len(text or "") - 1)]:
                version += 1
                bench.insert(uri, version, line, column, ch)
                line, column = after(line, column, ch)
                _, ms = await bench.inline(uri, line, column)
                client_ms.append(ms)
        typed = await bench.stats()

        # After accepting: the precompute runs while the user reads the suggestion.
        bench.configure(maxNewTokens=16, multiline="always", precomputeNext=True)
        accept_ms = []
        for spot in spots:
            uri, _ = bench.open(rows, spot)
            text, _ = await bench.inline(uri, *spot)
            if not text:
                continue
            await asyncio.sleep(args.read_ms / 1000)
            bench.insert(uri, 2, *spot, text)
            _, ms = await bench.inline(uri, *after(*spot, text))
            accept_ms.append(ms)
        final = await bench.stats()
    finally:
        await client.shutdown()
    new_tokens = mid["meanTokens"]
    return {
        "model": final["model"],
        "fileLines": args.lines,
        "typeThrough": {
            "serverP50Ms": typed["typeThroughP50Ms"],
            "serverP99Ms": typed["typeThroughP99Ms"],
            "clientMedianMs": round(statistics.median(client_ms), 3) if client_ms else None,
            "hits": typed["typeThroughHits"] - mid["typeThroughHits"],
            "modelCallsWhileTyping": typed["modelCalls"] - mid["modelCalls"],
        },
        "completion16": {
            "medianMs": round(statistics.median(completion_ms), 1),
            "samples": len(completion_ms),
            "meanNewTokens": new_tokens,
            "modelCalls": mid["modelCalls"] - before["modelCalls"],
        },
        "afterAccept": {
            "medianMs": round(statistics.median(accept_ms), 1) if accept_ms else None,
            "samples": len(accept_ms),
            "readMs": args.read_ms,
            "precomputeHits": final["precomputeHits"] - typed["precomputeHits"],
            "precomputeCalls": final["precomputeCalls"] - typed["precomputeCalls"],
            "modelCalls": final["modelCalls"] - typed["modelCalls"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = asyncio.run(measure(args))
    print(json.dumps(result, indent=2))  # noqa: T201 - the benchmark's output is its JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
