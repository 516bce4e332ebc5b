"""The index on disk: one msgpack file per workspace, written atomically, discarded when unreadable.

Layout: {"schema": SCHEMA_VERSION, "root": "/abs/root", "files": {relpath: FileSymbols wire row}}.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import msgpack

from .symbols import FileSymbols

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3  # 2: JS/TS re-exports (`export ... from`) are imports; 3: C++ .h headers
CACHE_FILE = "index.msgpack"
GIVE_WAY_EVERY = 64  # files rebuilt from the cache between two calls of `give_way`


def default_cache_dir(root: Path) -> Path:
    """$XDG_CACHE_HOME/memosight/<hash of the root> (~/.cache when XDG_CACHE_HOME is unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    digest = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return Path(base) / "memosight" / digest


def load(
    cache_file: Path, root: Path, give_way: Callable[[], None] | None = None
) -> dict[str, FileSymbols]:
    """The cached files, or {} when there is no usable cache (logged, never raised).
    Read entry by entry: one call that decodes a whole project's cache holds the GIL for as
    long as it runs (the model's requests wait). `give_way()` is called every GIVE_WAY_EVERY
    files (the server's model goes first: server/scan_priority.py)."""
    try:
        handle = cache_file.open("rb")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("index cache %s unreadable (%s); rebuilding", cache_file, exc)
        return {}
    try:
        with handle:
            return _read_entries(handle, cache_file, root, give_way)
    except Exception as exc:  # any malformed content: the cache is only an accelerator
        log.warning(
            "index cache %s is corrupt (%s: %s); rebuilding", cache_file, type(exc).__name__, exc
        )
        return {}


def _read_entries(
    handle: BinaryIO, cache_file: Path, root: Path, give_way: Callable[[], None] | None
) -> dict[str, FileSymbols]:
    """The files of a cache laid out as `save` writes it (schema and root before the files)."""
    size = os.fstat(handle.fileno()).st_size
    unpacker = msgpack.Unpacker(
        handle, raw=False, strict_map_key=False, max_buffer_size=max(size, 1)
    )
    header: dict[str, object] = {}
    files: dict[str, FileSymbols] = {}
    for _ in range(unpacker.read_map_header()):
        key = unpacker.unpack()
        if key != "files":
            header[key] = unpacker.unpack()
            continue
        if _foreign(header, cache_file, root):
            return {}  # before its files are decoded
        for n in range(unpacker.read_map_header()):
            if give_way is not None and n % GIVE_WAY_EVERY == 0:
                give_way()
            rel = unpacker.unpack()
            files[rel] = FileSymbols.from_wire(rel, unpacker.unpack())
    if _foreign(header, cache_file, root):  # a cache without files (with them first: above)
        return {}
    try:
        unpacker.unpack()
    except msgpack.OutOfData:
        return files
    raise ValueError("extra data after the files")


def _foreign(header: dict[str, object], cache_file: Path, root: Path) -> bool:
    """Whether a cache with this header is not this index's (logged, saying why)."""
    if header.get("schema") != SCHEMA_VERSION:
        problem = f"has schema {header.get('schema')!r}, not {SCHEMA_VERSION}"
    elif header.get("root") != str(root.resolve()):
        problem = f"belongs to {header.get('root')!r}"
    else:
        return False
    log.warning("index cache %s %s; rebuilding", cache_file, problem)
    return True


def save(cache_file: Path, root: Path, files: dict[str, FileSymbols]) -> None:
    """Write atomically (temp file + os.replace): a crash leaves the old cache or the new one.
    Packed entry by entry, as `load` reads it: the schema and the root, then the files."""
    packer = msgpack.Packer(use_bin_type=True)
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=cache_file.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(packer.pack_map_header(3))
                out.write(packer.pack("schema") + packer.pack(SCHEMA_VERSION))
                out.write(packer.pack("root") + packer.pack(str(root.resolve())))
                out.write(packer.pack("files") + packer.pack_map_header(len(files)))
                for rel, symbols in sorted(files.items()):
                    out.write(packer.pack(rel) + packer.pack(symbols.to_wire()))
            os.replace(tmp, cache_file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log.warning("could not write index cache %s: %s", cache_file, exc)
