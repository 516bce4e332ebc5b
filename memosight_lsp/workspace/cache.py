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
    `give_way()` is called every GIVE_WAY_EVERY files while they are rebuilt (a project's
    thousands of files take a second or more of Python: the server's model goes first)."""
    try:
        raw = cache_file.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("index cache %s unreadable (%s); rebuilding", cache_file, exc)
        return {}
    try:
        data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
            version = data.get("schema") if isinstance(data, dict) else None
            log.warning(
                "index cache %s has schema %r, not %d; rebuilding",
                cache_file,
                version,
                SCHEMA_VERSION,
            )
            return {}
        if data.get("root") != str(root.resolve()):
            log.warning("index cache %s belongs to %r; rebuilding", cache_file, data.get("root"))
            return {}
        files: dict[str, FileSymbols] = {}
        for n, (rel, row) in enumerate(data["files"].items()):
            if give_way is not None and n % GIVE_WAY_EVERY == 0:
                give_way()
            files[rel] = FileSymbols.from_wire(rel, row)
        return files
    except Exception as exc:  # any malformed content: the cache is only an accelerator
        log.warning(
            "index cache %s is corrupt (%s: %s); rebuilding", cache_file, type(exc).__name__, exc
        )
        return {}


def save(cache_file: Path, root: Path, files: dict[str, FileSymbols]) -> None:
    """Write atomically (temp file + os.replace): a crash leaves the old cache or the new one."""
    payload = {
        "schema": SCHEMA_VERSION,
        "root": str(root.resolve()),
        "files": {rel: fs.to_wire() for rel, fs in sorted(files.items())},
    }
    data = msgpack.packb(payload, use_bin_type=True)
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".tmp", dir=cache_file.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
            os.replace(tmp, cache_file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as exc:
        log.warning("could not write index cache %s: %s", cache_file, exc)
