"""Train Medusa prediction heads for a model by self-distillation on code (speeds up decoding).

Example: memosight train heads --model ./my-model --data ./src --heads 4 --minutes 15
Heads are saved as heads.safetensors + heads.json next to the model (or in the user cache when
the model folder is read-only) and are used automatically whenever that model is loaded.
"""

from __future__ import annotations

import argparse
import json
import sys

from .fit_cli import add_model_data_arguments, data_folders
from .heads import HeadsTrainingConfig, train_heads


def register_cli(parser: argparse.ArgumentParser) -> None:
    defaults = HeadsTrainingConfig(model=None, data=[])
    add_model_data_arguments(parser, "folders of source code to fit the heads on")
    parser.add_argument("--heads", type=int, default=defaults.num_heads, help="number of heads")
    parser.add_argument("--minutes", type=float, default=defaults.minutes, help="time budget")
    parser.add_argument("--gamma", type=float, default=defaults.gamma, help="loss decay per head")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--seed", type=int, default=defaults.seed)


def run_cli(args: argparse.Namespace) -> int:
    if args.heads < 1:
        sys.stderr.write("error: --heads must be at least 1\n")
        return 2
    data = data_folders(args)
    if data is None:
        return 2
    cfg = HeadsTrainingConfig(
        model=args.model,
        data=data,
        out=args.out,
        num_heads=args.heads,
        minutes=args.minutes,
        gamma=args.gamma,
        lr=args.lr,
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        threads=args.threads,
        resume=args.resume,
        seed=args.seed,
    )
    try:
        out = train_heads(cfg)
    except ValueError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    report = json.loads((out / "heads.json").read_text())["report"]
    sys.stderr.write(json.dumps(report["heldOut"], indent=2) + "\n")
    sys.stderr.write(f"heads saved in {out}\n")
    return 0
