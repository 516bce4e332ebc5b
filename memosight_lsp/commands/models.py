"""`memosight models`: which model is in use, where it came from, its FIM format, size, device,
and when and how its precision was measured; `--remeasure` measures the precision and the
server's timings of it (pass costs, row kernels, prefill rate) again and keeps them."""

from __future__ import annotations

import argparse

from .common import (
    ModelLoadError,
    add_model_options,
    emit,
    fail,
    load_resolved_from_args,
    remote_engine_from_args,
    resolve_from_args,
)
from .models_list import resolution_json, resolution_lines, run_list


def register(sub) -> None:
    parser = sub.add_parser("models", help="show the model in use", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print a JSON object")
    parser.add_argument(
        "--list",
        action="store_true",
        help="what model.path auto finds on this machine and which it picks, loading nothing",
    )
    parser.add_argument(
        "--remeasure",
        action="store_true",
        help="measure the precision (auto) and the timings a server uses again, and keep them",
    )
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.list:
        return run_list(args)
    if args.backend != "local":
        return run_remote(args)
    resolved = resolve_from_args(args)
    if resolved.backend != "local":  # auto: a loopback engine serves the code model it found
        args.backend, args.url, args.name = resolved.backend, resolved.url, resolved.name
        return run_remote(args)
    try:
        loaded, final = load_resolved_from_args(args, resolved, remeasure=args.remeasure)
    except ModelLoadError as err:
        return fail(str(err))
    info = loaded.describe()
    info["resolved"] = resolution_json(final)  # how model.path chose it (auto, or named)
    if args.remeasure:  # what a server would time after its first answer, timed now and kept
        from memosight_lsp.pipeline.local_backend import LocalBackend

        engine = LocalBackend(loaded)
        engine.warm_up()
        info["calibration"] = engine.calibration.describe()
    if args.json:
        emit(info, as_json=True)
        return 0
    lines = [
        f"model:        {info['name']}{' (embedded default)' if info['embedded'] else ''}",
        f"loaded from:  {info['source']}",
        f"architecture: {info['architecture']}",
        f"parameters:   {info['parameters'] / 1e6:.2f}M",
        f"FIM format:   {info['fimFormat'] or 'none (prefix-only prompts)'}",
        f"device:       {info['device']}",
        f"precision:    {info['precision']} ({info['precisionReason']})",
        *([f"measured:     {info['precisionMeasured']}"] if info["precisionMeasured"] else []),
        f"kernels:      {info['kernels']}",
        f"vocabulary:   {info['vocabSize']} tokens",
        f"load time:    {info['loadSeconds']:.2f} s",
    ]
    if info["gguf"]:
        lines.insert(2, f"GGUF file:    {info['gguf']}")
    lines += resolution_lines(final)
    if "calibration" in info:
        lines.append(f"timings:      {info['calibration']['source']}")
    emit("\n".join(lines), as_json=False)
    return 0


def run_remote(args: argparse.Namespace) -> int:
    """What the serving engine serves, as the server would see it."""
    try:
        engine = remote_engine_from_args(args)
    except ModelLoadError as err:
        return fail(str(err))
    info = engine.info
    assert info is not None
    data = {
        "engine": info.engine,
        "url": info.url,
        "name": info.model,
        "fimFormat": info.fim.name if info.fim else None,
        "engineInfill": info.infill,
        "tokenIds": info.token_ids,
        "contextLength": info.context_length,
        "charsPerToken": round(info.chars_per_token, 3),
        "notes": list(info.notes),
    }
    if args.json:
        emit(data, as_json=True)
        return 0
    lines = [
        f"engine:       {info.engine} at {info.url}",
        f"model:        {info.model}",
        f"FIM:          {info.describe().split('(', 1)[1].rstrip(')')}",
        f"context:      {info.context_length or 'unknown'} tokens",
        f"tokens:       {info.chars_per_token:.2f} characters per token (measured once)",
        *(f"note:         {note}" for note in info.notes),
    ]
    emit("\n".join(lines), as_json=False)
    return 0
