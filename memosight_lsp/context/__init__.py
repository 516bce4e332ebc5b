"""Context for a completion: rank the workspace's code by relevance to the cursor and pack it into
the token budget. Counts tokens through a caller-supplied function (no tokenizer imported here)."""

from .pack import build_context, current_name, suffix_window
from .types import PackedContext, Packing, Rerank, Snippet

__all__ = [
    "PackedContext",
    "Packing",
    "Rerank",
    "Snippet",
    "build_context",
    "current_name",
    "suffix_window",
]
