"""Indexing speed on a large real workspace (default: a copy of the CPython standard library).

Measures a cold scan (no cache), a warm start (from the msgpack cache), re-indexing one changed
file, and the time to build a 1,024-token context at random cursors of that workspace.

    python -m memosight_lsp.bench.indexing [--root DIR] [--contexts 200]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from memosight_lsp.context import build_context
from memosight_lsp.session.stats import percentile
from memosight_lsp.workspace import WorkspaceIndex

from .context_recall import load_counter


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memosight bench indexing", description=__doc__)
    parser.add_argument("--root", help="workspace to index (default: the CPython stdlib)")
    parser.add_argument("--tokenizer", help="tokenizer.json or model folder used for counting")
    parser.add_argument("--edits", type=int, default=30, help="single-file re-indexes timed")
    parser.add_argument("--contexts", type=int, default=200, help="context builds timed")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    source = Path(args.root or sysconfig.get_paths()["stdlib"])
    count, counter_name = load_counter(args.tokenizer)
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        # A private copy, so one-file edits do not touch the real files.
        root = Path(tmp) / "ws"
        shutil.copytree(source, root, ignore=shutil.ignore_patterns("__pycache__", "site-packages"))
        cache_dir = Path(tmp) / "cache"
        cold = WorkspaceIndex(root, cache_dir=cache_dir)
        cold_stats = cold.scan()
        warm = WorkspaceIndex(root, cache_dir=cache_dir)
        warm_stats = warm.scan()
        files = warm.files()
        py_files = [f for f in files if f.endswith(".py")]
        one_file: list[float] = []
        for rel in rng.sample(py_files, min(args.edits, len(py_files))):
            path = root / rel
            path.write_text(path.read_text(encoding="utf-8", errors="replace") + "\n# edited\n")
            started = time.perf_counter()
            warm.update_file(path)
            one_file.append((time.perf_counter() - started) * 1000)
        build: list[float] = []
        for rel in rng.choices(py_files, k=args.contexts):
            text = warm.text(rel) or ""
            lines = text.split("\n")
            line = rng.randrange(len(lines))
            column = len(lines[line]) - len(lines[line].lstrip())
            started = time.perf_counter()
            packed = build_context(
                text=text,
                path=str(root / rel),
                line=line,
                column=column,
                language_id="python",
                budget_tokens=1024,
                count_tokens=count,
                index=warm,
            )
            build.append((time.perf_counter() - started) * 1000)
            assert packed.prompt_tokens <= 1024
        cache_bytes = warm.cache_file.stat().st_size if warm.cache_file else 0
    result = {
        "root": str(source),
        "files": cold_stats.files,
        "definitions": sum(len(s.definitions) for s in map(warm.symbols, files) if s),
        "coldSeconds": round(cold_stats.seconds, 2),
        "warmSeconds": round(warm_stats.seconds, 2),
        "warmParsed": warm_stats.parsed,
        "cacheMiB": round(cache_bytes / 2**20, 1),
        "oneFileMs": {"p50": percentile(one_file, 50), "p95": percentile(one_file, 95)},
        "contextBuildMs": {
            "counter": counter_name,
            "p50": round(statistics.median(build), 2),
            "p95": percentile(build, 95),
            "max": round(max(build), 2),
        },
    }
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
