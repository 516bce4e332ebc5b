"""Keep the index in step with the disk: watchdog events, coalesced and applied after a quiet spell.

Editors save through temp files and renames, and `git checkout` touches hundreds of files at once:
events are collected per path and handed to the sink (the index) together once nothing happened
for `debounce_s`. Whoever starts a Watcher stops it (server/indexes.py: with the folder's index).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from .events import EventSink, FileEvent
from .files import VENDORED_DIRS

log = logging.getLogger(__name__)

MAX_WATCHES = 256  # watchdog runs one emitter thread per watch
# A burst this big (a git checkout, a build) may have overflowed the kernel's inotify queue
# (16,384 events by default; watchdog then drops events without telling the handler): after
# applying one, the index is compared with the disk.
BURST = 512


class Watcher(FileSystemEventHandler):
    def __init__(
        self,
        root: str | Path,
        sink: EventSink,
        *,
        debounce_s: float = 0.2,
        on_change: Callable[[list[str]], None] | None = None,
    ) -> None:
        self.root = str(root)
        self.sink = sink
        self.debounce_s = debounce_s
        self.on_change = on_change  # called with the root-relative paths of each applied batch
        self._pending: dict[str, FileEvent] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._timer: threading.Timer | None = None
        self._observer: BaseObserver | None = None
        self._shallow: set[str] = set()  # folders watched without their subfolders

    def start(self) -> None:
        observer = Observer()
        plan = watch_plan(self.root)
        for folder, recursive in plan:
            observer.schedule(self, folder, recursive=recursive)
            if not recursive:
                self._shallow.add(folder)
        observer.daemon = True
        observer.start()
        self._observer = observer
        log.debug("watching %s with %d watches", self.root, len(plan))

    def stop(self) -> None:
        """Stop watching, then apply what is still pending."""
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
                self._queue(src, FileEvent.REMOVE_DIR)
                self._queue(dest, FileEvent.SCAN_DIR)
            else:
                self._queue(src, FileEvent.REMOVE)
                self._queue(dest, FileEvent.UPDATE)
        elif kind == "deleted":
            self._queue(src, FileEvent.REMOVE_DIR if event.is_directory else FileEvent.REMOVE)
        elif event.is_directory:
            if kind == "created":
                self._queue(src, FileEvent.SCAN_DIR)
                self._watch_new_folder(src)
        else:  # created, modified, closed
            self._queue(src, FileEvent.UPDATE)

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

    def _queue(self, path: str, event: FileEvent) -> None:
        with self._lock:
            self._pending[path] = event
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
        changed = self.sink.apply_events(pending)
        if len(pending) >= BURST:
            caught = self.sink.catch_up()
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
