"""Count a token n-gram table for a model from source code (drafts for speculative decoding).

Example: memosight train ngrams --model ./my-model --data ./src --minutes 10
The model labels the code with its own next-token choices (what drafts must match); the table is
saved as ngrams.npz next to the model (or in the user cache when the model folder
is read-only) and is used automatically whenever that model is loaded. It fits the code it was
counted on: a workspace's own table drafts its identifiers and idioms too.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from memosight_lsp.inference.ngram_model import MAX_ORDER, NGRAMS_FILE

from .fit_cli import add_model_data_arguments, data_folders
from .ngrams import DEFAULT_MIN_COUNT, build_table


def register_cli(parser: argparse.ArgumentParser) -> None:
    add_model_data_arguments(parser, "folders of source code to count")
    parser.add_argument(
        "--min-count",
        type=int,
        default=DEFAULT_MIN_COUNT,
        help="keep contexts seen at least this often (higher: smaller table)",
    )
    parser.add_argument(
        "--max-order", type=int, default=MAX_ORDER, help="longest context, in tokens"
    )
    parser.add_argument(
        "--labels",
        choices=("model", "text"),
        default="model",
        help="count the model's own next-token choices (default) or the text's next tokens",
    )
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="time the model may spend labelling"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")


def run_cli(args: argparse.Namespace) -> int:
    import torch

    from memosight_lsp.inference.heads import lm_head_fingerprint, output_folder
    from memosight_lsp.inference.loading import ModelLoadError, load_model

    if args.min_count < 1 or not 1 <= args.max_order <= 8 or args.minutes <= 0:
        sys.stderr.write(
            "error: --min-count must be >= 1, --max-order within 1..8 and --minutes above 0\n"
        )
        return 2
    data = data_folders(args)
    if data is None:
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        loaded = load_model(args.model, allow_pickle=True)
    except ModelLoadError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    try:
        table, report = build_table(
            [Path(d) for d in data],
            loaded,
            model_fingerprint=lm_head_fingerprint(loaded.model),
            labels=args.labels,
            minutes=args.minutes,
            max_order=args.max_order,
            min_count=args.min_count,
        )
    except ValueError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    folder = Path(args.out) if args.out else output_folder(loaded.source, loaded.model)
    path = table.save(folder / NGRAMS_FILE)
    sys.stderr.write(json.dumps(asdict(report), indent=2) + "\n")
    sys.stderr.write(f"n-gram table saved as {path}\n")
    return 0
