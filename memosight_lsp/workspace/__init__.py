"""Workspace index: tree-sitter outlines of every source file, kept fresh and cached on disk."""

from .buffers import Buffer, TextEdit
from .index import ScanStats, WorkspaceIndex, parse_source, to_path
from .languages import LANGUAGES, LanguageSpec, language_for
from .symbols import Definition, FileSymbols, Import

__all__ = [
    "LANGUAGES",
    "Buffer",
    "Definition",
    "FileSymbols",
    "Import",
    "LanguageSpec",
    "ScanStats",
    "TextEdit",
    "WorkspaceIndex",
    "language_for",
    "parse_source",
    "to_path",
]
