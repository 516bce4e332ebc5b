"""Fill-in-the-middle prompt formats of known code-model families, detected from the vocabulary."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class FimFormat:
    """How a model family spells prefix / suffix / middle, and in which order its prompts go:
    prefix-suffix-middle (PSM), or suffix-first (SPM) for families trained with both orders.
    SPM puts the code after the cursor first, so typing at the cursor changes only the prompt's
    end: a keystroke prefills a few tokens instead of the whole suffix again."""

    name: str
    prefix_token: str
    suffix_token: str
    middle_token: str
    # Tokens that end a generated middle (besides the tokenizer's own EOS).
    stop_tokens: tuple[str, ...] = ()
    # CodeLlama puts a space after <PRE> and before <MID>; the others concatenate.
    spaced: bool = False
    # Trained with suffix-first prompts too (StarCoder's and CodeLlama's FIM used both orders).
    suffix_first: bool = False
    # The family's repository format (Qwen2.5-Coder: `<|repo_name|>name` then `<|file_sep|>path`
    # before each file's text, the FIM prompt last under the current file's path); None: none.
    repo_name_token: str | None = None
    file_sep_token: str | None = None

    def build(self, prefix: str, suffix: str) -> str:
        """The prompt, in SPM order where the family was trained with it, else PSM."""
        return (
            self.build_spm(prefix, suffix) if self.suffix_first else self.build_psm(prefix, suffix)
        )

    def build_psm(self, prefix: str, suffix: str) -> str:
        if self.spaced:
            return f"{self.prefix_token} {prefix} {self.suffix_token}{suffix} {self.middle_token}"
        return f"{self.prefix_token}{prefix}{self.suffix_token}{suffix}{self.middle_token}"

    def build_spm(self, prefix: str, suffix: str) -> str:
        """Suffix first, as the families' own code spells it: StarCoder (bigcode Megatron-LM)
        `<fim_prefix><fim_suffix>{suffix}<fim_middle>{prefix}`, CodeLlama
        `<PRE> <SUF>{suffix} <MID> {prefix}`."""
        if self.spaced:
            return f"{self.prefix_token} {self.suffix_token}{suffix} {self.middle_token} {prefix}"
        return f"{self.prefix_token}{self.suffix_token}{suffix}{self.middle_token}{prefix}"


# The embedded default model is trained with the Qwen2.5-Coder spelling, so it is found like any
# Qwen coder model.
QWEN = FimFormat(
    name="qwen",
    prefix_token="<|fim_prefix|>",
    suffix_token="<|fim_suffix|>",
    middle_token="<|fim_middle|>",
    stop_tokens=("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>"),
    repo_name_token="<|repo_name|>",
    file_sep_token="<|file_sep|>",
)
STARCODER = FimFormat(
    name="starcoder",
    prefix_token="<fim_prefix>",
    suffix_token="<fim_suffix>",
    middle_token="<fim_middle>",
    stop_tokens=("<|endoftext|>", "<fim_pad>", "<file_sep>"),
    suffix_first=True,
)
DEEPSEEK = FimFormat(
    name="deepseek",
    prefix_token="<｜fim▁begin｜>",
    suffix_token="<｜fim▁hole｜>",
    middle_token="<｜fim▁end｜>",
    stop_tokens=("<｜end▁of▁sentence｜>", "<|EOT|>"),
)
CODELLAMA = FimFormat(
    name="codellama",
    prefix_token="▁<PRE>",
    suffix_token="▁<SUF>",
    middle_token="▁<MID>",
    stop_tokens=("▁<EOT>",),
    spaced=True,
    suffix_first=True,
)
CODEGEMMA = FimFormat(
    name="codegemma",
    prefix_token="<|fim_prefix|>",
    suffix_token="<|fim_suffix|>",
    middle_token="<|fim_middle|>",
    stop_tokens=("<|file_separator|>", "<eos>"),
)

KNOWN_FORMATS: tuple[FimFormat, ...] = (QWEN, STARCODER, DEEPSEEK, CODELLAMA, CODEGEMMA)
FORMATS_BY_NAME = {fmt.name: fmt for fmt in KNOWN_FORMATS}


def detect_fim_format(vocab: Container[str]) -> FimFormat | None:
    """The first known format whose three marker tokens are all in the vocabulary."""
    for fmt in KNOWN_FORMATS:
        markers = (fmt.prefix_token, fmt.suffix_token, fmt.middle_token)
        if all(token in vocab for token in markers):
            if fmt is QWEN and "<|file_separator|>" in vocab:
                return CODEGEMMA  # same markers as Qwen, other stop tokens
            return fmt
    return None


def resolve_fim_format(vocab: Container[str], override: str | None) -> FimFormat | None:
    """Honour an explicit override ('none' disables FIM); else detect from the vocabulary."""
    if override is None or override == "auto":
        return detect_fim_format(vocab)
    if override == "none":
        return None
    try:
        return FORMATS_BY_NAME[override]
    except KeyError:
        names = ", ".join(["auto", "none", *FORMATS_BY_NAME])
        raise ValueError(f"unknown FIM format {override!r}; choose one of: {names}") from None
