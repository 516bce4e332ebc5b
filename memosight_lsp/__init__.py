"""MemoSight LSP: fast multi-token code completion from a local language model."""

__version__ = "0.1.0"
