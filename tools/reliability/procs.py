"""The server process as the operating system sees it: memory, threads, descriptors, children,
and the environment that runs it from this source tree."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def proc_status(pid: int) -> dict[str, int]:
    """rssKiB, threads and fds of a live process, from /proc (empty when it is gone)."""
    try:
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError):
        return {}
    return {
        "rssKiB": int(fields["VmRSS"].split()[0]),
        "threads": int(fields["Threads"]),
        "fds": fds,
    }


def children_of(pid: int) -> list[int]:
    """Processes whose parent is `pid` (what a server left running)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This interpreter's environment with the package importable from its source tree."""
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env
