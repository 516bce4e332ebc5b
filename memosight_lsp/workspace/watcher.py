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
from .reconcile import catch_up

if TYPE_CHECKING:
    from .index import WorkspaceIndex

log = logging.getLogger(__name__)

_UPDATE, _REMOVE, _REMOVE_DIR, _SCAN_DIR = "update", "remove", "remove_dir", "scan_dir"
MAX_WATCHES = 256  # watchdog runs one emitter thread per watch
# A burst this big (a git checkout, a build) may have overflowed the kernel's inotify queue
# (16,384 events by default; watchdog then drops events without telling the handler): after
# applying one, the index is compared with the disk.
BURST = 512


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
        self._flushing = threading.Lock()
        self._timer: threading.Timer | None = None
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._shallow: set[str] = set()  # folders watched without their subfolders

    def start(self) -> None:
        observer = Observer()
        plan = watch_plan(str(self.index.root))
        for folder, recursive in plan:
            observer.schedule(self, folder, recursive=recursive)
            if not recursive:
                self._shallow.add(folder)
        observer.daemon = True
        observer.start()
        self._observer = observer
        log.debug("watching %s with %d watches", self.index.root, len(plan))

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
                self._watch_new_folder(src)
        else:  # created, modified, closed
            self._queue(src, _UPDATE)

    def _watch_new_folder(self, folder: str) -> None:
        """A folder created where only the parent itself is watched gets its own watch."""
        observer = self._observer
        parent, name = os.path.split(folder.rstrip(os.sep))
        if observer is None or parent not in self._shallow or name in VENDORED_DIRS:
            return
        try:
            observer.schedule(self, folder, recursive=True)
        except OSError:  # gone again, or out of inotify watches
            log.debug("cannot watch %s", folder, exc_info=True)

    def _queue(self, path: str, action: str) -> None:
        with self._lock:
            self._pending[path] = action
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.debounce_s, self.flush)
            self._timer.daemon = True
            self._timer.start()

    def flush(self) -> None:
        # One flush at a time: a timer may fire while a long flush runs, and two batches applied
        # side by side can apply an older event last (a file deleted, then made again, ends up
        # dropped). The next flush takes everything that came meanwhile.
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
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
                elif action == _SCAN_DIR:  # also what a folder deleted and made again left
                    self.index.remove_file(path)  # a folder where a file was
                    found = set()
                    for root, dirs, names in os.walk(path):
                        dirs[:] = [d for d in dirs if d not in VENDORED_DIRS]
                        for name in names:
                            self.index.update_file(os.path.join(root, name))
                            found.add(self.index.relpath(os.path.join(root, name)))
                    prefix = self.index.relpath(path).rstrip("/") + "/"
                    for rel in self.index.files():
                        if rel.startswith(prefix) and rel not in found:
                            self.index.remove_file(rel)
                else:
                    self.index.update_file(path)
                changed.append(self.index.relpath(path))
            except Exception:  # one bad file must not stop the watcher thread
                log.exception("index update for %s failed", path)
        if len(pending) >= BURST:
            caught = catch_up(self.index)
            if caught:
                log.info("%d files changed beyond the events of a burst; re-indexed", caught)
        if self.on_change is not None and changed:
            self.on_change(changed)


def watch_plan(root: str, max_watches: int = MAX_WATCHES) -> list[tuple[str, bool]]:
    """(folder, recursive) watches that cover every folder under root except vendored ones.

    A recursive watch on the root would also watch .venv, node_modules and build outputs (tens of
    thousands of folders: slow to set up, can exhaust inotify watches). Folders with a vendored
    folder somewhere below are watched alone, the others recursively.
    """
    tainted: set[str] = set()  # folders with a vendored folder at some depth below
    for folder, dirs, _ in os.walk(root):
        if any(d in VENDORED_DIRS for d in dirs):
            path = folder
            while path not in tainted:
                tainted.add(path)
                if path == root:
                    break
                path = os.path.dirname(path)
        dirs[:] = [d for d in dirs if d not in VENDORED_DIRS]
    plan: list[tuple[str, bool]] = []
    pending = [root]
    while pending and len(plan) < max_watches:
        folder = pending.pop(0)
        if folder not in tainted:
            plan.append((folder, True))
            continue
        plan.append((folder, False))
        try:
            children = sorted(
                e.path
                for e in os.scandir(folder)
                if e.is_dir(follow_symlinks=False) and e.name not in VENDORED_DIRS
            )
        except OSError:
            continue
        pending.extend(children)
    if pending:
        log.warning("watching the first %d folders of %s only", max_watches, root)
    return plan
