"""Entry points: `memosight` (subcommands) and `memosight-lsp` (the language server).

Logging goes to stderr or a file, never stdout: for the server stdout is the protocol, and for the
CLI it carries the result.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from memosight_lsp import __version__

# Subcommand modules under memosight_lsp.commands, in the order `--help` lists them.
SUBCOMMANDS = ("complete", "context", "index", "models", "train", "export", "bench")

log = logging.getLogger("memosight_lsp")


def setup_logging(verbosity: int, log_file: str | None = None) -> None:
    level = logging.WARNING - 10 * min(verbosity, 2)
    handler: logging.Handler = (
        logging.FileHandler(log_file, encoding="utf-8")
        if log_file
        else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def named_subcommand(argv: Sequence[str]) -> str | None:
    """The subcommand argv names (its first word that is not an option or an option's value),
    or None when it names none (`--help`, a typo): then every subcommand registers."""
    words = iter(argv)
    for word in words:
        if word == "--log-file":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in SUBCOMMANDS else None
    return None


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of `only`: a subcommand's module imports what it
    runs (torch, transformers: seconds), so `memosight models --list` imports none of that."""
    parser = argparse.ArgumentParser(
        prog="memosight", description="Fast multi-token code completion from a local model."
    )
    parser.add_argument("--version", action="version", version=f"memosight {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument("--log-file", help="write logs to this file instead of stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in (only,) if only else SUBCOMMANDS:
        importlib.import_module(f"memosight_lsp.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(named_subcommand(argv)).parse_args(argv)
    setup_logging(args.verbose, args.log_file)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130


def build_lsp_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memosight-lsp", description="MemoSight language server (stdio by default)."
    )
    parser.add_argument("--version", action="version", version=f"memosight-lsp {__version__}")
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdio (the default)")
    parser.add_argument("--tcp", action="store_true", help="listen on TCP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1", help="TCP host (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=2087, help="TCP port (default 2087)")
    parser.add_argument("--log-file", help="write logs to this file instead of stderr")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument(
        "--keep-alive",
        type=float,
        metavar="SECONDS",
        help="keep the model loaded this long after the editor leaves, for the next one "
        "(default: MEMOSIGHT_KEEP_ALIVE, else 300; 0 serves in this process alone)",
    )
    parser.add_argument("--model-host", metavar="SOCKET", help=argparse.SUPPRESS)
    return parser


def lsp_main(argv: Sequence[str] | None = None) -> int:
    args = build_lsp_parser().parse_args(argv)
    setup_logging(max(args.verbose, 1), args.log_file)
    from memosight_lsp.host_process.rendezvous import keep_alive_seconds

    keep_alive_s = keep_alive_seconds(args.keep_alive)
    if args.model_host:
        from memosight_lsp.host_process.host import run_host

        return run_host(Path(args.model_host), keep_alive_s)
    if not args.tcp and keep_alive_s > 0:
        from memosight_lsp.host_process.relay import relay_to_host

        code = relay_to_host(keep_alive_s, host_arguments(args))
        if code is not None:
            logging.shutdown()
            os._exit(code)  # the relay's stdin reader may still block: leave at once
    from memosight_lsp.server.main import serve  # heavy imports only when serving

    serve(tcp=args.tcp, host=args.host, port=args.port)
    return 0


def host_arguments(args: argparse.Namespace) -> list[str]:
    """What a model host started for this editor is told of our own arguments."""
    words = ["-v"] * args.verbose
    if args.log_file:
        words += ["--log-file", os.path.abspath(args.log_file)]
    return words
