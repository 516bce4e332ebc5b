"""Imports point down: in context/ and workspace/ no cycle between their modules (counting imports
inside functions and under TYPE_CHECKING, where a cycle can hide), no torch, no LSP library, and
nothing from the layers above; the completion's layers, from the bottom (inference/ the model,
engines/ the serving engines' clients, pipeline/ the synchronous request path, next_edit/,
session/ time and documents, server/ the protocol) import nothing from a layer above them, and
only session/ and server/ import the LSP libraries."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1]
LAYERS = ("memosight_lsp/context", "memosight_lsp/workspace")
FORBIDDEN = ("torch", "transformers", "pygls", "lsprotocol", "memosight_lsp.server")
ABOVE = (
    "memosight_lsp.inference",
    "memosight_lsp.engines",
    "memosight_lsp.pipeline",
    "memosight_lsp.next_edit",
    "memosight_lsp.session",
    "memosight_lsp.commands",
)
# The completion's layers, lowest first.
COMPLETION_LAYERS = (
    "inference",
    "engines",
    "pipeline",
    "next_edit",
    "session",
    "server",
    "host_process",
)
LSP_LIBRARIES = ("pygls", "lsprotocol")


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, root: Path) -> set[str]:
    """Every module a file imports, anywhere in it; `from . import x` names the submodule x."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = node.module or ""
            if node.level:
                target = f"{base}.{target}" if target else base
            out.add(target)
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if (root / sub.replace(".", "/")).with_suffix(".py").exists():
                    out.add(sub)
    return out


def import_graph(root: Path, folders: tuple[str, ...]) -> dict[str, set[str]]:
    files = [f for folder in folders for f in sorted((root / folder).glob("*.py"))]
    return {module_name(f, root): imports_of(f, root) for f in files}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()

    def visit(module: str, trail: list[str]) -> list[str] | None:
        if module in trail:
            return [*trail[trail.index(module) :], module]
        if module in done or module not in edges:
            return None
        for target in sorted(edges[module]):
            # A submodule's import of its own package (its __init__) is no edge back.
            if not module.startswith(target + "."):
                cycle = visit(target, [*trail, module])
                if cycle:
                    return cycle
        done.add(module)
        return None

    for module in sorted(edges):
        cycle = visit(module, [])
        if cycle:
            return cycle
    return None


def test_no_import_cycle_in_context_and_workspace() -> None:
    assert find_cycle(import_graph(SOURCE, LAYERS)) is None


def test_context_and_workspace_import_nothing_from_above() -> None:
    for module, targets in import_graph(SOURCE, LAYERS).items():
        bad = sorted(t for t in targets if t.startswith(FORBIDDEN + ABOVE))
        assert not bad, f"{module} imports {bad}"
        if module.startswith("memosight_lsp.workspace"):
            assert not any(t.startswith("memosight_lsp.context") for t in targets), module


def test_a_cycle_behind_a_local_import_is_found(tmp_path: Path) -> None:
    # The shape index.py and watcher.py had: a TYPE_CHECKING import one way, a method-local
    # import the other.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "index.py").write_text("def start():\n    from .watcher import Watcher\n")
    (pkg / "watcher.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .index import Index\n"
    )
    assert find_cycle(import_graph(tmp_path, ("pkg",))) == ["pkg.index", "pkg.watcher", "pkg.index"]


def test_completion_layers_import_nothing_from_above() -> None:
    for i, layer in enumerate(COMPLETION_LAYERS):
        above = tuple(f"memosight_lsp.{name}" for name in COMPLETION_LAYERS[i + 1 :])
        speaks_lsp = layer in ("session", "server")
        for module, targets in import_graph(SOURCE, (f"memosight_lsp/{layer}",)).items():
            bad = sorted(
                t
                for t in targets
                if t.startswith(above) or (not speaks_lsp and t.startswith(LSP_LIBRARIES))
            )
            assert not bad, f"{module} imports {bad}"


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "memosight_lsp" / "pipeline"
    pkg.mkdir(parents=True)
    (pkg / "x.py").write_text("from memosight_lsp.session.scheduler import Scheduler\n")
    (pkg / "y.py").write_text("def f():\n    from lsprotocol import types\n")
    graph = import_graph(tmp_path, ("memosight_lsp/pipeline",))
    assert "memosight_lsp.session.scheduler" in graph["memosight_lsp.pipeline.x"]
    assert "lsprotocol" in graph["memosight_lsp.pipeline.y"]
