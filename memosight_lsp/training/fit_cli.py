"""Arguments shared by the commands that fit something to a model from source code
(`memosight train heads`, `memosight train ngrams`): which model, which code, where to save."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_model_data_arguments(parser: argparse.ArgumentParser, data_help: str) -> None:
    parser.add_argument("--model", default=None, help="model folder (default: the embedded one)")
    parser.add_argument(
        "--data",
        nargs="+",
        default=None,
        metavar="DIR",
        help=f"{data_help} (default: the current directory)",
    )
    parser.add_argument("--out", default=None, help="output folder (default: next to the model)")


def data_folders(args: argparse.Namespace) -> list[str] | None:
    """--data, or the current directory; None (after one line on stderr) if a folder is missing."""
    data = args.data or [str(Path.cwd())]
    for folder in data:
        if not Path(folder).is_dir():
            sys.stderr.write(f"error: --data folder not found: {folder}\n")
            return None
    return data
