"""One workspace index per workspace folder, kept in step with the editor's buffers.

Scans run on a thread of their own per folder (never on the event loop, never on the model
worker), then the folder is watched for disk changes: its Watcher is started and stopped here,
with the folder's index (which then saves what it learned). Buffer updates
(didOpen/didChange/didClose) are applied in order on one index thread: the event loop only
queues them, so typing never waits for a re-parse. A completion that arrives before its buffer
update landed still sees the current text: the context packer parses the text it is given when
the index is behind.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.workspace import PositionCodec

from memosight_lsp.workspace import TextEdit, WorkspaceIndex
from memosight_lsp.workspace.files import indexable_text
from memosight_lsp.workspace.watcher import Watcher

from .scan_priority import ModelFirst

log = logging.getLogger(__name__)

RECENT_EDITS = 10  # (path, line) pairs handed to the ranker
PROGRESS_STEP = 5  # percent between $/progress reports

# (folder, phase "begin" | "report" | "end", percentage or None, message); from scan threads.
ProgressListener = Callable[[Path, str, "int | None", str], None]


@dataclass(frozen=True, slots=True)
class Change:
    """One LSP content change: a range replacement, or the whole text when `range` is None."""

    range: types.Range | None
    text: str


class WorkspaceIndexes:
    def __init__(
        self,
        on_progress: ProgressListener = lambda *a: None,
        *,
        watch: bool = True,
        model_calm: Callable[[float], bool] = lambda timeout: True,
    ):
        """`model_calm(timeout)`: waits until the model has no work that scans give way to,
        at most `timeout` seconds; whether it has none (scan_priority.py)."""
        self._on_progress = on_progress
        self._watch = watch
        self._model_calm = model_calm
        self._indexes: dict[Path, WorkspaceIndex] = {}
        self._watchers: dict[Path, Watcher] = {}
        self._lock = threading.Lock()
        self._updates = ThreadPoolExecutor(1, thread_name_prefix="memosight-index")
        self._recent: deque[tuple[str, int]] = deque(maxlen=RECENT_EDITS)
        self._stopped = threading.Event()  # set by stop(); it also ends a scan's wait at once

    # -- folders ------------------------------------------------------------------------------
    def set_roots(self, roots: Sequence[str | Path]) -> None:
        """Index these folders (scanning new ones in the background); forget the others."""
        wanted = {Path(r).resolve() for r in roots if Path(r).is_dir()}
        with self._lock:
            gone = [
                (self._indexes.pop(r), self._watchers.pop(r, None))
                for r in list(self._indexes)
                if r not in wanted
            ]
            new = [r for r in sorted(wanted) if r not in self._indexes]
            for root in new:
                self._indexes[root] = WorkspaceIndex(root)
        for index, watcher in gone:
            self._updates.submit(_retire, index, watcher)
        for root in new:
            thread = threading.Thread(
                target=self._scan, args=(root,), name=f"memosight-scan-{root.name}", daemon=True
            )
            thread.start()

    def roots(self) -> list[Path]:
        with self._lock:
            return sorted(self._indexes)

    def summary(self) -> list[dict[str, object]]:
        """Per folder: its root and how many files are indexed (for memosight/stats)."""
        with self._lock:
            indexes = sorted(self._indexes.items())
        return [{"root": str(root), "files": len(index)} for root, index in indexes]

    def index_for(self, path: str | None) -> WorkspaceIndex | None:
        """The index of the innermost folder holding `path`; None outside every folder."""
        if not path:
            return None
        file = Path(os.path.normpath(path))  # `..` must not lead into a folder lexically
        try:
            resolved = file.resolve()
        except (OSError, ValueError):  # a NUL byte, a symlink loop
            return None
        with self._lock:
            indexes = list(self._indexes.items())
        for candidate in (file, resolved):  # roots are resolved: try through symlinks too
            best: WorkspaceIndex | None = None
            for root, index in indexes:
                inner = best is None or len(root.parts) > len(best.root.parts)
                if inner and candidate.is_relative_to(root):
                    best = index
            if best is not None:
                return best
        return None

    def wait_idle(self, timeout: float | None = None) -> None:
        """Block until queued buffer updates are applied (tests, benchmarks)."""
        self._updates.submit(lambda: None).result(timeout)

    def _scan(self, root: Path) -> None:
        with self._lock:
            index = self._indexes.get(root)
        if index is None or self._stopped.is_set():
            return
        name = root.name or str(root)
        self._on_progress(root, "begin", 0, f"indexing {name}")
        model_first = ModelFirst(self._model_calm, self._stopped)
        waited = model_first.before_scan()
        if waited >= 0.1:
            log.info("%s: the scan waited %.1f s for the model's work", root, waited)
        if self._stopped.is_set():
            self._on_progress(root, "end", None, f"indexing {name} stopped")
            return
        last = [-PROGRESS_STEP]

        def progress(done: int, total: int) -> None:
            percent = done * 100 // max(1, total)
            if percent - last[0] >= PROGRESS_STEP:
                last[0] = percent
                self._on_progress(root, "report", percent, f"{done}/{total} files")

        try:
            stats = index.scan(on_progress=progress, give_way=model_first.between_steps)
            message = f"indexed {stats.files} files in {stats.seconds:.1f}s"
            model_first.between_steps()
            if self._watch and self._start_watching(root, index):
                model_first.between_steps()
                caught = index.catch_up()  # changes between the scan's listing and the watch
                if caught:
                    message += f" ({caught} changed while indexing)"
        except Exception as err:  # a broken folder must not take the server down
            log.exception("indexing %s failed", root)
            message = f"indexing {name} failed: {err}"
        log.info("%s: %s", root, message)
        self._on_progress(root, "end", None, message)

    def _start_watching(self, root: Path, index: WorkspaceIndex) -> bool:
        """Watch a scanned folder, unless it was removed (or the server stopped) meanwhile;
        returns whether it is watched."""
        with self._lock:
            if not self._serves(root, index):
                return False
        watcher = Watcher(root, index)
        watcher.start()  # outside the lock: planning the watches walks the folder tree
        with self._lock:
            kept = self._serves(root, index)
            if kept:
                self._watchers[root] = watcher
        if not kept:  # removed while the watches were set up
            watcher.stop()
        return kept

    def _serves(self, root: Path, index: WorkspaceIndex) -> bool:
        """Whether `index` is still the one for `root` (call with the lock held)."""
        return self._indexes.get(root) is index and not self._stopped.is_set()

    # -- buffers ------------------------------------------------------------------------------
    def opened(self, path: str | None, text: str, language_id: str | None) -> None:
        index = self.index_for(path)
        if index is None or path is None:
            return
        self._updates.submit(self._open, index, path, text, language_id)

    def changed(
        self,
        path: str | None,
        changes: Sequence[Change],
        final_text: str,
        language_id: str | None,
        codec: PositionCodec,
    ) -> None:
        """Queue the incremental re-parse of an edited buffer and remember where it was edited."""
        if path is None:
            return
        for change in changes:
            if change.range is not None:
                entry = (path, change.range.start.line)
                if not self._recent or self._recent[-1] != entry:
                    self._recent.append(entry)
        index = self.index_for(path)
        if index is None:
            return
        self._updates.submit(
            self._change, index, path, list(changes), final_text, language_id, codec
        )

    def closed(self, path: str | None) -> None:
        index = self.index_for(path)
        if index is not None and path is not None:
            self._updates.submit(self._close, index, path)

    def recent_edits(self) -> tuple[tuple[str, int], ...]:
        return tuple(self._recent)

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            indexes, self._indexes = list(self._indexes.items()), {}
            watchers, self._watchers = self._watchers, {}
        for root, index in indexes:
            try:
                _retire(index, watchers.get(root))
            except Exception:
                log.exception("stopping the watcher of %s failed", index.root)
        self._updates.shutdown(wait=False, cancel_futures=True)

    # -- on the index thread ------------------------------------------------------------------
    def _open(self, index: WorkspaceIndex, path: str, text: str, language_id: str | None) -> None:
        try:
            if index.buffer(path) is not None:
                index.close_buffer(path)  # reopened: start from the text given now
            if indexable_text(text):
                index.update_buffer(path, text, language_id=language_id)
        except Exception:
            log.exception("indexing the buffer %s failed", path)

    def _change(
        self,
        index: WorkspaceIndex,
        path: str,
        changes: list[Change],
        final_text: str,
        language_id: str | None,
        codec: PositionCodec,
    ) -> None:
        try:
            buffer = index.buffer(path)
            if not indexable_text(final_text):
                index.close_buffer(path)  # grew huge or binary: the disk copy (if any) stands
                return
            if buffer is None or any(c.range is None for c in changes):
                if buffer is None:
                    index.update_buffer(path, final_text, language_id=language_id)
                else:
                    index.update_buffer(path, final_text)
                return
            index.update_buffer(path, edits=to_edits(buffer.text, changes, codec))
            if buffer.text != final_text:  # out of step (should not happen): resynchronise
                log.warning("index buffer %s was out of step; resynchronised", path)
                index.update_buffer(path, final_text)
        except Exception:
            log.exception("re-indexing the buffer %s failed", path)

    def _close(self, index: WorkspaceIndex, path: str) -> None:
        try:
            index.close_buffer(path)
        except Exception:
            log.exception("closing the buffer %s failed", path)


def _retire(index: WorkspaceIndex, watcher: Watcher | None) -> None:
    """A folder no longer served: stop its watcher and keep what the index learned on disk."""
    if watcher is not None:
        watcher.stop()
    index.save_if_dirty()


def to_edits(text: str, changes: Sequence[Change], codec: PositionCodec) -> list[TextEdit]:
    """LSP range changes (client position units, applied in order) as the index's edits
    (str indices), tracking the text between changes so each is read against its own state."""
    edits: list[TextEdit] = []
    for n, change in enumerate(changes):
        assert change.range is not None
        start, start_char = _locate(text, change.range.start, codec)
        end, end_char = _locate(text, change.range.end, codec)
        rng = change.range
        edits.append(TextEdit(rng.start.line, start_char, rng.end.line, end_char, change.text))
        if n + 1 < len(changes):
            text = text[:start] + change.text + text[max(start, end) :]
    return edits


def _locate(text: str, position: types.Position, codec: PositionCodec) -> tuple[int, int]:
    """(str offset, str column) of an LSP position in text, clamped to the line."""
    pos = 0
    for _ in range(position.line):
        newline = text.find("\n", pos)
        if newline < 0:
            return len(text), len(text) - (text.rfind("\n") + 1)
        pos = newline + 1
    line_end = text.find("\n", pos)
    content = text[pos : len(text) if line_end < 0 else line_end]
    column = codec.position_from_client_units(
        [content], types.Position(line=0, character=position.character)
    ).character
    column = min(max(column, 0), len(content))
    return pos + column, column
