"""Continue training a model on long windows of whole folders so it uses long prompts.

Example: memosight train long-context --corpus /usr/lib/python3.11 --out runs/long --minutes 60
The result (OUT/final) is a model folder with positions opened up to --seq-len; OUT/positions.json
holds its validation loss per position bucket before and after.
"""

from __future__ import annotations

import argparse
import json
import sys

from memosight_lsp.inference.loading import ModelLoadError

from .base_cli import add_corpus_arguments
from .long_context import LongContextConfig, train_long_context


def register_cli(parser: argparse.ArgumentParser) -> None:
    defaults = LongContextConfig(corpus=[], out="")
    parser.add_argument("--model", default=None, help="model folder (default: the embedded one)")
    add_corpus_arguments(parser)
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="wall-clock budget")
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len, help="window length")
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--resume", action="store_true", help="continue from --out/checkpoint")
    parser.add_argument("--seed", type=int, default=defaults.seed)


def run_cli(args: argparse.Namespace) -> int:
    if args.seq_len < 16 or args.batch_size < 1 or args.minutes <= 0:
        sys.stderr.write("error: --seq-len must be 16 or more; --batch-size, --minutes positive\n")
        return 2
    cfg = LongContextConfig(
        model=args.model,
        corpus=args.corpus,
        out=args.out,
        minutes=args.minutes,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        lr=args.lr,
        threads=args.threads,
        resume=args.resume,
        seed=args.seed,
    )
    try:
        final = train_long_context(cfg)
    except (ValueError, ModelLoadError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    report = json.loads((final / "positions.json").read_text())
    sys.stderr.write(json.dumps({k: report[k] for k in ("before", "after")}, indent=2) + "\n")
    sys.stderr.write(f"final model: {final}\n")
    return 0
