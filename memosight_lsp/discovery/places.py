"""Where people keep local models, and a bounded walk of each place.

The places come from the environment only (HOME, XDG_CACHE_HOME and the tools' own variables),
so a caller (a test) can point them anywhere:

  ollama     $OLLAMA_MODELS or ~/.ollama/models: manifests/<host>/<namespace>/<model>/<tag>
             (JSON) name the layer of media type application/vnd.ollama.image.model, a GGUF
             file kept as blobs/sha256-<hex>
  lmstudio   ~/.lmstudio/models and ~/.cache/lm-studio/models: <publisher>/<repo>/<file>.gguf
  llama.cpp  $LLAMA_CACHE or $XDG_CACHE_HOME/llama.cpp (~/.cache/llama.cpp): downloaded .gguf
  hf-cache   $HF_HUB_CACHE, $HF_HOME/hub or $XDG_CACHE_HOME/huggingface/hub:
             models--<org>--<name>/snapshots/<revision>/ (a model folder, or .gguf files)
  env        $MEMOSIGHT_MODELS: paths (os.pathsep between them) of .gguf files, model folders,
             Ollama model stores or folders holding any of these

Every walk shares one Budget of directory entries and stops at fixed depths, so a place with
tens of thousands of files costs a bounded, small time; what was cut short is said in a note.
Hidden folders and symlinked folders are not entered (no loops). Nothing here opens a model:
judge.py reads what was found.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .gguf_header import is_gguf_file
from .hf_folder import is_model_folder

MAX_ENTRIES = 20_000  # directory entries looked at in one discovery, all places together
MAX_FOUND = 200  # models found in one discovery
MAX_MANIFEST_BYTES = 1 << 20
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_REGISTRY = "registry.ollama.ai"
# A split GGUF model's parts (llama.cpp's gguf-split): only the first part names the model.
SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
DEPTH = {"lmstudio": 4, "llama.cpp": 3, "env": 4}


@dataclass(frozen=True, kw_only=True)
class Found:
    path: Path  # a GGUF file or a model folder
    source: str  # ollama, lmstudio, llama.cpp, hf-cache, env
    name: str  # as its tool names it (an Ollama tag, a repository, a file name)
    format: str  # gguf or hf


@dataclass
class Budget:
    entries: int = MAX_ENTRIES
    found: int = MAX_FOUND
    notes: list[str] = field(default_factory=list)

    def spend(self, where: Path) -> bool:
        """One directory entry looked at; False (and a note, once) when none are left."""
        if self.entries <= 0:
            note = f"stopped after the walk's bound of files: the rest of {where} was not looked at"
            if note not in self.notes:
                self.notes.append(note)
            return False
        self.entries -= 1
        return True


def home(env: Mapping[str, str]) -> Path | None:
    value = env.get("HOME") or env.get("USERPROFILE")
    return Path(value) if value else None


def cache_home(env: Mapping[str, str]) -> Path | None:
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"])
    base = home(env)
    return base / ".cache" if base else None


def places(env: Mapping[str, str]) -> list[tuple[str, Path]]:
    """(source, root) of every place to look, in the order they are looked at."""
    base, cache = home(env), cache_home(env)
    out: list[tuple[str, Path]] = []
    for entry in (env.get("MEMOSIGHT_MODELS") or "").split(os.pathsep):
        if entry.strip():
            out.append(("env", Path(entry.strip()).expanduser()))
    if env.get("OLLAMA_MODELS"):
        out.append(("ollama", Path(env["OLLAMA_MODELS"])))
    elif base:
        out.append(("ollama", base / ".ollama" / "models"))
    if base:
        out.append(("lmstudio", base / ".lmstudio" / "models"))
        out.append(("lmstudio", base / ".cache" / "lm-studio" / "models"))
    if env.get("LLAMA_CACHE"):
        out.append(("llama.cpp", Path(env["LLAMA_CACHE"])))
    elif cache:
        out.append(("llama.cpp", cache / "llama.cpp"))
        if sys.platform == "darwin" and base:
            out.append(("llama.cpp", base / "Library" / "Caches" / "llama.cpp"))
    if env.get("HF_HUB_CACHE"):
        out.append(("hf-cache", Path(env["HF_HUB_CACHE"])))
    elif env.get("HF_HOME"):
        out.append(("hf-cache", Path(env["HF_HOME"]) / "hub"))
    elif cache:
        out.append(("hf-cache", cache / "huggingface" / "hub"))
    return out


def find_models(env: Mapping[str, str], budget: Budget) -> list[Found]:
    """Every model file or folder in the places, each once (by its real path)."""
    found: list[Found] = []
    seen: set[str] = set()
    for source, root in places(env):
        if not _exists(root):
            continue
        if source == "ollama" or (source == "env" and _is_ollama_store(root)):
            items = _ollama(root, source, budget)
        elif source == "hf-cache":
            items = _hf_cache(root, budget)
        else:
            items = _walk(root, source, DEPTH[source], budget)
        for item in items:
            key = _real(item.path)
            if key in seen:
                continue
            if budget.found <= 0:
                budget.notes.append(f"stopped after {MAX_FOUND} models")
                return found
            seen.add(key)
            budget.found -= 1
            found.append(item)
    return found


# -- Ollama ----------------------------------------------------------------------------------


def _is_ollama_store(root: Path) -> bool:
    return (root / "manifests").is_dir() and (root / "blobs").is_dir()


def _ollama(root: Path, source: str, budget: Budget) -> Iterator[Found]:
    """The model layer of each manifest (manifests/<host>/<namespace>/<model>/<tag>)."""
    manifests = root / "manifests"
    for manifest in _files_at_depth(manifests, 4, budget):
        host, namespace, model, tag = manifest.relative_to(manifests).parts
        name = f"{model}:{tag}"  # as `ollama list` shows it
        if host != OLLAMA_REGISTRY:
            name = f"{host}/{namespace}/{name}"
        elif namespace != "library":
            name = f"{namespace}/{name}"
        blob = _model_blob(manifest, root, budget, name)
        if blob is not None:
            yield Found(path=blob, source=source, name=name, format="gguf")


def _model_blob(manifest: Path, root: Path, budget: Budget, name: str) -> Path | None:
    try:
        if manifest.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError("too large")
        data = json.loads(manifest.read_bytes())
        layers = data["layers"]
        digest = next(
            layer["digest"]
            for layer in layers
            if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER
        )
        algorithm, value = str(digest).split(":", 1)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        budget.notes.append(f"ollama {name}: unreadable manifest {manifest}")
        return None
    if not re.fullmatch(r"[a-z0-9]+", algorithm) or not re.fullmatch(r"[0-9a-f]{16,128}", value):
        budget.notes.append(f"ollama {name}: the manifest names no model blob ({digest!r})")
        return None
    blob = root / "blobs" / f"{algorithm}-{value}"
    if not blob.is_file():
        budget.notes.append(f"ollama {name}: its model blob {blob.name} is missing")
        return None
    return blob


# -- Hugging Face cache ----------------------------------------------------------------------


def _hf_cache(root: Path, budget: Budget) -> Iterator[Found]:
    """models--<org>--<name>/snapshots/<revision>: the folder, or the .gguf files in it."""
    for repo in _entries(root, budget):
        if not repo.name.startswith("models--") or not _is_dir(repo):
            continue
        name = repo.name.removeprefix("models--").replace("--", "/")
        for snapshot in _entries(repo / "snapshots", budget):
            if not _is_dir(snapshot):
                continue
            if is_model_folder(snapshot):
                yield Found(path=snapshot, source="hf-cache", name=name, format="hf")
                continue
            for item in _walk(snapshot, "hf-cache", 2, budget):
                yield Found(
                    path=item.path,
                    source="hf-cache",
                    name=f"{name}/{item.name}",
                    format=item.format,
                )


# -- folders of files ------------------------------------------------------------------------


def _walk(root: Path, source: str, depth: int, budget: Budget) -> Iterator[Found]:
    """GGUF files and model folders under root, breadth first, at most `depth` levels down."""
    if not root.is_dir():  # a root may be a symlink to a folder; the folders below may not
        if _is_gguf_path(root):
            yield Found(path=root, source=source, name=root.name, format="gguf")
        return
    if is_model_folder(root):
        yield Found(path=root, source=source, name=root.name, format="hf")
        return
    level = [root]
    for _ in range(depth):
        below: list[Path] = []
        for folder in level:
            for entry in _entries(folder, budget):
                if entry.name.startswith("."):
                    continue
                if _is_dir(entry):
                    if is_model_folder(entry):
                        yield Found(path=entry, source=source, name=entry.name, format="hf")
                    else:
                        below.append(entry)
                elif _is_gguf_path(entry):
                    yield Found(path=entry, source=source, name=entry.name, format="gguf")
        level = below


def _is_gguf_path(path: Path) -> bool:
    """A .gguf file that starts a model (the first part of a split one counts), or a file
    without that suffix that starts with the GGUF magic."""
    split = SPLIT_PART.search(path.name)
    if split:
        return split.group(1) == "00001"
    if path.suffix.lower() == ".gguf":
        return True
    return not path.suffix and is_gguf_file(path)


def _files_at_depth(root: Path, depth: int, budget: Budget) -> Iterator[Path]:
    level = [root]
    for _ in range(depth - 1):
        level = [e for f in level for e in _entries(f, budget) if _is_dir(e)]
    for folder in level:
        for entry in _entries(folder, budget):
            if not _is_dir(entry):
                yield entry


def _entries(folder: Path, budget: Budget) -> Iterator[Path]:
    """The folder's entries, sorted, each one spent from the budget."""
    try:
        with os.scandir(folder) as scan:
            names = []
            for entry in scan:
                if not budget.spend(folder):
                    break
                names.append(entry.name)
    except OSError:
        return
    for name in sorted(names):
        yield folder / name


def _is_dir(path: Path) -> bool:
    """A real folder (a symlink to one is not entered)."""
    try:
        return path.is_dir() and not path.is_symlink()
    except OSError:
        return False


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:
        return False


def _real(path: Path) -> str:
    try:
        return os.path.realpath(path)
    except OSError:
        return str(path)
