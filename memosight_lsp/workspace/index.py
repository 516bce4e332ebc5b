"""The workspace index: every source file's definitions and imports, a symbol table over them, open
buffers kept in step with the editor, and a msgpack cache so a restart does not re-parse.

Disk changes arrive as file events (apply_events), from a watcher that whoever owns the index
starts and stops (server/indexes.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlparse

from . import cache
from .buffers import Buffer, TextEdit
from .events import FileEvent
from .extract import extract
from .files import (
    MAX_FILE_BYTES,
    VENDORED_DIRS,
    is_binary,
    is_indexable,
    iter_source_files,
    read_regular_file,
)
from .languages import LanguageSpec, for_content, language_for, language_named, parser
from .resolve import Resolver, Target
from .symbols import Definition, FileSymbols, Import

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]
_TEXT_CACHE_SIZE = 256  # file texts kept for rendering snippets
_PARSED_CACHE_SIZE = 8


def content_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def to_path(path_or_uri: str | Path) -> Path:
    """A filesystem path from a path or a file:// URI."""
    if isinstance(path_or_uri, str) and path_or_uri.startswith("file:"):
        return Path(unquote(urlparse(path_or_uri).path))
    return Path(path_or_uri)


def parse_source(spec: LanguageSpec, rel: str, data: bytes, mtime_ns: int = 0) -> FileSymbols:
    tree = parser(spec).parse(data)
    defs, imports = extract(spec, tree, data)
    return FileSymbols(
        rel, spec.name, content_digest(data), len(data), mtime_ns, tuple(defs), tuple(imports)
    )


@dataclass(frozen=True, slots=True)
class ScanStats:
    files: int
    parsed: int
    reused: int
    seconds: float
    cache_file: str | None


class WorkspaceIndex:
    def __init__(
        self,
        root: str | Path,
        *,
        cache_dir: str | Path | None = None,
        use_cache: bool = True,
        max_file_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        self.root = to_path(root).resolve()
        self.max_file_bytes = max_file_bytes
        self.cache_file: Path | None = None
        if use_cache:
            folder = Path(cache_dir) if cache_dir else cache.default_cache_dir(self.root)
            self.cache_file = folder / cache.CACHE_FILE
        self._files: dict[str, FileSymbols] = {}
        self._buffers: dict[str, Buffer] = {}
        self._buffer_symbols: dict[str, FileSymbols] = {}
        self._names: dict[str, set[str]] = {}
        self._resolver = Resolver(root_name=self.root.name)
        # Disk texts by (rel, mtime_ns, size), for rendering snippets; and outlines of texts
        # that match no file or buffer (a completion that ran ahead of its buffer update).
        self._disk_text: Callable[[str, int, int], str | None] = functools.lru_cache(
            maxsize=_TEXT_CACHE_SIZE
        )(self._read_text)
        self._parse_text: Callable[[str, str, bytes], FileSymbols] = functools.lru_cache(
            maxsize=_PARSED_CACHE_SIZE
        )(self._parse_unindexed)
        self._lock = threading.RLock()
        self._dirty = False
        self._revision = 0

    # -- paths ---------------------------------------------------------------------------------
    def relpath(self, path: str | Path) -> str:
        """Root-relative '/'-separated path; files outside the root keep their absolute path."""
        if isinstance(path, str) and not path.startswith(("/", "file:", ".")) and "\\" not in path:
            return path  # already relative (the common case in ranking: a hot path)
        p = to_path(path)
        if not p.is_absolute():
            return p.as_posix()
        try:  # the folders resolved, not the file: a symlink is named as itself, not its target
            return (p.parent.resolve() / p.name).relative_to(self.root).as_posix()
        except (ValueError, OSError, RuntimeError):
            return p.as_posix()

    def abspath(self, rel: str) -> Path:
        return Path(rel) if rel.startswith("/") else self.root / rel

    # -- whole-workspace scan ------------------------------------------------------------------
    def scan(
        self,
        on_progress: ProgressCallback | None = None,
        give_way: Callable[[], None] | None = None,
    ) -> ScanStats:
        """Index the workspace, reusing cached entries whose size+mtime or content hash match.
        `give_way()` is called between files (and while the cache is read): it may wait for
        work that goes first (server/scan_priority.py)."""
        started = time.perf_counter()
        cached = cache.load(self.cache_file, self.root, give_way) if self.cache_file else {}
        entries = list(iter_source_files(self.root, self.max_file_bytes))
        total = len(entries)
        files: dict[str, FileSymbols] = {}
        parsed = reused = 0
        for done, (rel, stat) in enumerate(entries, 1):
            if give_way is not None:
                give_way()
            old = cached.get(rel)
            if old is not None and old.size == stat.st_size and old.mtime_ns == stat.st_mtime_ns:
                files[rel] = old
                reused += 1
            else:
                symbols = self._read_and_parse(rel, stat.st_mtime_ns, old)
                if symbols is not None:
                    files[rel] = symbols
                    if symbols is old or (old is not None and symbols.digest == old.digest):
                        reused += 1
                    else:
                        parsed += 1
            if on_progress is not None:
                on_progress(done, total)
        with self._lock:
            self._files = files
            self._rebuild_tables()
            self._revision += 1
            self._dirty = parsed > 0 or len(files) != len(cached) or reused != len(cached)
        self.save_if_dirty()
        seconds = time.perf_counter() - started
        log.info(
            "indexed %d files (%d parsed, %d from cache) in %.2fs", total, parsed, reused, seconds
        )
        return ScanStats(
            len(files), parsed, reused, seconds, str(self.cache_file) if self.cache_file else None
        )

    def save(self) -> None:
        if self.cache_file is None:
            return
        with self._lock:
            snapshot = dict(self._files)
            self._dirty = False
        cache.save(self.cache_file, self.root, snapshot)

    def save_if_dirty(self) -> None:
        """Write the cache if files changed since it was written (scans, watcher events)."""
        if self._dirty:
            self.save()

    def _read_and_parse(
        self, rel: str, mtime_ns: int, old: FileSymbols | None
    ) -> FileSymbols | None:
        spec = language_for(rel)
        if spec is None:
            return None
        data = read_regular_file(self.abspath(rel), self.max_file_bytes)
        if data is None or is_binary(data):
            return None
        if old is not None and old.digest == content_digest(data):
            return replace(old, mtime_ns=mtime_ns)
        return parse_source(for_content(spec, rel, data), rel, data, mtime_ns)

    # -- single files (watcher, didSave) -------------------------------------------------------
    def update_file(self, path: str | Path) -> FileSymbols | None:
        """Re-index one file from disk; a file that is no longer indexable is removed."""
        rel = self.relpath(path)
        if rel.startswith("/") or not is_indexable(self.root, rel, self.max_file_bytes):
            self.remove_file(rel)
            return None
        try:
            mtime_ns = self.abspath(rel).stat().st_mtime_ns
        except OSError:
            self.remove_file(rel)
            return None
        with self._lock:
            old = self._files.get(rel)
        symbols = self._read_and_parse(rel, mtime_ns, old)
        if symbols is None:
            self.remove_file(rel)
            return None
        with self._lock:
            self._set_file(rel, symbols)
        return symbols

    def remove_file(self, path: str | Path) -> None:
        rel = self.relpath(path)
        with self._lock:
            if rel in self._files:
                before = self._effective(rel)
                del self._files[rel]
                self._resolver.remove(rel)
                self._reindex_names(rel, before)
                self._dirty = True
                self._disk_changed(rel)

    def remove_under(self, path: str | Path) -> None:
        """Forget every file below a folder (deleted or moved away)."""
        prefix = self.relpath(path).rstrip("/") + "/"
        with self._lock:
            doomed = [rel for rel in self._files if rel.startswith(prefix)]
        for rel in doomed:
            self.remove_file(rel)

    def apply_events(self, events: Mapping[str, FileEvent]) -> list[str]:
        """A watcher's batch (absolute path -> its latest event), applied in path order; returns
        the root-relative paths it touched (workspace/events.py: this makes the index a sink)."""
        changed: list[str] = []
        for path in sorted(events):
            event = events[path]
            try:
                if event is FileEvent.REMOVE:
                    self.remove_file(path)
                elif event is FileEvent.REMOVE_DIR:
                    self.remove_under(path)
                elif event is FileEvent.SCAN_DIR:  # also what a folder deleted and made again left
                    self.remove_file(path)  # a folder where a file was
                    found = set()
                    for folder, dirs, names in os.walk(path):
                        dirs[:] = [d for d in dirs if d not in VENDORED_DIRS]
                        for name in names:
                            self.update_file(os.path.join(folder, name))
                            found.add(self.relpath(os.path.join(folder, name)))
                    below = self.relpath(path).rstrip("/") + "/"
                    for rel in self.files():
                        if rel.startswith(below) and rel not in found:
                            self.remove_file(rel)
                else:
                    self.update_file(path)
                changed.append(self.relpath(path))
            except Exception:  # one bad file must not stop the rest (nor the watcher's thread)
                log.exception("index update for %s failed", path)
        return changed

    def catch_up(self) -> int:
        """Re-index what differs between the index and the disk (size or mtime, files added or
        gone), for changes no event told of: between a scan's listing and the watcher's start,
        or in a burst that overflowed the kernel's inotify queue. Returns the files touched."""
        disk = dict(iter_source_files(self.root, self.max_file_bytes))
        touched = 0
        with self._lock:
            indexed = dict(self._files)  # the disk versions: an open buffer is no file's state
        for rel, info in disk.items():
            known = indexed.get(rel)
            if known is None or (known.size, known.mtime_ns) != (info.st_size, info.st_mtime_ns):
                self.update_file(rel)
                touched += 1
        for rel in self.files():
            if rel not in disk:
                self.remove_file(rel)
                touched += 1
        return touched

    def _set_file(self, rel: str, symbols: FileSymbols) -> None:
        before = self._effective(rel)
        self._files[rel] = symbols
        self._resolver.add(rel)
        self._reindex_names(rel, before)
        self._dirty = True
        self._disk_changed(rel)

    def _disk_changed(self, rel: str) -> None:
        if rel not in self._buffers:  # an open buffer shadows its file: nothing served changed
            self._revision += 1

    @property
    def revision(self) -> int:
        """Counts the changes to what the index serves from disk (a scan, a file saved, added
        or removed that no open buffer shadows): a prompt packed at one revision may miss what
        a later one holds. Edits to open buffers do not count; their texts are known anyway."""
        with self._lock:
            return self._revision

    # -- open buffers --------------------------------------------------------------------------
    def update_buffer(
        self,
        path: str | Path,
        text: str | None = None,
        *,
        edits: Sequence[TextEdit] = (),
        language_id: str | None = None,
    ) -> FileSymbols | None:
        """Open or change an editor buffer: full `text`, or `edits` applied incrementally."""
        rel = self.relpath(path)
        with self._lock:
            buffer = self._buffers.get(rel)
            if buffer is None:
                spec = language_for(rel, language_id)
                if spec is None:
                    return None
                if text is None:
                    raise ValueError(f"buffer {rel} is not open: the first update needs its text")
                buffer = self._buffers[rel] = Buffer(for_content(spec, rel, text), text)
            elif edits:
                buffer.apply(edits)
            elif text is not None:
                buffer.replace(text)
            before = self._effective(rel)
            data = buffer.text.encode("utf-8")
            defs, imports = extract(buffer.spec, buffer.tree, data)
            symbols = FileSymbols(
                rel,
                buffer.spec.name,
                content_digest(data),
                len(data),
                0,
                tuple(defs),
                tuple(imports),
            )
            self._buffer_symbols[rel] = symbols
            self._reindex_names(rel, before)
            return symbols

    def close_buffer(self, path: str | Path) -> None:
        rel = self.relpath(path)
        with self._lock:
            if rel not in self._buffers:
                return
            before = self._effective(rel)
            del self._buffers[rel]
            self._buffer_symbols.pop(rel, None)
            self._reindex_names(rel, before)

    def buffer(self, path: str | Path) -> Buffer | None:
        return self._buffers.get(self.relpath(path))

    def buffer_texts(self, exclude: str | Path | None = None) -> tuple[tuple[str, int], ...]:
        """(path, hash of its text) of every open buffer but `exclude`, as the index holds them
        now: what a prompt packed from the index knew of the other buffers (their updates
        reach the index after the editor's didChange, on the index's own thread). Cheap: a
        str caches its hash."""
        skip = None if exclude is None else self.relpath(exclude)
        with self._lock:
            return tuple(
                sorted((rel, hash(b.text)) for rel, b in self._buffers.items() if rel != skip)
            )

    # -- queries -------------------------------------------------------------------------------
    def files(self) -> list[str]:
        with self._lock:
            return sorted(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def symbols(self, path: str | Path) -> FileSymbols | None:
        """Definitions of a file: its open buffer's if it has one, else the indexed disk version."""
        return self._effective(self.relpath(path))

    def files_defining(self, name: str) -> list[str]:
        """Files (open buffers included) that define `name`: cheap, no definitions gathered."""
        with self._lock:
            return sorted(self._names.get(name, ()))

    def definitions(self, name: str) -> list[tuple[str, Definition]]:
        """Every definition called `name`, by file path order."""
        with self._lock:
            rels = sorted(self._names.get(name, ()))
            out: list[tuple[str, Definition]] = []
            for rel in rels:
                symbols = self._effective(rel)
                if symbols is not None:
                    out.extend((rel, d) for d in symbols.definitions if d.name == name)
            return out

    def resolve_import(self, rel: str, language: str, imp: Import) -> tuple[Target, ...]:
        return self._resolver.resolve(rel, language, imp)

    def text(self, path: str | Path) -> str | None:
        """Current text of a file (open buffer first), re-indexing it if the disk copy moved on."""
        rel = self.relpath(path)
        with self._lock:
            buffer = self._buffers.get(rel)
            if buffer is not None:
                return buffer.text
        if rel.startswith("/"):  # outside the root: an open buffer's text only, never the disk
            return None
        try:
            stat = self.abspath(rel).stat()
        except (OSError, ValueError):  # ValueError: a NUL in the path
            return None
        return self._disk_text(rel, stat.st_mtime_ns, stat.st_size)

    def _read_text(self, rel: str, mtime_ns: int, size: int) -> str | None:
        """The file's text as of this stat (memoised per index, keyed by all three); None for
        what is not a regular file under the size limit (workspace/files.read_regular_file)."""
        data = read_regular_file(self.abspath(rel), self.max_file_bytes)
        if data is None:
            return None
        with self._lock:
            symbols = self._files.get(rel)
        unchanged = symbols is not None and (symbols.size, symbols.mtime_ns) == (size, mtime_ns)
        if symbols is not None and not unchanged and content_digest(data) != symbols.digest:
            self.update_file(rel)  # changed behind our back (watcher not yet flushed)
        return data.decode("utf-8", "replace")

    def symbols_for_text(
        self, path: str | Path | None, text: str, language_id: str | None = None
    ) -> FileSymbols | None:
        """Symbols of a document's current text, from the index when it matches, else parsed."""
        spec = language_for(path, language_id)
        if spec is None:
            return None
        spec = for_content(spec, path, text)
        rel = self.relpath(path) if path is not None else "<unsaved>"
        data = text.encode("utf-8")
        digest = content_digest(data)
        with self._lock:
            for known in (self._buffer_symbols.get(rel), self._files.get(rel)):
                if known is not None and known.digest == digest:
                    return known
        return self._parse_text(spec.name, rel, data)

    @staticmethod
    def _parse_unindexed(language: str, rel: str, data: bytes) -> FileSymbols:
        """The outline of a text that matches no file or buffer (memoised per index)."""
        spec = language_named(language)
        assert spec is not None  # the name came from a spec
        return parse_source(spec, rel, data)

    def language(self, rel: str) -> LanguageSpec | None:
        symbols = self._effective(rel)
        return language_named(symbols.language) if symbols else language_for(rel)

    # -- internals -----------------------------------------------------------------------------
    def _effective(self, rel: str) -> FileSymbols | None:
        return self._buffer_symbols.get(rel) or self._files.get(rel)

    def _rebuild_tables(self) -> None:
        self._names = {}
        self._resolver = Resolver(root_name=self.root.name)
        for rel in self._files:
            self._resolver.add(rel)
        for rel in set(self._files) | set(self._buffer_symbols):
            symbols = self._effective(rel)
            if symbols is not None:
                self._add_names(rel, (d.name for d in symbols.definitions))

    def _add_names(self, rel: str, names: Iterable[str]) -> None:
        for name in names:
            self._names.setdefault(name, set()).add(rel)

    def _reindex_names(self, rel: str, before: FileSymbols | None) -> None:
        after = self._effective(rel)
        old = {d.name for d in before.definitions} if before else set()
        new = {d.name for d in after.definitions} if after else set()
        for name in old - new:
            holders = self._names.get(name)
            if holders is not None:
                holders.discard(rel)
                if not holders:
                    del self._names[name]
        self._add_names(rel, new - old)
