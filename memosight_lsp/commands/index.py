"""`memosight index DIR`: index a workspace (or refresh its cache) with a progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memosight_lsp.workspace import ScanStats, WorkspaceIndex

from .common import emit, fail


def register(sub) -> None:
    parser = sub.add_parser("index", help="index a workspace folder", description=__doc__)
    parser.add_argument("dir", help="the workspace root")
    parser.add_argument(
        "--cache-dir",
        help="where the msgpack cache goes (default: $XDG_CACHE_HOME/memosight/<hash of DIR>)",
    )
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write a cache")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(run=run)


def scan_with_progress(index: WorkspaceIndex) -> ScanStats:
    """Scan, drawing a tqdm bar on stderr (stdout carries the result)."""
    from tqdm import tqdm

    with tqdm(desc="indexing", unit="file", file=sys.stderr, leave=False) as bar:

        def on_progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        return index.scan(on_progress=on_progress)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        return fail(f"no such folder: {args.dir}")
    index = WorkspaceIndex(root, cache_dir=args.cache_dir, use_cache=not args.no_cache)
    stats = scan_with_progress(index)
    definitions = sum(
        len(s.definitions) for s in (index.symbols(rel) for rel in index.files()) if s
    )
    summary = {
        "root": str(index.root),
        "files": stats.files,
        "parsed": stats.parsed,
        "fromCache": stats.reused,
        "definitions": definitions,
        "seconds": round(stats.seconds, 3),
        "cache": stats.cache_file,
    }
    if args.json:
        emit(summary, as_json=True)
    else:
        emit(
            f"indexed {stats.files} files ({stats.parsed} parsed, {stats.reused} from cache), "
            f"{definitions} definitions in {stats.seconds:.2f}s"
            + (f"; cache: {stats.cache_file}" if stats.cache_file else ""),
            as_json=False,
        )
    return 0
