"""Per-buffer type-through cache: serve the rest of a shown suggestion without a model call.

A suggestion G was computed for a document `before + after` with the cursor between them. While
the document reads `before + G[:k] + after` (the user typed, accepted a word or a line, or
backspaced within the suggestion) the cursor sits at `len(before) + k` and the rest is `G[k:]`.
Any other edit makes the entry useless, and `prune` drops it.

A suggestion may hold code that follows the cursor on its line and replace it (`t *testing.T) {`
over the editor's `)`: Completion.replaces_rest): `kept` characters of `after`, at `kept_at` in
G. Typing past that code steps over it (the editor overtypes its `)`, or the suggestion is
accepted whole), so the document reads `before + G[:k] + after` with the part of the kept code
the typing has passed left out of `after`.

An entry may also demand a minimum k: the completion precomputed for "after accepting S" is
stored as ghost S + S2 with min_typed len(S), so it is served once S has been accepted in full.
Comparisons use startswith/endswith with offsets: no copies of the document are made (but
for `after` past kept code, a few characters shorter).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

MAX_ENTRIES_PER_BUFFER = 4


@dataclass(frozen=True, kw_only=True)
class TypeThroughEntry:
    before: str  # document text before the cursor when the suggestion was made
    after: str  # document text after the cursor
    ghost: str  # the suggestion, as if inserted at the cursor
    min_typed: int = 0  # serve only once at least this much of ghost has been typed
    # The code after the cursor the ghost holds and replaces: `kept` characters of `after`
    # (none for an insertion), at `kept_at` in the ghost.
    kept_at: int = 0
    kept: int = 0
    tokens: int = 0  # model tokens behind the suggestion (for stats)
    source: str = "model"  # model | precompute

    def passed(self, k: int) -> int:
        """How much of the kept code k typed characters of the ghost have stepped over."""
        return min(max(k - self.kept_at, 0), self.kept)

    def replaces_at(self, k: int) -> bool:
        """Whether the ghost's rest after k typed characters still holds kept code."""
        return self.passed(k) < self.kept

    def holds(self, text: str, k: int) -> bool:
        """Whether the document is the one the ghost was made for with k characters typed."""
        passed = self.passed(k)
        if len(text) != len(self.before) + k + len(self.after) - passed:
            return False
        if not text.startswith(self.before):
            return False
        if not text.endswith(self.after[passed:] if passed else self.after):
            return False
        return text.startswith(self.ghost[:k], len(self.before))

    def typed(self, text: str) -> int | None:
        """How much of the ghost the document holds now, or None if it was edited elsewhere.
        With the cursor on the kept code the document reads the same wherever it is there:
        the kept code's start counts."""
        n = len(text) - len(self.before) - len(self.after)
        k = n if n <= self.kept_at else n + self.kept
        if not 0 <= k <= len(self.ghost) or not self.holds(text, k):
            return None
        return k

    def rest(self, text: str, offset: int) -> str | None:
        """The remaining suggestion for a cursor at offset in text, or None when not served."""
        k = offset - len(self.before)
        if k < self.min_typed or k >= len(self.ghost) or not self.holds(text, k):
            return None
        return self.ghost[k:]


def _extends(a: TypeThroughEntry, b: TypeThroughEntry) -> bool:
    """Whether one is the other continued (or cut shorter) for the same document state."""
    return (a.before, a.after, a.min_typed) == (b.before, b.after, b.min_typed) and (
        a.ghost.startswith(b.ghost) or b.ghost.startswith(a.ghost)
    )


@dataclass(frozen=True, kw_only=True)
class TypeThroughHit:
    text: str
    entry: TypeThroughEntry
    replaces_rest: bool = False  # `text` still holds code after the cursor, which it replaces


class TypeThroughCache:
    """Suggestions per buffer, newest first. Thread-safe: the worker stores, the loop reads."""

    def __init__(self, max_entries: int = MAX_ENTRIES_PER_BUFFER) -> None:
        self._entries: dict[str, list[TypeThroughEntry]] = {}
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def put(self, buffer_id: str, entry: TypeThroughEntry) -> None:
        """Store a suggestion, newest first; it replaces an older one for the same document
        state that it continues (a decoding that answered early stores each longer text)."""
        if not entry.ghost:
            return
        with self._lock:
            entries = [e for e in self._entries.get(buffer_id, []) if not _extends(e, entry)]
            entries.insert(0, entry)
            self._entries[buffer_id] = entries[: self.max_entries]

    def lookup(self, buffer_id: str, text: str, offset: int) -> TypeThroughHit | None:
        with self._lock:
            entries = list(self._entries.get(buffer_id, ()))
        for entry in entries:
            rest = entry.rest(text, offset)
            if rest is not None:
                replaces = entry.replaces_at(offset - len(entry.before))
                return TypeThroughHit(text=rest, entry=entry, replaces_rest=replaces)
        return None

    def prune(self, buffer_id: str, text: str) -> None:
        """Drop the entries the document no longer agrees with (an edit elsewhere)."""
        with self._lock:
            entries = self._entries.get(buffer_id)
            if not entries:
                return
            kept = [e for e in entries if e.typed(text) is not None]
            if kept:
                self._entries[buffer_id] = kept
            else:
                del self._entries[buffer_id]

    def forget(self, buffer_id: str) -> None:
        with self._lock:
            self._entries.pop(buffer_id, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def entries(self, buffer_id: str) -> list[TypeThroughEntry]:
        with self._lock:
            return list(self._entries.get(buffer_id, ()))
