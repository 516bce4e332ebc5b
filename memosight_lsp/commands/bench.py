"""`memosight bench NAME ...`: run a benchmark harness; each prints JSON and may draw plots."""

from __future__ import annotations

import argparse
import importlib
import os

from memosight_lsp.inference import native_kernels

# bench name -> module under memosight_lsp.bench exposing main(argv: list[str]) -> int. The
# benchmarks a user runs against their own model; the reliability harness (fuzz, soak) is not
# shipped: tools/reliability/ in the source tree (docs/reliability.md).
BENCHMARKS = {
    "speed": "speed",
    "context": "context_recall",
    "indexing": "indexing",
    "latency": "latency",
    "compress": "compress",
    "model": "model_quality",
    "quality": "quality",
    "replay": "replay",
    "engines": "engines",
    "packing": "packing",
    "probe": "probe",
    "startup": "startup",
    "corpora": "corpora",
    "edits": "edits",
}


def register(sub) -> None:
    parser = sub.add_parser(
        "bench",
        help="run a benchmark (" + ", ".join(BENCHMARKS) + ")",
        description=__doc__,
    )
    parser.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    parser.add_argument("rest", nargs=argparse.REMAINDER, help="the benchmark's own options")
    parser.set_defaults(run=run)


# Benchmarks of servers as a user starts them: the kernels are built as a user's server builds
# them (in the background, torch's kernels meanwhile).
AS_STARTED = frozenset({"startup"})


def run(args: argparse.Namespace) -> int:
    # A benchmark measures the native kernels where they can run: built first, in the foreground
    # (a user's server builds them in the background and runs torch's meanwhile), and inherited
    # by the servers it starts.
    if args.name not in AS_STARTED:
        os.environ.setdefault(native_kernels.ENV_SWITCH, "wait")
    module = importlib.import_module(f"memosight_lsp.bench.{BENCHMARKS[args.name]}")
    return int(module.main(list(args.rest)))
