"""`memosight export heads --model PATH --out DIR`: a model's prediction heads in a serving
engine's format (vLLM's Medusa speculator), for `--speculative-config` (docs/deployment.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from memosight_lsp.inference.heads_export import VLLM_MEDUSA, ExportError, export_vllm_medusa

from .common import ModelLoadError, add_model_options, emit, fail, load_model_from_args


def register(sub) -> None:
    parser = sub.add_parser(
        "export", help="export prediction heads for a serving engine", description=__doc__
    )
    parser.add_argument("what", choices=["heads"], help="what to export")
    parser.add_argument("--out", required=True, help="the folder to write")
    parser.add_argument("--format", default=VLLM_MEDUSA, choices=[VLLM_MEDUSA])
    add_model_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    args.dtype, args.quantization = "float32", "none"  # the heads' weights, exactly
    try:
        loaded = load_model_from_args(args)
        out = export_vllm_medusa(loaded, Path(args.out))
    except (ModelLoadError, ExportError) as err:
        return fail(str(err))
    emit(
        f'{out}  (vLLM: --speculative-config \'{{"method": "medusa", "model": "{out}", '
        f'"num_speculative_tokens": N}}\')',
        as_json=False,
    )
    return 0
