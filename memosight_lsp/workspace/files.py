"""Which files of a workspace get indexed: known languages, not ignored, not vendored, not binary,
not huge. `.gitignore` files are honoured at every level, as git does."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pathspec

from .languages import language_for

VENDORED_DIRS = frozenset(
    {
        "node_modules",
        ".venv",
        "venv",
        "build",
        "dist",
        "__pycache__",
        ".git",
        ".hg",
        ".svn",
        "target",
        ".tox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".memosight",
        "site-packages",
    }
)
MAX_FILE_BYTES = 1_000_000
BINARY_SNIFF_BYTES = 8192  # how much of a file's bytes is looked at for a NUL (as git does)


@dataclass(frozen=True, slots=True)
class _Ignore:
    base: str  # directory of the .gitignore, relative to the root ('' for the root)
    spec: pathspec.PathSpec


MAX_GITIGNORE_BYTES = 1_000_000


def read_regular_file(path: str | os.PathLike, max_bytes: int) -> bytes | None:
    """The bytes of a regular file of at most `max_bytes`; None for anything else: gone, a
    symlink, a FIFO or device (opened without blocking, so one swapped in after a scan saw a file
    cannot hang the reader), a folder, or a file that grew past the limit."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
            return None
        chunks, size = [], 0
        while size <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if len(data) <= max_bytes else None


def _load_gitignore(directory: Path, base: str) -> _Ignore | None:
    # Like git (2.32+), a .gitignore that is a symlink is not followed.
    data = read_regular_file(directory / ".gitignore", MAX_GITIGNORE_BYTES)
    if data is None:
        return None
    lines = data.decode("utf-8", errors="replace")
    return _Ignore(base, pathspec.GitIgnoreSpec.from_lines(lines.splitlines()))


def _ignored(rel: str, is_dir: bool, ignores: list[_Ignore]) -> bool:
    for ignore in ignores:
        if ignore.base:
            if not rel.startswith(ignore.base + "/"):
                continue
            local = rel[len(ignore.base) + 1 :]
        else:
            local = rel
        if ignore.spec.match_file(local + "/" if is_dir else local):
            return True
    return False


def is_binary(data: bytes | str) -> bool:
    """Binary means a NUL, the one test everywhere (files on disk, buffers, the model's window).

    A file's bytes are sniffed in their first BINARY_SNIFF_BYTES, as git does; text already in
    memory (an editor buffer, the window sent to the model) is looked at whole.
    """
    if isinstance(data, bytes):
        return b"\0" in data[:BINARY_SNIFF_BYTES]
    return "\0" in data


def indexable_text(text: str) -> bool:
    """What the workspace index would take from disk: at most MAX_FILE_BYTES, not binary."""
    return len(text) <= MAX_FILE_BYTES and not is_binary(text)


def iter_source_files(
    root: Path, max_bytes: int = MAX_FILE_BYTES
) -> Iterator[tuple[str, os.stat_result]]:
    """(relative path, stat) of every indexable file under root, in a stable order.

    Binary files are recognised later, when read (reading every file here would double the I/O).
    """
    root = root.resolve()
    stack: list[tuple[Path, str, list[_Ignore]]] = [(root, "", [])]
    while stack:
        directory, rel_dir, inherited = stack.pop()
        ignores = inherited
        own = _load_gitignore(directory, rel_dir)
        if own is not None:
            ignores = [*inherited, own]
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        subdirs: list[tuple[Path, str, list[_Ignore]]] = []
        for entry in entries:
            rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in VENDORED_DIRS or entry.name.endswith(".egg-info"):
                        continue
                    if not _ignored(rel, True, ignores):
                        subdirs.append((Path(entry.path), rel, ignores))
                    continue
                if not entry.is_file(follow_symlinks=False) or language_for(entry.name) is None:
                    continue
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.st_size > max_bytes or _ignored(rel, False, ignores):
                continue
            yield rel, stat
        stack.extend(reversed(subdirs))


def is_indexable(root: Path, rel: str, max_bytes: int = MAX_FILE_BYTES) -> bool:
    """Whether one file (e.g. from a watcher event) belongs in the index."""
    parts = rel.split("/")
    if any(p in VENDORED_DIRS or p.endswith(".egg-info") for p in parts[:-1]):
        return False
    if language_for(rel) is None:
        return False
    path = root / rel
    try:
        if not path.is_file() or path.stat().st_size > max_bytes:
            return False
    except OSError:
        return False
    ignores: list[_Ignore] = []
    for depth in range(len(parts)):
        base = "/".join(parts[:depth])
        ignore = _load_gitignore(root / base if base else root, base)
        if ignore is not None:
            ignores.append(ignore)
        if depth and _ignored(base, True, ignores):
            return False
    return not _ignored(rel, False, ignores)
