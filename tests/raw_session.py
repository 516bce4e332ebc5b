"""The real server over stdio through bench/stdio.py's raw client: synchronous helpers for the
reliability tests, with the server's log lines kept (`session.server.log`)."""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memosight_lsp.bench.stdio import SERVER_COMMAND, StdioServer, python_env

TESTS = Path(__file__).resolve().parent
FAULT_SERVER = (sys.executable, str(TESTS / "fault_server.py"))


class Session:
    def __init__(
        self,
        folders: Sequence[Path] = (),
        init_options: dict | None = None,
        *,
        command: Sequence[str] = SERVER_COMMAND,
        env: dict[str, str] | None = None,
        configuration: dict | None = None,
        process_id: int | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.server = StdioServer(command, env=python_env(env), cwd=cwd, stderr="collect")
        self.ids = itertools.count(1)
        if configuration is not None:  # the answer to workspace/configuration
            section = configuration

            def answer(request: dict) -> dict:
                items = (request.get("params") or {}).get("items") or []
                result: Any = [section for _ in items]
                if request.get("method") != "workspace/configuration":
                    result = None
                return {"jsonrpc": "2.0", "id": request["id"], "result": result}

            self.server.answer_server_request = answer
        workspace: dict[str, Any] = {"configuration": configuration is not None}
        init = {
            "processId": process_id,
            "rootUri": folders[0].as_uri() if folders else None,
            "capabilities": {"workspace": workspace, "window": {"workDoneProgress": False}},
            "initializationOptions": init_options,
            "workspaceFolders": [{"uri": f.as_uri(), "name": f.name} for f in folders] or None,
        }
        self.init_result = self.request("initialize", init, timeout=120)
        self.server.notify("initialized", {})

    def request(self, method: str, params: Any = None, timeout: float = 60) -> Any:
        """The result; raises AssertionError on an error response or no answer in time."""
        msg_id = next(self.ids)
        answer = self.server.request(msg_id, method, params, timeout)
        assert answer is not None, f"{method} unanswered within {timeout}s"
        assert "error" not in answer, f"{method} failed: {answer['error']}"
        return answer.get("result")

    def open(self, path_or_uri: Path | str, text: str, language: str = "python") -> str:
        uri = path_or_uri.as_uri() if isinstance(path_or_uri, Path) else path_or_uri
        document = {"uri": uri, "languageId": language, "version": 1, "text": text}
        self.server.notify("textDocument/didOpen", {"textDocument": document})
        return uri

    def close(self, uri: str) -> None:
        self.server.notify("textDocument/didClose", {"textDocument": {"uri": uri}})

    def configure(self, settings: dict) -> None:
        self.server.notify("workspace/didChangeConfiguration", {"settings": settings})

    def inline(self, uri: str, line: int, character: int, timeout: float = 60) -> str | None:
        params = {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": character},
            "context": {"triggerKind": 1},
        }
        result = self.request("textDocument/inlineCompletion", params, timeout)
        items = (result or {}).get("items") or []
        return items[0]["insertText"] if items else None

    def context(self, uri: str, line: int, character: int, timeout: float = 60) -> dict:
        params = {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}
        return self.request("memosight/context", params, timeout)

    def stats(self, timeout: float = 10) -> dict:
        return self.request("memosight/stats", {}, timeout)

    def wait_state(self, *states: str, after: int = 0, timeout: float = 120) -> dict:
        """The first memosight/status in one of these states, of those after the first `after`
        (waiting for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for status in list(self.server.statuses)[after:]:
                if status.get("state") in states:
                    return status
            time.sleep(0.05)
        raise AssertionError(f"no status in {states}; saw {self.server.statuses[-3:]}")

    def wait_until(self, predicate, timeout: float = 60, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                indexes = self.index_files() if self.server.alive() else "server gone"
                raise AssertionError(f"{what} not met within {timeout}s (indexes: {indexes})")
            time.sleep(0.1)

    def index_files(self) -> dict[str, int]:
        return {entry["root"]: entry["files"] for entry in self.stats()["indexes"]}

    def stop(self) -> int | None:
        try:
            return self.server.stop()
        finally:
            self.server.kill()


def tiny_options(model_dir: Path, **completion: Any) -> dict:
    return {"model": {"path": str(model_dir)}, "completion": {"maxNewTokens": 8, **completion}}


def no_caches() -> dict:
    """Completion settings under which every request runs the model."""
    return {"typeThrough": False, "precomputeNext": False}
