"""`memosight bench startup`: the first suggestion after the server starts, as an editor meets it.

Each run spawns a fresh server (`python -m memosight_lsp`, the environment as it is) and times,
in seconds from just before the spawn: `initialize` answered; the model ready (the first
memosight/status whose state is "ready"); the first inline completion with text. Right after
`initialized` the client opens a file and asks for an inline completion at the cursor, again and
again (each request waits for its answer, a short sleep after an empty one) until one has text,
as an editor asks on every keystroke while the user waits. The server's own "loaded in" seconds
and its log lines (with their seconds from the spawn) are kept too: they say where the time
went. The server is then shut down (shutdown, exit; killed when it does not leave).

The default file is the standard library's textwrap.py with a line in its second half cut just
after `self.` (a held-out file every machine has); `--file --line --character` name another.
`--workspace DIR` opens a project folder as an editor does (its index is scanned beside the
model's load, from the index cache when the project was opened before); by default none.
`--typing S` goes on after the first suggestion as a person types on: for S seconds a keystroke
every quarter second (what follows the cursor in the file) with a completion asked after each;
the run reports their latency (while a workspace is scanned beside them, say) and the slowest
ones with their start after the spawn; `--debug` keeps the servers' debug log (`-vv`) to read
them against.
What is cached (the converted GGUF, the precision measured, the native kernels, the model's
timings) is whatever the machine has: run it twice to see the cached case. Kernels not built
yet are built as a user's server builds them, in the background while the model runs on
torch's (other benchmarks build them first, commands/bench.py).

The model host (`--host`): by default an editor's server is a relay to a host process that
keeps the model loaded after the editor leaves (host_process/). `cold` (the default) gives each
run a folder of its own, so its relay finds no host and starts one, as the first start of the
day does; `kept` starts one server first (not counted) and leaves its host for the runs, as a
start within the keep-alive after an editor closed does; `off` serves in the spawned process
alone (MEMOSIGHT_KEEP_ALIVE=0), as before the host existed. The hosts a run leaves are stopped.

Python's compiled modules: an installed package has them (pip compiles it; an editable install
writes them on its first import), so by default (`--bytecode kept`) the package is compiled
before the first run, as an install would have it, and the servers run without
PYTHONDONTWRITEBYTECODE, which some sandboxes set and which makes every start compile all of
the package's modules again. `--bytecode environment` runs them in the environment as it is.

    memosight bench startup [--model M] [--runs 3] [--timeout 120] [--bytecode kept]
                            [--host cold|kept|off] [--workspace DIR] [--typing S] [--debug] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memosight_lsp.commands.common import add_model_options, model_settings_from_args
from memosight_lsp.config import CompletionSettings, settings_to_wire
from memosight_lsp.host_process.rendezvous import KEEP_ALIVE_ENV, RUNTIME_DIR_ENV
from memosight_lsp.pipeline.positions import index_to_utf16, split_at, utf16_to_index
from memosight_lsp.server.protocol import parent_alive

from .lsp_client import (
    SERVER_COMMAND,
    ResponseError,
    StdioServer,
    first_text,
    inline_params,
    with_settings,
)
from .replay import latency_summary

EMPTY_PAUSE_S = 0.05  # after an empty answer, before asking again: an editor's next keystroke
READY_GRACE_S = 5.0  # the ready status may trail the first answer on the wire by a little
# The server's log format (cli.py): "2026-12-03 11:06:07,123 INFO memosight_lsp...: message".
LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (.*)$")
LOADED_IN = re.compile(r"loaded in ([0-9.]+)s")
# pipeline/calibration.py: what the model's kept timings lack, timed after the first answer.
PENDING_TIMINGS = re.compile(r"calibration: ([\w, ]+) measured after the first answer")
HOST_PID = re.compile(r"serving through the model host \(process (\d+)\)")
HOST_MODES = ("cold", "kept", "off")
MILESTONES = ("initializeS", "readyS", "firstSuggestionS")
TYPED_CHARS = 2000  # the most a run's `--typing` types
KEYSTROKE_S = 0.25  # `--typing`: a keystroke every this many seconds (or when answered, if later)
SLOWEST = 3  # `--typing`: the slowest requests reported with their time


@dataclass(frozen=True)
class Cursor:
    """A file's text as the editor opens it, and the cursor (LSP line and UTF-16 column)."""

    path: Path
    text: str
    line: int
    character: int
    typed: str = ""  # what the person goes on to type there (`--typing`)


def default_cursor() -> Cursor:
    """textwrap.py with the first line of its second half that holds `self.` cut after it."""
    path = Path(textwrap.__file__)
    lines = path.read_text(encoding="utf-8").split("\n")
    middle = len(lines) // 2
    line = next(n for n in range(middle, len(lines)) if "self." in lines[n])
    kept = lines[line][: lines[line].index("self.") + len("self.")]
    _, after = split_at("\n".join(lines), line, len(kept))
    lines[line] = kept
    typed = after[:TYPED_CHARS]  # the line's rest, then the lines below again
    return Cursor(path, "\n".join(lines), line, index_to_utf16(kept, len(kept)), typed)


def cursor_from_args(args: argparse.Namespace) -> Cursor:
    if args.file is None:
        return default_cursor()
    path = Path(args.file).resolve()
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    column = utf16_to_index(lines[min(args.line, len(lines) - 1)], args.character)
    _, after = split_at(text, args.line, column)
    return Cursor(path, text, args.line, args.character, after[:TYPED_CHARS])


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    """initializationOptions: the model options as `memosight complete` takes them, the
    first-response deadline, and `--settings` merged over them section by section."""
    options: dict[str, Any] = {
        "model": settings_to_wire(model_settings_from_args(args)),
        "completion": {"firstResponseMs": args.first_response_ms},
    }
    return with_settings(options, args.settings)


def log_offsets(lines: list[str], spawned_wall: float) -> list[dict[str, Any]]:
    """The server's log lines with their seconds from the spawn (lines without a time stamp,
    such as a traceback's, keep the last stamp seen)."""
    out: list[dict[str, Any]] = []
    seconds: float | None = None
    for line in lines:
        match = LOG_STAMP.match(line)
        if match:
            stamp = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
            seconds = round(stamp.timestamp() - spawned_wall, 3)
            line = match.group(2)
        out.append({"s": seconds, "line": line})
    return out


def first_group(pattern: re.Pattern[str], lines: list[str]) -> str | None:
    """The first group of the first line the pattern finds."""
    for line in lines:
        match = pattern.search(line)
        if match:
            return match.group(1)
    return None


def loaded_in(lines: list[str]) -> float | None:
    """The server's own load seconds, from its "... loaded in 1.9s)" line, if it logged one."""
    found = first_group(LOADED_IN, lines)
    return None if found is None else float(found)


def model_timings(lines: list[str]) -> str | None:
    """Whether the run's load found the model's timings kept on this machine ("kept"), or which
    it lacked ("not kept: prefill, ..."); None when the run loaded nothing (a kept host). A new
    process's first prompt is the small cautious one either way; what is kept decides whether
    the calibration runs after the first answer."""
    pending = first_group(PENDING_TIMINGS, lines)
    if pending is not None:
        return f"not kept: {pending}"
    return "kept" if loaded_in(lines) is not None else None


async def ask_until_text(
    server: StdioServer, cursor: Cursor, deadline: float
) -> tuple[str | None, int]:
    """Inline completions at the cursor, one at a time, until one has text or the deadline
    passes: (the text or None, how many requests were sent)."""
    params = inline_params(cursor.path.as_uri(), cursor.line, cursor.character)
    requests = 0
    while time.monotonic() < deadline:
        requests += 1
        try:
            left = max(deadline - time.monotonic(), 0.001)
            result = await server.call("textDocument/inlineCompletion", params, left)
        except ResponseError:  # cancelled or refused while loading: ask again, as an editor does
            result = None
        except TimeoutError:
            break
        text = first_text(result)
        if text:
            return text, requests
        await asyncio.sleep(EMPTY_PAUSE_S)
    return None, requests


async def keep_typing(
    server: StdioServer, cursor: Cursor, seconds: float, spawned: float
) -> dict[str, Any]:
    """After the first suggestion, type `cursor.typed` a character at a time for `seconds`
    (a keystroke every KEYSTROKE_S, or when the last was answered), asking for an inline
    completion after each, as a person typing on while the workspace is scanned: the requests'
    latency (ms), how many came back empty, and the slowest requests (SLOWEST of them) with
    their start in seconds from the spawn (`spawned`, monotonic), to read beside the server's
    log."""
    uri = cursor.path.as_uri()
    line, character, version = cursor.line, cursor.character, 1
    latencies: list[float] = []
    starts: list[float] = []
    empty = 0
    ends = time.monotonic() + seconds
    for char in cursor.typed:
        if time.monotonic() >= ends:
            break
        version += 1
        at = {"line": line, "character": character}
        server.notify(
            "textDocument/didChange",
            {
                "textDocument": {"uri": uri, "version": version},
                "contentChanges": [{"range": {"start": at, "end": at}, "text": char}],
            },
        )
        if char == "\n":
            line, character = line + 1, 0
        else:
            character += index_to_utf16(char, 1)
        started = time.monotonic()
        try:
            result = await server.call(
                "textDocument/inlineCompletion", inline_params(uri, line, character), 10.0
            )
        except (ResponseError, TimeoutError):  # cancelled by the next keystroke, or no answer
            result = None
        latency = time.monotonic() - started
        latencies.append(round(latency * 1000, 3))  # as latency_summary rounds them
        starts.append(started - spawned)
        empty += not first_text(result)
        await asyncio.sleep(max(0.0, KEYSTROKE_S - latency))
    slowest = sorted(range(len(latencies)), key=lambda i: -latencies[i])[:SLOWEST]
    return {
        "keystrokes": len(latencies),
        "empty": empty,
        **latency_summary(latencies),
        "slowest": [{"s": round(starts[i], 3), "ms": latencies[i]} for i in slowest],
    }


def server_environment(bytecode: str) -> dict[str, str]:
    """The servers' environment: this one, less PYTHONDONTWRITEBYTECODE with `kept`, after
    compiling the package as an install would (`kept` only)."""
    if bytecode != "kept":
        return dict(os.environ)
    package = Path(__file__).resolve().parents[1]
    compileall.compile_dir(str(package), quiet=2)  # nothing on stdout (the JSON)
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def host_pid(lines: list[str]) -> int | None:
    """The model host that served a run, from its relay's log line (None: no host)."""
    found = first_group(HOST_PID, lines)
    return None if found is None else int(found)


HOST_EXIT_WAIT_S = 5.0  # a stopped host's last work must not run beside the next run


def stop_host(pid: int | None) -> None:
    """SIGTERM the host, then wait (bounded) until it is gone."""
    if pid is None:
        return
    with contextlib.suppress(OSError):  # gone already
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + HOST_EXIT_WAIT_S
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.02)


def _running(pid: int) -> bool:
    """Whether the process runs (a zombie nobody reaped yet has ended)."""
    if not parent_alive(pid):
        return False
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] != "Z"
    return True


async def one_run(
    options: dict[str, Any],
    cursor: Cursor,
    timeout_s: float,
    env: dict[str, str],
    folders: tuple[Path, ...] = (),
    typing_s: float = 0.0,
    debug: bool = False,
) -> dict[str, Any]:
    """One fresh server, from the spawn to the first suggestion with text (`debug`: its log
    at the debug level)."""
    states: dict[str, float] = {}  # state -> seconds from the spawn it was first reported
    spawned_wall = time.time()
    spawned = time.monotonic()
    command = [*SERVER_COMMAND, "-vv"] if debug else SERVER_COMMAND
    server = StdioServer(command, stderr="collect", env=env)

    def on_status(params: Any) -> None:  # on the client's reader thread
        state = params.get("state") if isinstance(params, dict) else None
        if isinstance(state, str):
            states.setdefault(state, time.monotonic() - spawned)

    server.handlers["memosight/status"] = on_status
    deadline = spawned + timeout_s
    run: dict[str, Any] = {"initializeS": None, "readyS": None, "firstSuggestionS": None}
    try:
        await server.initialize(
            options, folders, capabilities={"window": {"workDoneProgress": False}}
        )
        run["initializeS"] = time.monotonic() - spawned
        language = "python" if cursor.path.suffix == ".py" else "plaintext"
        document = {"uri": cursor.path.as_uri(), "languageId": language, "version": 1}
        server.notify("textDocument/didOpen", {"textDocument": {**document, "text": cursor.text}})
        text, requests = await ask_until_text(server, cursor, deadline)
        if text is not None:
            run["firstSuggestionS"] = time.monotonic() - spawned
            if typing_s > 0:
                run["typing"] = await keep_typing(server, cursor, typing_s, spawned)
        ready_by = time.monotonic() + READY_GRACE_S
        while text is not None and "ready" not in states and time.monotonic() < ready_by:
            await asyncio.sleep(0.02)
        run.update(text=text, requests=requests)
    except ConnectionError as err:  # the server died: its log says why
        run["failure"] = str(err)
    finally:
        run["exitCode"] = await server.shutdown()
    run["readyS"] = states.get("ready")
    if "error" in states:
        run["failure"] = next(
            (s.get("message") for s in server.statuses if s.get("state") == "error"), "error"
        )
    for key in MILESTONES:
        run[key] = None if run[key] is None else round(run[key], 3)
    run["loadedInS"] = loaded_in(server.log)
    run["timings"] = model_timings(server.log)
    run["hostPid"] = host_pid(server.log)
    run["model"] = next((s["model"] for s in server.statuses if s.get("model")), None)
    run["log"] = log_offsets(server.log, spawned_wall)
    return run


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    options = server_options(args)
    cursor = cursor_from_args(args)
    env = server_environment(args.bytecode)
    env[KEEP_ALIVE_ENV] = "0" if args.host == "off" else str(args.keep_alive)
    workspace = (Path(args.workspace).resolve(),) if args.workspace else ()
    folders: list[str] = []
    hosts: set[int] = set()

    def own_folder() -> None:  # where the runs' relays look for hosts
        folders.append(tempfile.mkdtemp(prefix="memosight-hosts-"))
        env[RUNTIME_DIR_ENV] = folders[-1]

    runs: list[dict[str, Any]] = []
    warm_up: dict[str, Any] | None = None
    try:
        if args.host == "kept":
            own_folder()
            warm_up = await one_run(options, cursor, args.timeout, env, workspace)
            if warm_up["hostPid"]:
                hosts.add(warm_up["hostPid"])
        for n in range(1, args.runs + 1):
            if args.host == "cold":
                own_folder()
            run = await one_run(
                options, cursor, args.timeout, env, workspace, args.typing, args.debug
            )
            runs.append(run)
            if args.host == "cold":
                stop_host(run["hostPid"])
            elif run["hostPid"]:
                hosts.add(run["hostPid"])
            shown = ", ".join(f"{k} {run[k]}" for k in (*MILESTONES, "loadedInS"))
            if "typing" in run:
                shown += f", typing {run['typing']}"
            sys.stderr.write(
                f"startup: run {n}/{args.runs}: {shown}, host {run['hostPid']}, "
                f"timings {run['timings']}, text {run.get('text')!r}\n"
            )
    finally:
        for pid in hosts:
            stop_host(pid)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    return {
        "settings": options,
        "file": str(cursor.path),
        "workspace": str(workspace[0]) if workspace else None,
        "position": {"line": cursor.line, "character": cursor.character},
        "timeoutS": args.timeout,
        "bytecode": args.bytecode,
        "host": args.host,
        "warmUp": warm_up,
        "runs": runs,
        "median": {k: median([r[k] for r in runs]) for k in (*MILESTONES, "loadedInS")},
    }


def table(result: dict[str, Any]) -> str:
    """Markdown: one row per run and the median, seconds from the spawn."""
    head = ["run", "`initialize` answered", 'load ("loaded in")', "ready", "first suggestion"]
    rows = ["| " + " | ".join([*head, "text"]) + " |", "|---|---|---|---|---|---|"]

    def cell(value: Any) -> str:
        return "" if value is None else f"{value:.2f}"

    keys = ("initializeS", "loadedInS", "readyS", "firstSuggestionS")
    for n, run in enumerate(result["runs"], 1):
        text = run.get("text")
        shown = f"`{text[:30]!r}`" if text else run.get("failure") or "none in time"
        rows.append(f"| {n} | " + " | ".join(cell(run[k]) for k in keys) + f" | {shown} |")
    med = result["median"]
    rows.append("| median | " + " | ".join(cell(med[k]) for k in keys) + " | |")
    return "\n".join(rows)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memosight bench startup",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_options(parser)
    parser.add_argument("--runs", type=int, default=3, help="fresh servers, one after another")
    parser.add_argument(
        "--first-response-ms",
        type=int,
        default=CompletionSettings().first_response_ms,
        help="completion.firstResponseMs (default: the server's)",
    )
    parser.add_argument("--settings", help="more server settings, as a JSON object")
    parser.add_argument("--file", help="the file opened (default: textwrap.py cut after self.)")
    parser.add_argument("--line", type=int, default=0, help="the cursor's line in --file")
    parser.add_argument("--character", type=int, default=0, help="its UTF-16 column")
    parser.add_argument(
        "--workspace",
        help="a folder the editor opens (indexed by the server as a person's project is; "
        "default: none)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per run to the first suggestion"
    )
    parser.add_argument(
        "--bytecode",
        choices=("kept", "environment"),
        default="kept",
        help="kept: the package's compiled modules kept between starts, as installed "
        "(default); environment: as this environment has it",
    )
    parser.add_argument(
        "--host",
        choices=HOST_MODES,
        default="cold",
        help="cold: no model host alive, each run's server starts one (default); kept: a host "
        "left by a first server serves the runs; off: no host (MEMOSIGHT_KEEP_ALIVE=0)",
    )
    parser.add_argument(
        "--keep-alive", type=float, default=60.0, help="the hosts' keep-alive, seconds"
    )
    parser.add_argument(
        "--typing",
        type=float,
        default=0.0,
        help="after the first suggestion, type on at the cursor for this many seconds (what "
        "follows it in the file), a completion asked after each keystroke; reports their latency",
    )
    parser.add_argument(
        "--debug", action="store_true", help="the servers log at the debug level (-vv)"
    )
    parser.add_argument("--json", action="store_true", help="JSON with every run and its log")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.runs < 1:
        sys.stderr.write("startup: --runs must be at least 1\n")
        return 2
    result = asyncio.run(measure(args))
    out = json.dumps(result, indent=2) if args.json else table(result)
    sys.stdout.write(out + "\n")
    answered = all(r["firstSuggestionS"] is not None for r in result["runs"])
    return 0 if answered else 1


if __name__ == "__main__":
    sys.exit(main())
