"""Save a tiny randomly initialised Llama + BPE tokenizer for the VS Code end-to-end test.

The e2e test checks that ghost text from the real server reaches the editor, not its quality, so a
random 2-layer model (loads in about a second) stands in for the embedded default model.
Usage: python make_tiny_model.py OUT_DIR [--seed N]
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from memosight_lsp.training.tokenizer_training import SPECIAL_TOKENS, train_tokenizer

# A few stdlib modules: enough text for a 600-token BPE vocabulary in well under a second.
SAMPLE_FILES = ("textwrap.py", "string.py", "shlex.py", "fnmatch.py", "glob.py")
REQUIRED_TOKENS = (
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|file_sep|>",
)


def make_tiny_model(out: Path, seed: int) -> Path:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    tokenizer = train_tokenizer([(stdlib / name).read_text() for name in SAMPLE_FILES], 600)
    missing = [t for t in REQUIRED_TOKENS if t not in SPECIAL_TOKENS]
    if missing:
        raise SystemExit(f"tokenizer lacks special tokens: {missing}")
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    out.mkdir(parents=True, exist_ok=True)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    make_tiny_model(args.out, args.seed)
    sys.stderr.write(f"tiny model saved to {args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
