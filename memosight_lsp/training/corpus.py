"""Collect source files for training and split them into train / validation deterministically."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Only these registry packages may be added to the training corpus. Everything else that is
# installed or fetched from a registry is evaluation data and must never be trained on.
ALLOWED_REGISTRY_SOURCES = (
    "django",
    "sympy",
    "networkx",
    "scikit-learn",
    "pandas",
    "numpy",
    "scipy",
    "matplotlib",
    "sqlalchemy",
    "twisted",
    "tornado",
)

# Folders of the stdlib that are not library code (huge test data, IDLE's GUI) and stay out.
STDLIB_EXCLUDED_TOP = {"test", "idlelib", "site-packages", "dist-packages", "__pycache__"}
SKIPPED_DIR_NAMES = {"__pycache__", ".git", "node_modules", ".venv", "venv", "build", "dist"}
MAX_FILE_BYTES = 512 * 1024


@dataclass(frozen=True, kw_only=True)
class SourceFile:
    path: Path
    relpath: str  # shown to the model as the file's path marker
    text: str


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def is_validation(relpath: str, val_fraction: float) -> bool:
    """A file is held out by a hash of its path, so the split never depends on file order."""
    digest = hashlib.sha1(relpath.encode("utf-8")).digest()
    return digest[0] / 256.0 < val_fraction


def iter_python_files(root: Path, *, exclude_top: Iterable[str] = ()) -> Iterator[Path]:
    excluded = set(exclude_top)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts and rel.parts[0] in excluded:
            continue
        if any(part in SKIPPED_DIR_NAMES for part in rel.parts[:-1]):
            continue
        yield path


def read_source(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def collect_corpus(roots: Iterable[Path]) -> list[SourceFile]:
    """All readable Python files under the given roots; the stdlib root skips its tests and IDLE."""
    files: list[SourceFile] = []
    stdlib = stdlib_dir().resolve()
    for root in roots:
        root = root.resolve()
        exclude = STDLIB_EXCLUDED_TOP if root == stdlib else set()
        for path in iter_python_files(root, exclude_top=exclude):
            text = read_source(path)
            if text and text.strip():
                relpath = f"{root.name}/{path.relative_to(root).as_posix()}"
                files.append(SourceFile(path=path, relpath=relpath, text=text))
    return files


def fetch_registry_sources(names: Iterable[str], dest: Path) -> list[Path]:
    """Download and unpack source distributions of allowed registry packages into dest."""
    dest.mkdir(parents=True, exist_ok=True)
    unpacked: list[Path] = []
    for name in names:
        if name not in ALLOWED_REGISTRY_SOURCES:
            raise ValueError(f"{name} is evaluation data, not an allowed training source")
        target = dest / name
        if target.exists():
            unpacked.append(target)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "-q",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    "-d",
                    tmp,
                    name,
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            archive = next(Path(tmp).glob("*.tar.gz"))
            with tarfile.open(archive) as tar:
                tar.extractall(target, filter="data")
        unpacked.append(target)
    return unpacked
