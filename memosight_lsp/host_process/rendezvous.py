"""Where a relay finds a host: a Unix socket per host in a private folder, named by a key of
everything that makes two servers differ (the interpreter, the package, its version and its
modules' times, and the environment that configures it), and the greeting they exchange. The
working folder is not in the key: a session runs in its relay's (relative model paths), so one
host serves every project.

Standard library only: the relay imports this before anything else and must start in
milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import socket
import stat
import sys
from pathlib import Path

from memosight_lsp import __version__

log = logging.getLogger(__name__)

KEEP_ALIVE_ENV = "MEMOSIGHT_KEEP_ALIVE"
RUNTIME_DIR_ENV = "MEMOSIGHT_RUNTIME_DIR"
# Seconds a host keeps its model after its editor left (Ollama's keep_alive is 5 minutes too);
# 0 serves in the editor's own process, as before.
DEFAULT_KEEP_ALIVE_S = 300.0
MAX_KEEP_ALIVE_S = 7 * 24 * 3600.0
# The relay's first words, then its working folder and a newline, sent with its stderr (the
# session's log goes there); the host answers one of the two lines.
HELLO = b"memosight-relay 2\n"
MAX_GREETING = 8192
# Another host's question, after a session: is this one idle, and with which model? Answered
# IDLE, a space, the model's tag and a newline, or BUSY.
PROBE = b"memosight-probe 2\n"
IDLE = b"idle"
# The host's last words in a session, after the protocol's: the exit code the relay exits with.
EXIT_HEADER = b"MemoSight-Exit:"
ACCEPTED = b"ok"  # then a space, the host's process id and a newline
BUSY = b"busy\n"
# Names that configure a server: two environments that differ in one get two hosts.
KEYED_ENV = (
    "PYTHONPATH",
    "HOME",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "OMP_NUM_THREADS",
    "CUDA_VISIBLE_DEVICES",
    "PYTHONDONTWRITEBYTECODE",
)
MAX_SOCKET_PATH = 100  # sun_path is 104-108 bytes on Linux and macOS


def supported() -> bool:
    return hasattr(socket, "AF_UNIX") and hasattr(socket, "send_fds")


def keep_alive_seconds(given: float | None = None) -> float:
    """`--keep-alive` when given, else MEMOSIGHT_KEEP_ALIVE, else the default; bounded."""
    if given is None:
        raw = os.environ.get(KEEP_ALIVE_ENV, "").strip()
        if not raw:
            return DEFAULT_KEEP_ALIVE_S
        try:
            given = float(raw)
        except ValueError:
            log.warning(
                "%s=%r is not a number of seconds; %g used",
                KEEP_ALIVE_ENV,
                raw,
                DEFAULT_KEEP_ALIVE_S,
            )
            return DEFAULT_KEEP_ALIVE_S
    if given != given:  # NaN
        return 0.0
    return min(max(0.0, given), MAX_KEEP_ALIVE_S)


def runtime_dir() -> Path | None:
    """The private folder of this user's host sockets, made 0700; None when it cannot be made or
    is not private (another user could then reach the host)."""
    configured = os.environ.get(RUNTIME_DIR_ENV)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if configured:
        folder = Path(configured)
    elif xdg:
        folder = Path(xdg) / "memosight"
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = Path(cache) / "memosight" / "run"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except OSError as err:
        log.warning("no folder for the model host (%s): serving in this process", err)
        return None
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s is not private to this user: serving in this process", folder)
        return None
    return folder


def host_key() -> str:
    """What two servers must share to serve each other's editors."""
    import memosight_lsp

    env = {
        name: value
        for name, value in os.environ.items()
        if name.startswith("MEMOSIGHT_") and name not in (KEEP_ALIVE_ENV, RUNTIME_DIR_ENV)
    }
    env.update({name: os.environ[name] for name in KEYED_ENV if name in os.environ})
    package = Path(memosight_lsp.__file__).parent
    described = json.dumps(
        [sys.executable, str(package), __version__, source_stamp(package), sorted(env.items())]
    )
    return hashlib.sha256(described.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def source_stamp(package: Path) -> int:
    """The newest modification time of the package's modules: a host running code that was
    edited (an editable install) or upgraded in place serves no new editor."""
    newest = 0
    for path in package.rglob("*.py"):
        try:
            newest = max(newest, path.stat().st_mtime_ns)
        except OSError:
            continue
    return newest


def greeting() -> bytes:
    return HELLO + os.fsencode(os.getcwd()) + b"\n"


def working_folder(greeting: bytes) -> str | None:
    """The relay's working folder from its greeting; None when it is not a relay's."""
    if not greeting.startswith(HELLO) or not greeting.endswith(b"\n"):
        return None
    folder = greeting[len(HELLO) : -1]
    return os.fsdecode(folder) if folder and b"\n" not in folder else None


def key_of(path: Path) -> str:
    """The key in a host's socket name."""
    return path.name.split("-")[1] if path.name.count("-") >= 2 else ""


def new_socket_path(folder: Path, key: str) -> Path:
    return folder / f"host-{key}-{secrets.token_hex(4)}.sock"


def host_sockets(folder: Path, key: str) -> list[Path]:
    """This key's sockets, the newest first."""
    found = []
    for path in folder.glob(f"host-{key}-*.sock"):
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    return [path for _, path in sorted(found, reverse=True)]
