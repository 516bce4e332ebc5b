"""`memosight complete FILE --line L --character C`: complete as an editor would, print the text
(what goes at the cursor; a line written through the code after the cursor, `t *testing.T) {` at
`func f(|)`, replaces that code: `--json` says so with `"replaces_rest": true`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import get_args

from memosight_lsp.config import MultilinePolicy, Settings
from memosight_lsp.pipeline.request import CompletionRequest
from memosight_lsp.workspace import WorkspaceIndex

from .common import (
    ModelLoadError,
    add_model_options,
    add_position_arguments,
    emit,
    engine_from_args,
    fail,
    read_position,
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
    defaults = Settings()  # as the editor completes by default (config.py)
    parser.add_argument("--max-new-tokens", type=int, default=defaults.completion.max_new_tokens)
    parser.add_argument(
        "--budget",
        type=int,
        default=defaults.context.budget_tokens,
        help="context budget in tokens",
    )
    parser.add_argument(
        "--multiline", choices=get_args(MultilinePolicy), default=defaults.completion.multiline
    )
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
        text, column = read_position(args)
    except ValueError as err:
        return fail(str(err))
    if args.max_new_tokens < 1:
        return fail("--max-new-tokens must be >= 1")
    try:
        engine = engine_from_args(args)
    except ModelLoadError as err:
        return fail(str(err))
    index = None
    if args.root:
        root = Path(args.root)
        if not root.is_dir():
            return fail(f"no such folder: {args.root}")
        index = WorkspaceIndex(root, cache_dir=args.cache_dir, use_cache=not args.no_cache)
        scan_with_progress(index)
    request = CompletionRequest(
        text=text,
        line=args.line,
        column=column,
        path=str(Path(args.file).resolve()),
        index=index,
        max_new_tokens=args.max_new_tokens,
        budget_tokens=args.budget,
        multiline=args.multiline,
        plain=args.plain,
    )
    completion = engine.complete(request)
    if args.json:
        # prepare() is deterministic: this is the prompt the completion was decoded from.
        emit({**completion.to_json(), "prompt": engine.prepare(request).text}, as_json=True)
    else:
        emit(completion.text, as_json=False)
    return 0
