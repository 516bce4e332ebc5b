"""Train the byte-level BPE tokenizer of the embedded model, with the FIM special tokens."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from memosight_lsp.inference.fim import QWEN

END_OF_TEXT = "<|endoftext|>"
FILE_SEP = "<|file_sep|>"
FIM_PAD = "<|fim_pad|>"
REPO_NAME = "<|repo_name|>"
SPECIAL_TOKENS = [
    END_OF_TEXT,
    QWEN.prefix_token,
    QWEN.middle_token,
    QWEN.suffix_token,
    FIM_PAD,
    FILE_SEP,
    REPO_NAME,
]


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=True,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=END_OF_TEXT,
        pad_token=FIM_PAD,
        additional_special_tokens=SPECIAL_TOKENS[1:],
        clean_up_tokenization_spaces=False,
    )


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out_dir)
