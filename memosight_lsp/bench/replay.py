"""`memosight bench replay`: a person typing held-out function bodies, keystroke by keystroke,
through the real server over stdio (and, with `--llama-server URL`, the same keystrokes against
llama.cpp's `/infill` with a llama.vim-style client).

Functions are sampled (seeded) from installed third-party packages, which no model here was
trained on (bench/speed.py's HELD_OUT_PACKAGES). Each body (the statements after the signature
and docstring) is removed from its file, the file is opened, the cursor is put at the end of the
signature (the editor tells the server, `memosight/cursor`, as the plugins do on focus) and after
`--open-pause-ms` the body is typed one character at a time; a new line is one keystroke that
also inserts the next line's indentation (the editor indents). After every keystroke the editor
asks for an inline completion and waits for it; the time until it answers is that keystroke's
latency. A suggestion that is exactly what the person is about to type is accepted with one
keystroke, and so is its first line when that completes the line being typed. Keystrokes come no
faster than one per `--keystroke-ms`. A function is cut off after `--max-seconds` (300 s).

Prints JSON: per engine, characters (keystrokes the body takes without help), keystrokes made,
savedShare (1 - keystrokes / characters), requests, model calls, latency p50 / p90 / max, share
of requests over 300 ms, the first completion after opening a file (its latency, and the time
until the first non-empty suggestion), and the same per function. `--plot` draws latency over
the session for both engines.

The pause measure (`--pause-every K`, 0: off): at every K-th keystroke that goes to the model the
person stops typing for PAUSE_S and looks at the suggestion: what is visible 1 s and 3 s after the
keystroke (the first answer, replaced by the whole suggestion when the server says it grew and
the editor asks again, as the clients do), scored against what the person goes on to type; then
whether what is visible at 3 s is the whole suggestion, among the model calls that had finished by
then (asking again then is answered from the type-through cache). The pauses' own requests are
not part of the latency figures. `--busy N` runs N spinning processes beside the server for the
whole run (bench/busy.py).

llama.vim-style client (the anchor): the 60 lines before the cursor's line as `input_prefix`,
the cursor's line up to the cursor as `prompt`, the rest of that line and the 20 lines after as
`input_suffix`, no other files; greedy, `n_predict` 128, `t_max_predict_ms` 1000, the line's
indentation as `n_indent`, `cache_prompt`. Like llama.vim it keeps each answer under a hash of
its context and, when the text typed since matches the start of a kept answer, shows the rest
without a request (its type-through).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import bisect
import hashlib
import importlib.util
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from memosight_lsp.commands.common import EMBEDDED
from memosight_lsp.session.stats import percentile
from memosight_lsp.workspace import language_for

from .busy import busy
from .llama_server import LlamaServer, LlamaServerError
from .lsp_client import (
    SERVER_COMMAND,
    StdioServer,
    first_text,
    inline_params,
    insertion,
    with_settings,
)
from .speed import HELD_OUT_PACKAGES

SLOW_MS = 300.0
LLAMA_PREFIX_LINES, LLAMA_SUFFIX_LINES = 60, 20
LLAMA_CACHE_LOOKBACK = 128  # characters llama.vim removes from the end when looking up its cache
REQUEST_TIMEOUT_S = 120.0
PAUSE_S = 3.0  # a pause's length; what is visible is read at each of PAUSE_LOOKS
PAUSE_LOOKS = (1.0, 3.0)


# -- what is typed -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Target:
    """A function whose body is typed: the file is `before + typed + after`."""

    package: str
    path: Path
    name: str
    before: str  # up to the end of the signature (and docstring): the cursor starts here
    typed: str  # "\n" + the body's lines
    after: str  # the rest of the file, from the newline that ends the body

    @property
    def label(self) -> str:
        return f"{self.package}:{self.path.name}:{self.name}"


def package_files(packages: Sequence[str] = HELD_OUT_PACKAGES) -> dict[str, list[Path]]:
    """The installed packages' Python files (tests left out), per package."""
    out: dict[str, list[Path]] = {}
    for name in packages:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            files = [p for p in sorted(Path(folder).rglob("*.py")) if "/tests/" not in p.as_posix()]
            out.setdefault(name, []).extend(files)
    return out


def package_root(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _body_span(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int] | None:
    """0-based first line and end (exclusive) of the statements after the docstring."""
    body = node.body
    head = body[0] if body else None
    if isinstance(head, ast.Expr) and isinstance(head.value, ast.Constant):
        body = body[1:] if isinstance(head.value.value, str) else body
    if not body or node.end_lineno is None:
        return None
    return body[0].lineno - 1, node.end_lineno


def functions_in(path: Path, package: str, *, min_lines: int, max_lines: int) -> list[Target]:
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    if "\r" in text or "\t" in text or not text.isascii():
        return []  # columns are then plain character counts (the replay speaks UTF-16)
    lines = text.split("\n")
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        span = _body_span(node)
        if span is None:
            continue
        first, end = span
        body = lines[first:end]
        if not min_lines <= len(body) <= max_lines or first == 0:
            continue
        if any(row != row.rstrip() for row in body) or not body[0].strip():
            continue
        chars = sum(len(row.strip()) for row in body)
        if not 60 <= chars <= 900:
            continue
        out.append(
            Target(
                package=package,
                path=path,
                name=node.name,
                before="\n".join(lines[:first]),
                typed="\n" + "\n".join(body),
                after="\n" + "\n".join(lines[end:]) if end < len(lines) else "",
            )
        )
    return out


def sample_targets(
    count: int, seed: int, *, min_lines: int = 4, max_lines: int = 24
) -> list[Target]:
    """`count` functions, each from another file (packages taken in turn), seeded."""
    rng = random.Random(seed)
    by_package = package_files()
    packages = sorted(by_package)
    rng.shuffle(packages)
    chosen: list[Target] = []
    used: set[Path] = set()
    for round_ in range(count * 4):
        if len(chosen) >= count or not packages:
            break
        package = packages[round_ % len(packages)]
        files = [f for f in by_package[package] if f not in used]
        rng.shuffle(files)
        for path in files[:20]:
            found = functions_in(path, package, min_lines=min_lines, max_lines=max_lines)
            if found:
                chosen.append(rng.choice(found))
                used.add(path)
                break
    return chosen


def keystroke_units(typed: str) -> list[str]:
    """What each keystroke inserts: one character, or a newline with the next line's
    indentation (the editor indents)."""
    units: list[str] = []
    i = 0
    while i < len(typed):
        if typed[i] == "\n":
            j = i + 1
            while j < len(typed) and typed[j] == " ":
                j += 1
            units.append(typed[i:j])
            i = j
        else:
            units.append(typed[i])
            i += 1
    return units


def accepted_part(suggestion: str | None, remaining: str) -> str | None:
    """What one keystroke accepts of a suggestion: all of it when it is exactly what comes next,
    else its first line when that completes the line being typed; None otherwise."""
    if not suggestion:
        return None
    if remaining.startswith(suggestion):
        return suggestion
    first = suggestion.split("\n", 1)[0]
    ends_line = remaining[len(first) : len(first) + 1] in ("\n", "")
    if first and remaining.startswith(first) and ends_line:
        return first
    return None


# -- the editors -------------------------------------------------------------------------------


class Editor(Protocol):
    name: str

    async def open(self, target: Target, text: str, line: int, character: int) -> None: ...

    async def insert(self, line: int, character: int, text: str, document: str) -> None: ...

    async def suggest(self, line: int, character: int) -> str | None: ...

    async def pause(self, line: int, character: int, started: float, shown: str | None) -> Pause:
        """The person stops typing after the request sent at `started` (perf_counter) answered
        `shown`: what they see over PAUSE_S."""
        ...

    async def close(self) -> None: ...

    async def counters(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class Pause:
    """What a person who stopped typing after a keystroke saw."""

    visible: tuple[tuple[float, str | None], ...]  # (seconds after the keystroke, text) changes
    whole: str | None  # the whole suggestion, when the model call had finished by PAUSE_S
    finished: bool

    def at(self, seconds: float) -> str | None:
        """The text visible `seconds` after the keystroke."""
        text = None
        for when, shown in self.visible:
            if when <= seconds:
                text = shown
        return text


def pause_scores(pauses: Sequence[tuple[Pause, str]]) -> dict[str, Any]:
    """Pauses with the text the person went on to type: per look, the share showing something and
    the characters of it the person then typed; the share of finished calls whose whole
    suggestion was visible by the last look."""
    if not pauses:
        return {"pauses": 0}
    out: dict[str, Any] = {"pauses": len(pauses)}
    for look in PAUSE_LOOKS:
        shown = [(p.at(look) or "", rest) for p, rest in pauses]
        out[f"nonEmptyAt{look:g}s"] = round(sum(bool(t) for t, _ in shown) / len(shown), 4)
        out[f"typedCharsAt{look:g}s"] = sum(len(_common_prefix(t, rest)) for t, rest in shown)
    finished = [p for p, _ in pauses if p.finished]
    last = PAUSE_LOOKS[-1]
    out["finishedBy3s"] = len(finished)
    out["wholeAt3s"] = (
        round(sum(p.at(last) == p.whole for p in finished) / len(finished), 4) if finished else None
    )
    return out


def _common_prefix(a: str, b: str) -> str:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


class MemoSightEditor:
    """The real server over stdio, driven by the JSON-RPC client (lsp_client.py)."""

    name = "memosight"

    def __init__(
        self, options: dict[str, Any], roots: list[Path], threads: int, log: Path | None
    ) -> None:
        self.options = options
        self.roots = roots
        self.threads = threads
        self.log = log
        self.server: StdioServer | None = None
        self.statuses: list[dict[str, Any]] = []
        self.uri = ""
        self.version = 0
        self.updates: list[dict[str, Any]] = []  # memosight/completionUpdated, as they came

    @property
    def client(self) -> StdioServer:
        assert self.server is not None, "start() first"
        return self.server

    async def start(self, timeout_s: float = 900) -> dict[str, Any]:
        env = dict(os.environ)
        if self.threads:
            env.update(OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads))
        logging = ["--log-file", str(self.log), "-vv"] if self.log else []
        self.server = StdioServer([*SERVER_COMMAND, *logging], env=env)
        self.server.handlers["memosight/status"] = self.statuses.append
        self.server.handlers["memosight/completionUpdated"] = self.updates.append
        await self.client.initialize(self.options, self.roots)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = {s.get("state") for s in self.statuses}
            if "ready" in states or "error" in states:
                break
            await asyncio.sleep(0.2)
        return await self.stats()

    async def stats(self) -> dict[str, Any]:
        return await self.client.call("memosight/stats", {})

    async def wait_indexed(self, timeout_s: float = 300) -> None:
        """Until every folder's scan has reported its files (the index feeds the context)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            indexes = (await self.stats()).get("indexes") or []
            if len(indexes) >= len(self.roots) and all(i.get("files") for i in indexes):
                return
            await asyncio.sleep(0.5)

    async def open(self, target: Target, text: str, line: int, character: int) -> None:
        self.uri = target.path.as_uri()
        self.version = 1
        spec = language_for(str(target.path), None)
        document = {
            "uri": self.uri,
            "languageId": spec.name if spec else "plaintext",
            "version": 1,
            "text": text,
        }
        self.client.notify("textDocument/didOpen", {"textDocument": document})
        self.client.notify(
            "memosight/cursor",
            {"textDocument": {"uri": self.uri}, "position": {"line": line, "character": character}},
        )

    async def insert(self, line: int, character: int, text: str, document: str) -> None:
        self.version += 1
        change = insertion(self.uri, self.version, line, character, text)
        self.client.notify("textDocument/didChange", change)

    async def suggest(self, line: int, character: int) -> str | None:
        params = inline_params(self.uri, line, character)
        result = await self.client.call("textDocument/inlineCompletion", params, REQUEST_TIMEOUT_S)
        text = first_text(result)
        return text if isinstance(text, str) and text else None

    async def pause(self, line: int, character: int, started: float, shown: str | None) -> Pause:
        """As the editors do: when the server says the suggestion at this cursor grew, ask again
        and show the answer. At PAUSE_S, ask once more: a type-through hit means the model call
        had finished, and its answer is the whole suggestion."""
        visible = [(time.perf_counter() - started, shown)]
        seen = len(self.updates)
        while (left := PAUSE_S - (time.perf_counter() - started)) > 0:
            fresh = [u for u in self.updates[seen:] if self._here(u, line, character)]
            seen = len(self.updates)
            if fresh:
                text = await self.suggest(line, character)
                visible.append((time.perf_counter() - started, text))
                continue
            await asyncio.sleep(min(0.02, left))
        hits = (await self.stats()).get("typeThroughHits", 0)
        whole = await self.suggest(line, character)
        finished = (await self.stats()).get("typeThroughHits", 0) > hits
        return Pause(visible=tuple(visible), whole=whole, finished=finished)

    def _here(self, update: dict[str, Any], line: int, character: int) -> bool:
        document, position = update.get("textDocument") or {}, update.get("position") or {}
        return (
            document.get("uri") == self.uri
            and document.get("version") == self.version
            and (position.get("line"), position.get("character")) == (line, character)
        )

    async def close(self) -> None:
        self.client.notify("textDocument/didClose", {"textDocument": {"uri": self.uri}})

    async def counters(self) -> dict[str, Any]:
        stats = await self.stats()
        keys = (
            "modelCalls",
            "precomputeCalls",
            "typeThroughHits",
            "partialAnswers",
            "prewarms",
            "prewarmedTokens",
        )
        return {key: stats.get(key, 0) for key in keys}

    async def stop(self) -> None:
        await self.client.shutdown(30)


class LlamaVimEditor:
    """llama.cpp's /infill as llama.vim asks it, with llama.vim's cache of shown answers."""

    name = "llama.cpp"

    def __init__(self, server: LlamaServer) -> None:
        self.server = server
        self.lines: list[str] = []
        self.cache: dict[str, str] = {}
        self.requests = 0
        self.cache_hits = 0

    async def open(self, target: Target, text: str, line: int, character: int) -> None:
        self.lines = text.split("\n")

    async def insert(self, line: int, character: int, text: str, document: str) -> None:
        self.lines = document.split("\n")

    def context(self, line: int, character: int) -> tuple[str, str, str]:
        rows = self.lines
        prefix = "".join(row + "\n" for row in rows[max(0, line - LLAMA_PREFIX_LINES) : line])
        middle = rows[line][:character]
        after = rows[line + 1 : line + 1 + LLAMA_SUFFIX_LINES]
        suffix = rows[line][character:] + "\n" + "".join(row + "\n" for row in after)
        return prefix, middle, suffix

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()

    def cached(self, prefix: str, middle: str, suffix: str) -> str | None:
        hit = self.cache.get(self.key(prefix + middle + "\u00ce" + suffix))
        if hit is not None:
            return hit
        typed = prefix + middle
        for i in range(1, min(LLAMA_CACHE_LOOKBACK, len(typed)) + 1):
            content = self.cache.get(self.key(typed[:-i] + "\u00ce" + suffix))
            if content is not None and content.startswith(typed[-i:]) and len(content) > i:
                return content[i:]
        return None

    async def suggest(self, line: int, character: int) -> str | None:
        prefix, middle, suffix = self.context(line, character)
        hit = self.cached(prefix, middle, suffix)
        if hit is not None:
            self.cache_hits += 1
            return hit.rstrip() or None
        self.requests += 1
        body = {
            "input_prefix": prefix,
            "input_suffix": suffix,
            "input_extra": [],
            "prompt": middle,
            "n_predict": 128,
            "n_indent": len(middle) - len(middle.lstrip(" ")),
            "t_max_predict_ms": 1000,
            "cache_prompt": True,
        }
        result = await asyncio.to_thread(self.server.infill, body)
        self.cache[self.key(prefix + middle + "\u00ce" + suffix)] = result.text
        return result.text.rstrip() or None

    async def pause(self, line: int, character: int, started: float, shown: str | None) -> Pause:
        """llama.vim shows its one answer; nothing changes while the person waits."""
        answered = time.perf_counter() - started
        await asyncio.sleep(max(0.0, PAUSE_S - answered))
        return Pause(visible=((answered, shown),), whole=shown, finished=answered <= PAUSE_S)

    async def close(self) -> None:
        self.lines = []

    async def counters(self) -> dict[str, Any]:
        return {"modelCalls": self.requests, "typeThroughHits": self.cache_hits}


# -- one session -------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Typing:
    """One function being typed: where the person is in `typed`, and what they did."""

    target: Target
    ends: list[int]  # where each keystroke unit of `typed` ends
    pos: int = 0  # characters of `typed` in the document
    keystrokes: int = 0
    accepted_chars: int = 0
    accepts: int = 0
    latencies: list[float] = field(default_factory=list)
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (seconds, ms)
    pauses: list[tuple[Pause, str]] = field(default_factory=list)  # and what was typed next
    model_keystrokes: int = 0  # keystrokes whose request went to the model

    @classmethod
    def of(cls, target: Target) -> Typing:
        ends = list(itertools.accumulate(len(unit) for unit in keystroke_units(target.typed)))
        return cls(target=target, ends=ends)

    @property
    def document(self) -> str:
        t = self.target
        return t.before + t.typed[: self.pos] + t.after

    @property
    def remaining(self) -> str:
        return self.target.typed[self.pos :]

    @property
    def units_done(self) -> int:
        return bisect.bisect_right(self.ends, self.pos)

    def cursor(self) -> tuple[int, int]:
        head = self.target.before + self.target.typed[: self.pos]
        line = head.count("\n")
        return line, len(head) - (head.rfind("\n") + 1)

    def next_keystroke(self) -> str:
        """What the next keystroke types: the rest of the unit the cursor is in."""
        return self.target.typed[self.pos : self.ends[self.units_done]]


async def type_function(
    editor: Editor, target: Target, args: argparse.Namespace, clock_start: float
) -> dict[str, Any]:
    typing = Typing.of(target)
    before = await editor.counters()
    line, character = typing.cursor()
    opened = time.perf_counter()
    await editor.open(target, typing.document, line, character)
    await asyncio.sleep(args.open_pause_ms / 1000)
    first_ms: float | None = None
    first_suggestion_s: float | None = None
    cut_off = False
    suggestion: str | None = None
    last_key = 0.0
    while True:
        line, character = typing.cursor()
        calls = (await editor.counters()).get("modelCalls", 0) if args.pause_every else 0
        started = time.perf_counter()
        suggestion = await editor.suggest(line, character)
        elapsed = (time.perf_counter() - started) * 1000
        typing.latencies.append(elapsed)
        typing.timeline.append((started - clock_start, elapsed))
        if args.pause_every and (await editor.counters()).get("modelCalls", 0) > calls:
            typing.model_keystrokes += 1
            if typing.model_keystrokes % args.pause_every == 0:
                pause = await editor.pause(line, character, started, suggestion)
                typing.pauses.append((pause, typing.remaining))
        if first_ms is None:
            first_ms = elapsed
        if suggestion and first_suggestion_s is None:
            first_suggestion_s = time.perf_counter() - opened
        if typing.pos >= len(target.typed):
            break
        if time.perf_counter() - opened > args.max_seconds:
            cut_off = True
            break
        wait = args.keystroke_ms / 1000 - (time.perf_counter() - last_key)
        if wait > 0:
            await asyncio.sleep(wait)
        last_key = time.perf_counter()
        accepted = accepted_part(suggestion, typing.remaining)
        text = accepted if accepted is not None else typing.next_keystroke()
        line, character = typing.cursor()
        typing.pos += len(text)
        await editor.insert(line, character, text, typing.document)
        typing.keystrokes += 1
        if accepted is not None:
            typing.accepts += 1
            typing.accepted_chars += len(accepted)
    await editor.close()
    after = await editor.counters()
    characters = len(typing.ends)
    done = typing.units_done  # when cut off, the share covers what was typed

    return {
        "function": target.label,
        "characters": characters,
        "unitsDone": done,
        "keystrokes": typing.keystrokes,
        "accepts": typing.accepts,
        "acceptedChars": typing.accepted_chars,
        "savedShare": round(1 - typing.keystrokes / done, 4) if done else 0.0,
        "requests": len(typing.latencies),
        "cutOff": cut_off,
        "firstCompletionMs": round(first_ms or 0.0, 1),
        "firstSuggestionS": round(first_suggestion_s, 3) if first_suggestion_s else None,
        **{key: after[key] - before.get(key, 0) for key in after},
        **latency_summary(typing.latencies),
        "pause": pause_scores(typing.pauses),
        "timeline": typing.timeline,
        "pauses": typing.pauses,
    }


def latency_summary(latencies: Sequence[float]) -> dict[str, Any]:
    return {
        "p50Ms": percentile(latencies, 50),
        "p90Ms": percentile(latencies, 90),
        "maxMs": percentile(latencies, 100),  # rounded as the percentiles: p90 <= max
        "shareOver300Ms": (
            round(sum(ms > SLOW_MS for ms in latencies) / len(latencies), 4) if latencies else None
        ),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [ms for row in rows for _, ms in row["timeline"]]
    done = sum(row["unitsDone"] for row in rows)
    keystrokes = sum(row["keystrokes"] for row in rows)
    counters = [k for k in rows[0] if k in ("modelCalls", "precomputeCalls", "typeThroughHits")]
    counters += [k for k in ("partialAnswers", "prewarms", "prewarmedTokens") if k in rows[0]]
    firsts = [row["firstCompletionMs"] for row in rows]
    suggestions = [row["firstSuggestionS"] for row in rows if row["firstSuggestionS"] is not None]
    return {
        "functions": len(rows),
        "characters": sum(row["characters"] for row in rows),
        "charactersTyped": done,
        "keystrokes": keystrokes,
        "savedShare": round(1 - keystrokes / done, 4) if done else 0.0,
        "requests": len(latencies),
        **{key: sum(row[key] for row in rows) for key in counters},
        **latency_summary(latencies),
        "firstCompletionMs": {"median": statistics.median(firsts), "max": max(firsts)},
        "firstSuggestionS": (
            {"median": statistics.median(suggestions), "max": max(suggestions)}
            if suggestions
            else None
        ),
        "cutOff": sum(row["cutOff"] for row in rows),
        "pause": pause_scores([p for row in rows for p in row["pauses"]]),
    }


async def run_editor(
    editor: Editor, targets: list[Target], args: argparse.Namespace
) -> list[dict[str, Any]]:
    rows = []
    clock = time.perf_counter()
    for target in targets:
        row = await type_function(editor, target, args, clock)
        rows.append(row)
        sys.stderr.write(
            f"{editor.name}: {target.label}: saved {row['savedShare']:.0%}, "
            f"p50 {row['p50Ms']} ms, p90 {row['p90Ms']} ms, max {row['maxMs']} ms\n"
        )
    return rows


def plot(results: dict[str, list[dict[str, Any]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(11, 3.2 * len(results)), squeeze=False)
    for ax, (name, rows) in zip(axes[:, 0], results.items(), strict=True):
        x = 0
        for row in rows:
            ms = [max(0.1, m) for _, m in row["timeline"]]
            ax.scatter(range(x, x + len(ms)), ms, s=3)
            x += len(ms)
            ax.axvline(x, color="grey", lw=0.5)
        ax.axhline(SLOW_MS, color="tab:red", ls="--", lw=1)
        ax.set_yscale("log")
        summary = summarize(rows)
        ax.set(
            xlabel="request (functions in turn)",
            ylabel="latency (ms)",
            title=(
                f"{name}: saved {summary['savedShare']:.0%}, p50 {summary['p50Ms']} ms, "
                f"p90 {summary['p90Ms']} ms, max {summary['maxMs']} ms"
            ),
        )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {
        "model": {
            "path": None if args.model == EMBEDDED else args.model,
            "device": "cpu",
            "dtype": args.dtype,
            "quantization": args.quantization,
        },
    }
    return with_settings(options, args.settings)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    targets = sample_targets(args.functions, args.seed)
    out: dict[str, Any] = {
        "functions": [t.label for t in targets],
        "keystrokeMs": args.keystroke_ms,
        "openPauseMs": args.open_pause_ms,
        "maxSeconds": args.max_seconds,
        "pauseEvery": args.pause_every,
    }
    results: dict[str, list[dict[str, Any]]] = {}
    if not args.no_memosight:
        roots = sorted({package_root(t.package) for t in targets})
        editor = MemoSightEditor(server_options(args), roots, args.threads, args.server_log)
        started = await editor.start()
        await editor.wait_indexed()
        try:
            results["memosight"] = await run_editor(editor, targets, args)
            final = await editor.stats()
        finally:
            await editor.stop()
        out["memosight"] = {
            "model": started.get("model"),
            "precision": final.get("modelPrecision"),  # what the server ran (auto's pick)
            "settings": server_options(args),
            "latencyBudget": final.get("latency"),
            **summarize(results["memosight"]),
        }
    if args.llama_server:
        server = LlamaServer(args.llama_server)
        props = await asyncio.to_thread(server.props)
        llama = LlamaVimEditor(server)
        results["llama.cpp"] = await run_editor(llama, targets, args)
        out["llamaCpp"] = {
            "url": args.llama_server,
            "model": props.get("model_path"),
            **summarize(results["llama.cpp"]),
        }
    out["perFunction"] = {
        name: [{k: v for k, v in row.items() if k not in ("timeline", "pauses")} for row in rows]
        for name, rows in results.items()
    }
    if args.plot and results:
        plot(results, args.plot)
    if args.timeline:
        timelines = {name: [row["timeline"] for row in rows] for name, rows in results.items()}
        args.timeline.write_text(json.dumps(timelines))
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memosight bench replay", description=__doc__)
    parser.add_argument(
        "--model", help="model folder or .gguf file, or `embedded` (default: the embedded one)"
    )
    parser.add_argument("--dtype", default="auto", help="model.dtype for the server")
    parser.add_argument("--quantization", default="auto", help="model.quantization")
    parser.add_argument("--settings", help="more server settings, as a JSON object")
    parser.add_argument("--functions", type=int, default=4, help="function bodies to type")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--keystroke-ms", type=float, default=100, help="least time from keystroke to keystroke"
    )
    parser.add_argument(
        "--open-pause-ms", type=float, default=1000, help="from opening a file to typing"
    )
    parser.add_argument("--max-seconds", type=float, default=300, help="per function")
    parser.add_argument("--threads", type=int, default=0, help="the server's torch threads")
    parser.add_argument("--llama-server", metavar="URL", help="replay against its /infill too")
    parser.add_argument("--no-memosight", action="store_true", help="only the llama.cpp replay")
    parser.add_argument("--server-log", type=Path, help="the server's log (-vv) goes here")
    parser.add_argument("--plot", type=Path, help="latency over the session, as a PNG")
    parser.add_argument("--timeline", type=Path, help="write every request's latency (JSON)")
    parser.add_argument(
        "--pause-every",
        type=int,
        default=8,
        help="pause at every K-th keystroke that goes to the model (0: never)",
    )
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside it")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with busy(args.busy):
            result = asyncio.run(measure(args))
        result["busyProcesses"] = args.busy
    except LlamaServerError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    print(json.dumps(result, indent=2))  # noqa: T201 - the benchmark's output is its JSON
    return 0


if __name__ == "__main__":
    sys.exit(main())
