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
    for repo, is_dir in _entries(root, budget):
        if not is_dir or not repo.startswith("models--"):
            continue
        name = repo.removeprefix("models--").replace("--", "/")
        snapshots = root / repo / "snapshots"
        for revision, is_dir in _entries(snapshots, budget):
            snapshot = snapshots / revision
            if not is_dir:
                continue
            if is_model_folder(snapshot):
                yield Found(path=snapshot, source="hf-cache", name=name, format="hf")
                continue
            for item in _walk(snapshot, "hf-cache", 2, budget):
                label = f"{name}/{item.name}"
                yield Found(path=item.path, source="hf-cache", name=label, format=item.format)


# -- folders of files ------------------------------------------------------------------------


def _walk(root: Path, source: str, depth: int, budget: Budget) -> Iterator[Found]:
    """GGUF files and model folders under root, breadth first, at most `depth` levels down.
    The tools' own folders name their GGUF files .gguf (Ollama's blobs are found through its
    manifests), so only $MEMOSIGHT_MODELS is sniffed for files without a suffix: opening every
    file costs far more than listing it."""
    if not root.is_dir():  # a root may be a symlink to a folder; the folders below may not
        if _gguf_name(root.name) or is_gguf_file(root):  # a file named on purpose
            yield Found(path=root, source=source, name=root.name, format="gguf")
        return
    if is_model_folder(root):
        yield Found(path=root, source=source, name=root.name, format="hf")
        return
    sniff = source == "env"
    level = [root]
    for _ in range(depth):
        below: list[Path] = []
        for folder in level:
            for name, is_dir in _entries(folder, budget):
                if name.startswith("."):
                    continue
                path = folder / name if is_dir or _gguf_name(name) or sniff else None
                if path is None:
                    continue
                if is_dir:
                    if is_model_folder(path):
                        yield Found(path=path, source=source, name=name, format="hf")
                    else:
                        below.append(path)
                elif _gguf_name(name) or ("." not in name and is_gguf_file(path)):
                    yield Found(path=path, source=source, name=name, format="gguf")
        level = below


def _gguf_name(name: str) -> bool:
    """A .gguf file that starts a model (of a split one, the first part)."""
    split = SPLIT_PART.search(name)
    if split:
        return split.group(1) == "00001"
    return name.lower().endswith(".gguf")


def _files_at_depth(root: Path, depth: int, budget: Budget) -> Iterator[Path]:
    level = [root]
    for _ in range(depth - 1):
        level = [f / name for f in level for name, is_dir in _entries(f, budget) if is_dir]
    for folder in level:
        for name, is_dir in _entries(folder, budget):
            if not is_dir:
                yield folder / name


def _entries(folder: Path, budget: Budget) -> Iterator[tuple[str, bool]]:
    """(name, is a real folder) of the folder's entries, sorted, each spent from the budget.
    A symlink to a folder is not a folder here (no loops); the answers come from the listing
    itself, with no stat per entry."""
    items: list[tuple[str, bool]] = []
    try:
        with os.scandir(folder) as scan:
            for entry in scan:
                if not budget.spend(folder):
                    break
                try:
                    items.append((entry.name, entry.is_dir(follow_symlinks=False)))
                except OSError:
                    items.append((entry.name, False))
    except OSError:
        return
    yield from sorted(items)


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
