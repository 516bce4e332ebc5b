"""Options and helpers shared by the subcommands that load a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from memosight_lsp.config import BackendName, Device, Dtype, ModelSettings, Quantization
from memosight_lsp.discovery.resolve import Resolved, load_resolved, resolve
from memosight_lsp.inference.errors import ModelLoadError
from memosight_lsp.pipeline.positions import utf16_to_index
from memosight_lsp.workspace.files import is_binary

# The model's modules (torch, transformers: seconds to import) are imported by the functions
# that load or reach a model, so a command that only looks (`models --list`) starts at once.
if TYPE_CHECKING:
    from memosight_lsp.inference.loading import LoadedModel
    from memosight_lsp.pipeline.engine_backend import EngineBackend
    from memosight_lsp.pipeline.local_backend import LocalBackend

EMBEDDED = "embedded"  # --model's name for the embedded model (model.path: null)


def add_model_options(parser: argparse.ArgumentParser) -> None:
    defaults = ModelSettings()  # the editor settings' defaults (config.py)
    group = parser.add_argument_group("model")
    group.add_argument(
        "--model",
        metavar="PATH",
        default=defaults.path,
        help="auto (default): the best code model found on this machine (`memosight models "
        f"--list`); a .gguf file or a Hugging Face model folder; {EMBEDDED}: the embedded model",
    )
    group.add_argument("--device", default=defaults.device, choices=get_args(Device))
    group.add_argument(
        "--dtype",
        default=defaults.dtype,
        choices=get_args(Dtype),
        help="auto: bfloat16 on CUDA, on a CPU what measured fastest for the model (once)",
    )
    group.add_argument(
        "--quantization",
        default=defaults.quantization,
        choices=get_args(Quantization),
        help="weight-only quantization of the linear layers on a CPU (auto: measured; "
        "gguf: a .gguf file's own mix of int8 and int4)",
    )
    group.add_argument(
        "--fim-format",
        default=defaults.fim_format,
        help="auto, none, qwen, starcoder, deepseek, codellama or codegemma",
    )
    engine = parser.add_argument_group("serving engine (instead of --model)")
    engine.add_argument(
        "--backend",
        default=defaults.backend,
        choices=get_args(BackendName),
        help="local: the model in this process; else a serving engine over HTTP",
    )
    engine.add_argument("--url", help="the engine's base URL (default: its port on 127.0.0.1)")
    engine.add_argument("--name", help="the model the engine serves (default: the one it serves)")
    engine.add_argument(
        "--api-key-env", metavar="VAR", help="environment variable holding the API key"
    )
    engine.add_argument(
        "--timeout-ms", type=int, default=defaults.timeout_ms, help="deadline of a completion"
    )


def model_settings_from_args(args: argparse.Namespace) -> ModelSettings:
    return ModelSettings(
        path=None if args.model == EMBEDDED else args.model,
        device=args.device,
        dtype=args.dtype,
        quantization=args.quantization,
        fim_format=args.fim_format,
        backend=args.backend,
        url=args.url,
        name=args.name,
        api_key_env=args.api_key_env,
        timeout_ms=args.timeout_ms,
    )


def remote_engine_from_args(args: argparse.Namespace) -> EngineBackend:
    """The serving engine --backend names, asked what it serves; ModelLoadError (one line)
    when it cannot be reached or does not serve a model."""
    from memosight_lsp.engines import BackendConfigError, open_engine
    from memosight_lsp.pipeline.engine_backend import EngineBackend

    try:
        backend = open_engine(model_settings_from_args(args))
    except BackendConfigError as err:
        raise ModelLoadError(str(err)) from err
    engine = EngineBackend(backend, timeout_s=args.timeout_ms / 1000)
    if engine.connect() is None:
        raise ModelLoadError(engine.health.message)
    return engine


def resolve_from_args(args: argparse.Namespace) -> Resolved:
    """What --model names (auto: discovery's pick), said on stderr when auto chose or the
    embedded model serves (the one line a user needs next)."""
    resolved = resolve(model_settings_from_args(args).path, device=args.device)
    if resolved.source or resolved.notice:
        print(f"memosight: {resolved.describe()}", file=sys.stderr)  # noqa: T201
    return resolved


def engine_from_args(args: argparse.Namespace) -> LocalBackend | EngineBackend:
    """The model in this process (loaded), or the serving engine --backend names (or auto
    found serving a code model on loopback)."""
    if args.backend != "local":
        return remote_engine_from_args(args)
    resolved = resolve_from_args(args)
    if resolved.backend != "local":
        args.backend, args.url, args.name = resolved.backend, resolved.url, resolved.name
        return remote_engine_from_args(args)
    from memosight_lsp.pipeline.local_backend import LocalBackend

    # One completion: timing the machine's passes would not pay.
    return LocalBackend(load_model_from_args(args, resolved), time_passes=False)


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


def cursor_column(text: str, line: int, character: int) -> int:
    """The str column in `text` of the cursor that add_position_arguments named (0-based line,
    UTF-16 character, clamped to the line). ValueError, naming the argument, when it is outside.
    """
    lines = text.split("\n")
    if not 0 <= line < len(lines):
        raise ValueError(f"--line {line} is outside the file (it has {len(lines)} lines)")
    if character < 0:
        raise ValueError("--character must be >= 0")
    return utf16_to_index(lines[line], character)


def load_model_from_args(
    args: argparse.Namespace, resolved: Resolved | None = None, *, remeasure: bool = False
) -> LoadedModel:
    """The model --model names (resolved here unless given); auto's pick that does not load
    falls back to the embedded model, said on stderr. `remeasure`: measure the `auto` precision
    again whatever is cached."""
    return load_resolved_from_args(args, resolved, remeasure=remeasure)[0]


def load_resolved_from_args(
    args: argparse.Namespace, resolved: Resolved | None = None, *, remeasure: bool = False
) -> tuple[LoadedModel, Resolved]:
    """The model and what was resolved in the end (auto's pick, or the embedded fallback)."""
    from memosight_lsp.inference.loading import load_model

    def say(message: str) -> None:
        print(f"memosight: {message}", file=sys.stderr)  # noqa: T201

    def load(path: str | None) -> LoadedModel:
        # The folder named on the command line is the user's own choice: pickle weights load too.
        return load_model(
            path,
            device=args.device,
            dtype=args.dtype,
            quantization=args.quantization,
            fim_format=args.fim_format,
            progress=say,
            allow_pickle=True,
            remeasure=remeasure,
        )

    return load_resolved(resolved or resolve_from_args(args), load, progress=say)


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
    if is_binary(data):
        raise ValueError(f"{path} looks like a binary file")
    return data.decode("utf-8", errors="replace")


def read_position(args: argparse.Namespace) -> tuple[str, int]:
    """The text of the file add_position_arguments named and the str column of its cursor;
    ValueError, naming the file or the argument, when either is wrong."""
    text = read_source_file(args.file)
    return text, cursor_column(text, args.line, args.character)


__all__ = [
    "ModelLoadError",
    "add_model_options",
    "add_position_arguments",
    "cursor_column",
    "emit",
    "engine_from_args",
    "fail",
    "load_model_from_args",
    "load_resolved_from_args",
    "read_position",
    "read_source_file",
    "remote_engine_from_args",
    "resolve_from_args",
]
