"""Keep the index in step with the disk: watchdog events, coalesced and applied after a quiet spell.

Editors save through temp files and renames, and `git checkout` touches hundreds of files at once:
events are collected per path and applied together once nothing happened for `debounce_s`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from .files import VENDORED_DIRS

if TYPE_CHECKING:
    from .index import WorkspaceIndex

log = logging.getLogger(__name__)

_UPDATE, _REMOVE, _REMOVE_DIR, _SCAN_DIR = "update", "remove", "remove_dir", "scan_dir"


class Watcher(FileSystemEventHandler):
    def __init__(
        self,
        index: WorkspaceIndex,
        *,
        debounce_s: float = 0.2,
        on_change: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.index = index
        self.debounce_s = debounce_s
        self.on_change = on_change
        self._pending: dict[str, str] = {}
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._observer: Observer | None = None  # type: ignore[valid-type]

    def start(self) -> None:
        observer = Observer()
        observer.schedule(self, str(self.index.root), recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self.flush()

    # -- events --------------------------------------------------------------------------------
    def on_any_event(self, event: FileSystemEvent) -> None:
        kind = event.event_type
        if kind in ("opened", "closed_no_write"):
            return
        src = os.fsdecode(event.src_path)
        if kind == "moved":
            dest = os.fsdecode(event.dest_path)
            if event.is_directory:
                self._queue(src, _REMOVE_DIR)
                self._queue(dest, _SCAN_DIR)
            else:
                self._queue(src, _REMOVE)
                self._queue(dest, _UPDATE)
        elif kind == "deleted":
            self._queue(src, _REMOVE_DIR if event.is_directory else _REMOVE)
        elif event.is_directory:
            if kind == "created":
                self._queue(src, _SCAN_DIR)
        else:  # created, modified, closed
            self._queue(src, _UPDATE)

    def _queue(self, path: str, action: str) -> None:
        with self._lock:
            self._pending[path] = action
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.debounce_s, self.flush)
            self._timer.daemon = True
            self._timer.start()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            self._timer = None
        if not pending:
            return
        changed: list[str] = []
        for path, action in sorted(pending.items()):
            try:
                if action == _REMOVE:
                    self.index.remove_file(path)
                elif action == _REMOVE_DIR:
                    self.index.remove_under(path)
                elif action == _SCAN_DIR:
                    for root, dirs, names in os.walk(path):
                        dirs[:] = [d for d in dirs if d not in VENDORED_DIRS]
                        for name in names:
                            self.index.update_file(os.path.join(root, name))
                else:
                    self.index.update_file(path)
                changed.append(self.index.relpath(path))
            except Exception:  # one bad file must not stop the watcher thread
                log.exception("index update for %s failed", path)
        if self.on_change is not None and changed:
            self.on_change(changed)
