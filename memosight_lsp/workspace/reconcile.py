"""Bring an index back in step with the disk when events were missed: between a scan's listing
and the watcher's start, or when a burst overflowed the kernel's inotify queue."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .files import iter_source_files

if TYPE_CHECKING:
    from .index import WorkspaceIndex


def catch_up(index: WorkspaceIndex) -> int:
    """Re-index what differs between the index and the disk (size or mtime, files added or
    gone): for changes no event told of. Returns how many files it touched."""
    disk = dict(iter_source_files(index.root, index.max_file_bytes))
    touched = 0
    for rel, info in disk.items():
        known = index.symbols(rel)
        if known is None or (known.size, known.mtime_ns) != (info.st_size, info.st_mtime_ns):
            index.update_file(rel)
            touched += 1
    for rel in index.files():
        if rel not in disk:
            index.remove_file(rel)
            touched += 1
    return touched
