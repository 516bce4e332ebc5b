"""`memosight complete FILE --line L --character C`: complete as an editor would, print the text."""

from __future__ import annotations

import argparse
from pathlib import Path

from memosight_lsp.completion.positions import utf16_to_index
from memosight_lsp.completion.service import CompletionEngine, CompletionRequest
from memosight_lsp.workspace import WorkspaceIndex

from .common import (
    ModelLoadError,
    add_model_options,
    add_position_arguments,
    emit,
    fail,
    load_model_from_args,
    read_source_file,
)
from .index import scan_with_progress


def register(sub) -> None:
    parser = sub.add_parser("complete", help="complete a file at a position", description=__doc__)
    add_position_arguments(parser)
    parser.add_argument(
        "--root",
        help="workspace root: index it (cached) and rank definitions from its other files into "
        "the context; without it the context is FILE alone",
    )
    parser.add_argument("--cache-dir", help="index cache folder (default: per-user cache)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write a cache")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--budget", type=int, default=1024, help="context budget in tokens")
    parser.add_argument("--multiline", choices=("auto", "always", "never"), default="auto")
    parser.add_argument(
        "--plain",
        action="store_true",
        help="plain greedy decoding, no acceleration (the reference output)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        text = read_source_file(args.file)
    except ValueError as err:
        return fail(str(err))
    lines = text.split("\n")
    if not 0 <= args.line < len(lines):
        return fail(f"--line {args.line} is outside the file (it has {len(lines)} lines)")
    if args.character < 0 or args.max_new_tokens < 1:
        return fail("--character must be >= 0 and --max-new-tokens >= 1")
    try:
        loaded = load_model_from_args(args)
    except ModelLoadError as err:
        return fail(str(err))
    index = None
    if args.root:
        root = Path(args.root)
        if not root.is_dir():
            return fail(f"no such folder: {args.root}")
        index = WorkspaceIndex(root, cache_dir=args.cache_dir, use_cache=not args.no_cache)
        scan_with_progress(index)
    engine = CompletionEngine(loaded, time_passes=False)  # one completion: timing would not pay
    request = CompletionRequest(
        text=text,
        line=args.line,
        column=utf16_to_index(lines[args.line], args.character),
        path=str(Path(args.file).resolve()),
        index=index,
        max_new_tokens=args.max_new_tokens,
        budget_tokens=args.budget,
        multiline=args.multiline,
        mid_word="complete",
        plain=args.plain,
    )
    completion = engine.complete(request)
    if args.json:
        # prepare() is deterministic: this is the prompt the completion was decoded from.
        emit({**completion.to_json(), "prompt": engine.prepare(request).text}, as_json=True)
    else:
        emit(completion.text, as_json=False)
    return 0
