"""`memosight context FILE --line L --character C`: show the context a completion would get."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memosight_lsp.config import ContextSettings, Settings
from memosight_lsp.context import PackedContext, build_context
from memosight_lsp.workspace import WorkspaceIndex

from .common import add_position_arguments, emit, fail, read_position
from .index import scan_with_progress

log = logging.getLogger(__name__)


def register(sub) -> None:
    parser = sub.add_parser(
        "context", help="print the packed context at a position", description=__doc__
    )
    add_position_arguments(parser)
    parser.add_argument(
        "--root", help="workspace root (default: the nearest folder above FILE with .git)"
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=ContextSettings().budget_tokens,  # as the editor packs by default (config.py)
        help="context budget in tokens",
    )
    parser.add_argument(
        "--model",
        metavar="PATH",
        help="count tokens with this model folder's tokenizer (default: the embedded model's)",
    )
    parser.add_argument("--cache-dir", help="index cache folder (default: per-user cache)")
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write a cache")
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.set_defaults(run=run)


def find_root(file: Path) -> Path:
    for folder in file.resolve().parents:
        if (folder / ".git").exists():
            return folder
    return file.resolve().parent


def token_counter(model: str | None) -> tuple[Callable[[str], int], Any]:
    """(count_tokens, FIM format or None) from the model's tokenizer; chars/4 if there is none."""
    from memosight_lsp.inference.fim import detect_fim_format
    from memosight_lsp.inference.loading import ModelLoadError, load_tokenizer

    try:
        tokenizer = load_tokenizer(model)
    except ModelLoadError as err:
        if model:
            raise
        log.warning("no tokenizer (%s); estimating tokens as characters / 4", err)
        return (lambda text: (len(text) + 3) // 4), None

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count, detect_fim_format(tokenizer.get_vocab())


def to_json(packed: PackedContext, prompt: str) -> dict[str, Any]:
    return {
        "promptTokens": packed.prompt_tokens,
        "snippets": [
            {
                "path": s.path,
                "startLine": s.start_line,
                "endLine": s.end_line,
                "symbol": s.symbol,
                "kind": s.kind,
                "tokens": s.tokens,
                "score": s.score,
            }
            for s in packed.snippets
        ],
        "prompt": prompt,
        "prefix": packed.prefix,
        "suffix": packed.suffix,
    }


def run(args: argparse.Namespace) -> int:
    from memosight_lsp.inference.loading import ModelLoadError
    from memosight_lsp.pipeline.request import packing_for

    try:
        text, column = read_position(args)
    except ValueError as err:
        return fail(str(err))
    root = Path(args.root) if args.root else find_root(Path(args.file))
    if not root.is_dir():
        return fail(f"no such folder: {root}")
    try:
        count, fim = token_counter(args.model)
    except ModelLoadError as err:
        return fail(str(err))
    index = WorkspaceIndex(root, cache_dir=args.cache_dir, use_cache=not args.no_cache)
    scan_with_progress(index)
    packed = build_context(
        text=text,
        path=str(Path(args.file).resolve()),
        line=args.line,
        column=column,
        language_id=None,
        budget_tokens=args.budget,
        count_tokens=count,
        index=index,
        packing=packing_for(Settings()),  # as completions pack it by default
    )
    # What the model reads: FIM order when the model has FIM tokens, else just the prefix.
    prompt = fim.build(packed.prefix, packed.suffix) if fim is not None else packed.prefix
    if args.json:
        emit(to_json(packed, prompt), as_json=True)
    else:
        emit(prompt, as_json=False)
    return 0
