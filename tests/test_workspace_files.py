"""The one binary test (a NUL), for bytes from disk and text in memory alike."""

from __future__ import annotations

from memosight_lsp.workspace.files import (
    BINARY_SNIFF_BYTES,
    MAX_FILE_BYTES,
    indexable_text,
    is_binary,
)


def test_a_nul_means_binary_in_bytes_and_in_text():
    assert is_binary(b"def f(): pass\n\0\0") and is_binary("def f(): pass\n\x00")
    assert not is_binary(b"def f(): pass\n") and not is_binary("def f(): pass\n")


def test_file_bytes_are_sniffed_at_their_start_and_text_is_looked_at_whole():
    late = "x" * BINARY_SNIFF_BYTES + "\x00"
    assert not is_binary(late.encode())  # as git: a NUL past the sniffed head is not seen
    assert is_binary(late)


def test_indexable_text_is_small_and_not_binary():
    assert indexable_text("x = 1\n")
    assert not indexable_text("x = 1\n\x00")
    assert not indexable_text("x" * (MAX_FILE_BYTES + 1))
