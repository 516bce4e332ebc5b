"""`memosight train base|long-context|heads|ngrams`: train the embedded model or its drafters."""

from __future__ import annotations

import importlib

# what -> module under memosight_lsp.training exposing register_cli(parser) and run_cli(args)
TRAINERS = {
    "base": "base_cli",
    "long-context": "long_context_cli",
    "heads": "heads_cli",
    "ngrams": "ngrams_cli",
}


def register(sub) -> None:
    parser = sub.add_parser(
        "train", help="train the base model, prediction heads or n-gram table", description=__doc__
    )
    whats = parser.add_subparsers(dest="what", metavar="WHAT", required=True)
    for what, module_name in TRAINERS.items():
        module = importlib.import_module(f"memosight_lsp.training.{module_name}")
        child = whats.add_parser(
            what, help=(module.__doc__ or what).strip().splitlines()[0], description=module.__doc__
        )
        module.register_cli(child)
        child.set_defaults(run=module.run_cli)
