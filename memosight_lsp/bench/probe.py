"""`memosight bench probe`: a person who opens a file, puts the cursor on a line and waits.

At seeded positions of pinned held-out projects (bench/corpora.py; by default Python,
TypeScript, Go and Rust), the real server over stdio, with the settings a user has (the defaults
unless `--settings`), gets one inline completion request per position and nothing else: no
keystroke follows. The position is the start of a random code line whose text is removed (its
indentation kept), in a file just opened. What the person sees is read as the editors show it
(bench/replay.py's pause: the first answer, replaced by the whole suggestion when the server says
it grew): the answer and its latency, what is visible 1 s and 3 s after the request, and whether
it is the whole suggestion. `--busy N` runs N spinning processes beside the server (a build).

    memosight bench probe [--model M] [--positions 12] [--langs python,go] [--busy 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import corpora
from .busy import busy
from .replay import PAUSE_LOOKS, MemoSightEditor, Pause, Target, server_options

DEFAULT_LANGUAGES = ("python", "typescript", "go", "rust")
OPEN_PAUSE_S = 0.5  # from opening the file to the request, as an editor's debounce and a glance


def positions(count: int, languages: Sequence[str], seed: int) -> list[tuple[Target, str]]:
    """`count` seeded positions spread over the languages' pinned projects: the file with one
    code line's text removed (its indentation kept) and that text, the line the person wants."""
    rng = random.Random(seed)
    trees = [(p, corpora.fetch(p)) for p in corpora.projects(languages)]
    out: list[tuple[Target, str]] = []
    for i in range(count * 20):  # a bound: some files have few lines worth completing
        if len(out) >= count:
            break
        project, root = trees[i % len(trees)]
        files = corpora.source_files(root, project.language)
        path = rng.choice(files)
        lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
        code = [n for n, line in enumerate(lines) if 8 <= len(line.strip()) <= 100 and n > 3]
        if not code:
            continue
        n = rng.choice(code)
        indent = lines[n][: len(lines[n]) - len(lines[n].lstrip())]
        before = "\n".join(lines[:n]) + "\n" + indent
        after = "\n" + "\n".join(lines[n + 1 :])
        name = f"line {n + 1}"
        target = Target(
            package=project.name, path=path, name=name, before=before, typed="", after=after
        )
        out.append((target, lines[n].strip()))
    return out


async def probe_one(editor: MemoSightEditor, target: Target) -> tuple[Pause, float, str | None]:
    line = target.before.count("\n")
    character = len(target.before) - (target.before.rfind("\n") + 1)
    await editor.open(target, target.before + target.after, line, character)
    await asyncio.sleep(OPEN_PAUSE_S)
    started = time.perf_counter()
    shown = await editor.suggest(line, character)
    latency = time.perf_counter() - started
    pause = await editor.pause(line, character, started, shown)
    await editor.close()
    return pause, latency, shown


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    languages = args.langs.split(",") if args.langs else list(DEFAULT_LANGUAGES)
    cases = positions(args.positions, languages, args.seed)
    roots = sorted({corpora.fetch(p) for p in corpora.projects(languages)})
    editor = MemoSightEditor(server_options(args), roots, 0, args.server_log)
    started = await editor.start()
    await editor.wait_indexed()
    rows: list[dict[str, Any]] = []
    latencies: list[float] = []
    try:
        for target, wanted in cases:
            pause, latency, shown = await probe_one(editor, target)
            latencies.append(latency)
            rows.append(
                {
                    "position": target.label,
                    "latencyS": round(latency, 3),
                    "answer": shown,
                    **{f"at{look:g}s": pause.at(look) for look in PAUSE_LOOKS},
                    "whole": pause.whole,
                    "finished": pause.finished,
                    "line": wanted,
                }
            )
            sys.stderr.write(f"probe: {target.label}: {latency:.2f} s, {shown!r}\n")
        final = await editor.stats()
    finally:
        await editor.stop()
    answered = [r for r in rows if r["answer"]]
    last = f"at{PAUSE_LOOKS[-1]:g}s"
    finished = [r for r in rows if r["finished"]]
    return {
        "model": started.get("model"),
        "precision": final.get("modelPrecision"),
        "settings": server_options(args),
        "busyProcesses": args.busy,
        "positions": len(rows),
        "nonEmptyAnswers": len(answered),
        **{
            f"nonEmptyAt{look:g}s": sum(bool(r[f"at{look:g}s"]) for r in rows)
            for look in PAUSE_LOOKS
        },
        "wholeAt3s": sum(r[last] == r["whole"] for r in finished),
        "finishedBy3s": len(finished),
        "latencyS": {
            "median": statistics.median(latencies) if latencies else None,
            "max": max(latencies) if latencies else None,
        },
        "rows": rows,
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memosight bench probe", description=__doc__)
    parser.add_argument(
        "--model", help="model folder or .gguf file, or `embedded` (default: the embedded one)"
    )
    parser.add_argument("--dtype", default="auto", help="model.dtype for the server")
    parser.add_argument("--quantization", default="auto", help="model.quantization")
    parser.add_argument("--settings", help="more server settings, as a JSON object")
    parser.add_argument("--positions", type=int, default=12)
    parser.add_argument("--langs", help="comma-separated (default: python,typescript,go,rust)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside it")
    parser.add_argument("--server-log", type=Path, help="the server's log (-vv) goes here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    with busy(args.busy):
        result = asyncio.run(measure(args))
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0
