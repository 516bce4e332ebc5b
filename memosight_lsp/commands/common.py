"""Options and helpers shared by the subcommands that load a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memosight_lsp.engine.loading import LoadedModel, ModelLoadError, load_model


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        metavar="PATH",
        help="a local Hugging Face model folder (default: the embedded model)",
    )
    group.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    group.add_argument(
        "--dtype", default="auto", choices=("auto", "float32", "bfloat16", "float16")
    )
    group.add_argument(
        "--fim-format",
        default="auto",
        help="auto, none, qwen, starcoder, deepseek, codellama or codegemma",
    )


def add_position_arguments(parser: argparse.ArgumentParser) -> None:
    """FILE --line L --character C, as an editor names a cursor."""
    parser.add_argument("file", help="the source file")
    parser.add_argument("--line", type=int, required=True, help="0-based line")
    parser.add_argument(
        "--character",
        type=int,
        required=True,
        help="0-based column in UTF-16 code units (as LSP counts)",
    )


def load_model_from_args(args: argparse.Namespace) -> LoadedModel:
    # The folder named on the command line is the user's own choice: pickle weights load too.
    return load_model(
        args.model,
        device=args.device,
        dtype=args.dtype,
        fim_format=args.fim_format,
        allow_pickle=True,
    )


def fail(message: str, code: int = 2) -> int:
    """One line on stderr and a non-zero exit: never a traceback for bad input."""
    print(f"memosight: error: {message}", file=sys.stderr)  # noqa: T201
    return code


def emit(data: Any, as_json: bool) -> None:
    """Results go to stdout (JSON when asked)."""
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(str(data))
        if not str(data).endswith("\n"):
            sys.stdout.write("\n")


def read_source_file(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"no such file: {path}")
    data = file.read_bytes()
    if b"\0" in data[:8192]:
        raise ValueError(f"{path} looks like a binary file")
    return data.decode("utf-8", errors="replace")


__all__ = [
    "ModelLoadError",
    "add_model_options",
    "add_position_arguments",
    "emit",
    "fail",
    "load_model_from_args",
    "read_source_file",
]
