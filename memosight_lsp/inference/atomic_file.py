"""Files in the user cache written whole or not at all: a reader (another server, a later
start) sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_text(path: Path, text: str) -> None:
    """Write `text` beside `path`, then rename it over `path`; OSError when that fails (the
    partial file is removed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        temp.write_text(text, encoding="utf-8")
        os.replace(temp, path)
    except OSError:
        temp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any, *, indent: int | None = 2) -> None:
    """`data` as JSON, written as write_text does."""
    text = json.dumps(data, indent=indent)
    write_text(path, text + "\n" if indent is not None else text)
