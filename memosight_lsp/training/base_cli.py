"""Train the tokenizer and the small base code model from scratch (FIM objective).

Example: memosight train base --corpus /usr/lib/python3.11 --out runs/base --minutes 60
"""

from __future__ import annotations

import argparse
import sys

from .base import BaseTrainingConfig, train_base


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """--corpus and --out, shared by the trainers that read a corpus into a run folder."""
    parser.add_argument(
        "--corpus",
        nargs="+",
        required=True,
        metavar="DIR",
        help="folders of Python source (never the packages you evaluate on)",
    )
    parser.add_argument("--out", required=True, help="output folder (checkpoints, final model)")


def register_cli(parser: argparse.ArgumentParser) -> None:
    defaults = BaseTrainingConfig(corpus=[], out="")
    add_corpus_arguments(parser)
    parser.add_argument(
        "--minutes",
        type=float,
        default=defaults.minutes,
        help="wall-clock budget; the learning rate decays over it",
    )
    parser.add_argument("--resume", action="store_true", help="continue from --out/checkpoint")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
    parser.add_argument("--hidden-size", type=int, default=defaults.hidden_size)
    parser.add_argument("--layers", type=int, default=defaults.num_layers)
    parser.add_argument("--heads", type=int, default=defaults.num_heads)
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)


def run_cli(args: argparse.Namespace) -> int:
    cfg = BaseTrainingConfig(
        corpus=args.corpus,
        out=args.out,
        minutes=args.minutes,
        resume=args.resume,
        seed=args.seed,
        vocab_size=args.vocab_size,
        hidden_size=args.hidden_size,
        num_layers=args.layers,
        num_heads=args.heads,
        intermediate_size=3 * args.hidden_size,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        lr=args.lr,
    )
    final = train_base(cfg)
    sys.stderr.write(f"final model: {final}\n")
    return 0
