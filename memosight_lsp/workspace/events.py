"""File events: what the watcher reports and the index applies. Neither imports the other; the
watcher sees the index only as an EventSink."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol


class FileEvent(enum.Enum):
    UPDATE = "update"  # a file was created or written: read it again
    REMOVE = "remove"  # a file is gone (deleted, or moved away)
    REMOVE_DIR = "remove_dir"  # a folder is gone: forget every file below it
    SCAN_DIR = "scan_dir"  # a folder appeared (created, or moved in): read every file below it


class EventSink(Protocol):
    def apply_events(self, events: Mapping[str, FileEvent]) -> list[str]:
        """Apply the latest event of each absolute path; returns the paths it touched, relative
        to the root."""
        ...

    def catch_up(self) -> int:
        """Bring the sink in step with the disk after events may have been lost (a burst that
        overflowed the kernel's queue); returns how many files it touched."""
        ...
