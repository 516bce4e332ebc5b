"""Context recall: does the packed context hold the definition the next line is about to call?

Cases come from real multi-file Python projects (unpacked wheels of PyPI packages that are not in
the training corpus): every line that calls a module-level function or class defined in another
file of the same project (found with Python's own `ast`, not with the index under test). The line
is removed and the cursor put at its indentation; a case counts as recalled when the prompt holds
that definition's header (`def name(` / `class name`) under the defining file's path marker.

Three contexts are compared at each budget: the ranked context, the current file alone, and
Copilot-style neighbour windows (the most Jaccard-similar 20-line windows of the other files in
the same folder, as if they were open tabs). With `--rerank-model` a fourth: the ranked context
with that model as second-stage ranker (inference/chunk_scoring.py) wherever the candidates
overflow the room, at the budgets given by `--rerank-budgets`.

    python -m memosight_lsp.bench.context_recall /work/evaldata/projects/* --tokenizer T.json
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import random
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from memosight_lsp.context import Rerank, build_context
from memosight_lsp.context.lexical import best_windows, identifiers
from memosight_lsp.context.render import join_lines, split_lines
from memosight_lsp.context.tokens import TokenCounter
from memosight_lsp.workspace import WorkspaceIndex

BUDGETS = (256, 512, 1024, 2048)
_MARKER = re.compile(r"^# file: (.+)$", re.M)


@dataclass(frozen=True)
class Case:
    rel: str
    line: int
    name: str
    targets: tuple[str, ...]  # files defining `name`


def load_counter(tokenizer: str | None) -> tuple[TokenCounter, str]:
    """count_tokens from a tokenizer.json or model folder; else the embedded model; else chars/4.
    A TokenCounter: its memo of counted lines lasts from one packing to the next."""
    count, name = _count_function(tokenizer)
    return TokenCounter(count), name


def _count_function(tokenizer: str | None) -> tuple[Callable[[str], int], str]:
    if tokenizer:
        from tokenizers import Tokenizer

        path = Path(tokenizer)
        tok = Tokenizer.from_file(str(path / "tokenizer.json" if path.is_dir() else path))
        return (lambda text: len(tok.encode(text, add_special_tokens=False).ids)), str(path)
    try:
        from memosight_lsp.inference.loading import load_tokenizer

        hf = load_tokenizer(None)
        return (lambda text: len(hf.encode(text, add_special_tokens=False))), "embedded model"
    except Exception:  # no embedded model yet: a rough but monotone estimate
        return (lambda text: (len(text) + 3) // 4), "chars/4"


def find_cases(root: Path) -> list[Case]:
    files = sorted(p for p in root.rglob("*.py") if p.is_file())
    trees: dict[str, ast.Module] = {}
    defined: dict[str, set[str]] = defaultdict(set)
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        trees[rel] = tree
        for top in tree.body:
            is_def = isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if is_def and not top.name.startswith("__"):  # type: ignore[attr-defined]
                defined[top.name].add(rel)  # type: ignore[attr-defined]
    cases: dict[tuple[str, int], Case] = {}
    for rel, tree in trees.items():
        own = {
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        }
        # `mod.f(...)` counts only when `mod` is an imported name (not `some_dict.get`).
        imported = {
            (alias.asname or alias.name).split(".")[0]
            for n in ast.walk(tree)
            if isinstance(n, ast.Import | ast.ImportFrom)
            for alias in n.names
        }
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            if isinstance(func, ast.Name):
                name = func.id
            elif (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in imported
            ):
                name = func.attr
            else:
                continue
            targets = tuple(sorted(defined.get(name, set()) - {rel}))
            if not targets or name in own:
                continue
            key = (rel, call.lineno - 1)
            if key not in cases:
                cases[key] = Case(rel, call.lineno - 1, name, targets)
    return sorted(cases.values(), key=lambda c: (c.rel, c.line))


def recalled(prefix: str, case: Case) -> bool:
    header = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(case.name)}\b", re.M)
    marks = list(_MARKER.finditer(prefix))
    for i, mark in enumerate(marks):
        if mark.group(1) not in case.targets:
            continue
        end = marks[i + 1].start() if i + 1 < len(marks) else len(prefix)
        if header.search(prefix, mark.end(), end):
            return True
    return False


def named(text: str, case: Case) -> bool:
    """The name being called appears anywhere in `text` (as a whole word): even without the
    definition, the model sees that it exists and how it is spelled."""
    return re.search(rf"\b{re.escape(case.name)}\b", text) is not None


def cut_line(text: str, line: int) -> tuple[str, int]:
    """The file without the case's line, keeping its indentation where the cursor goes."""
    lines = text.split("\n")
    target = lines[line]
    indent = target[: len(target) - len(target.lstrip())]
    lines[line] = indent
    return "\n".join(lines), len(indent)


_file_texts: dict[Path, str] = {}


def neighbour_scores(root: Path, case: Case, text: str) -> list[tuple[float, str, str]]:
    """The best Jaccard window of each same-folder file (as neighbouring tabs), best first."""
    lines = text.split("\n")
    folder = (root / case.rel).parent
    query = set(identifiers("\n".join(lines[max(0, case.line - 20) : case.line])))
    scored = []
    for path in sorted(folder.glob("*.py"))[:21]:
        rel = path.relative_to(root).as_posix()
        if rel == case.rel:
            continue
        if path not in _file_texts:
            _file_texts[path] = path.read_text(encoding="utf-8", errors="replace")
        other = _file_texts[path]
        for score, window in best_windows(query, other, top=1):
            chunk = join_lines(split_lines(other)[window.start : window.end + 1])
            scored.append((score, rel, chunk))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return scored


def neighbour_windows(
    root: Path,
    case: Case,
    text: str,
    column: int,
    budget: int,
    count: Callable[[str], int],
    scored: list[tuple[float, str, str]],
) -> str:
    """Copilot-style baseline: best Jaccard windows of same-folder files, then the file itself."""
    room = budget - budget // 8 - (budget * 3) // 8
    parts = []
    for _score, rel, chunk in scored:
        piece = f"# file: {rel}\n{chunk}"
        cost = count(piece)
        if cost <= room:
            parts.append(piece)
            room -= cost
    own = build_context(
        text=text,
        path=str(root / case.rel),
        line=case.line,
        column=column,
        language_id="python",
        budget_tokens=budget - (budget - budget // 8 - (budget * 3) // 8 - room),
        count_tokens=count,
    )
    return "".join(parts) + own.prefix


def load_rerank(model: str) -> Rerank:
    """The chunk scorer of a model folder ("default": the embedded model) as a Rerank."""
    from memosight_lsp.inference.chunk_scoring import model_text_scorer
    from memosight_lsp.inference.loading import load_model

    folder = None if model == "default" else model
    return Rerank(score=model_text_scorer(load_model(folder, allow_pickle=True)))


def methods(rerank: object) -> list[str]:
    """The contexts compared, the model-scored one only with a second-stage ranker; then, not a
    context of its own, how often the ranked context names the callee at all (`named`)."""
    contexts = ["ranked", "currentFile", "neighbourWindows"] + (["modelScored"] if rerank else [])
    return [*contexts, "rankedNamesIt"]


def run_project(
    root: Path,
    cases: Sequence[Case],
    count: Callable[[str], int],
    budgets: Sequence[int],
    cache_dir: Path,
    rerank: tuple[Rerank, Sequence[int]] | None = None,
) -> tuple[dict[str, dict[int, int]], list[float], list[float]]:
    """Hits per method and budget, build times at 1,024 tokens, model-scored build times."""
    index = WorkspaceIndex(root, cache_dir=cache_dir)
    index.scan()
    hits: dict[str, dict[int, int]] = {m: dict.fromkeys(budgets, 0) for m in methods(rerank)}
    timings: list[float] = []
    rerank_ms: list[float] = []
    texts: dict[str, str] = {}
    for case in cases:
        original = texts.setdefault(
            case.rel, (root / case.rel).read_text(encoding="utf-8", errors="replace")
        )
        text, column = cut_line(original, case.line)
        path = str(root / case.rel)
        index.update_buffer(path, text, language_id="python")  # as the server does on didChange
        scored = neighbour_scores(root, case, text)
        pack = functools.partial(
            build_context,
            text=text,
            path=path,
            line=case.line,
            column=column,
            language_id="python",
            count_tokens=count,
        )
        for budget in budgets:
            started = time.perf_counter()
            packed = pack(budget_tokens=budget, index=index)
            if budget == 1024:
                timings.append((time.perf_counter() - started) * 1000)
            assert packed.prompt_tokens <= budget
            hits["ranked"][budget] += recalled(packed.prefix, case)
            hits["rankedNamesIt"][budget] += named(packed.prefix + packed.suffix, case)
            hits["currentFile"][budget] += recalled(pack(budget_tokens=budget).prefix, case)
            windows = neighbour_windows(root, case, text, column, budget, count, scored)
            hits["neighbourWindows"][budget] += recalled(windows, case)
            if rerank is not None and budget in rerank[1]:
                started = time.perf_counter()
                model_scored = pack(budget_tokens=budget, index=index, rerank=rerank[0])
                if model_scored.reranked:  # the model was asked (candidates overflowed)
                    rerank_ms.append((time.perf_counter() - started) * 1000)
                hits["modelScored"][budget] += recalled(model_scored.prefix, case)
        index.close_buffer(path)
    return hits, timings, rerank_ms


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memosight bench context", description=__doc__)
    parser.add_argument("projects", nargs="+", help="project folders (unpacked sdists/wheels)")
    parser.add_argument("--tokenizer", help="tokenizer.json or model folder used for counting")
    parser.add_argument("--cases", type=int, default=100, help="cases sampled per project")
    parser.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rerank-model", help="model folder (or 'default') scoring chunks as second stage"
    )
    parser.add_argument("--rerank-budgets", type=int, nargs="+", default=[2048])
    args = parser.parse_args(argv)
    count, counter_name = load_counter(args.tokenizer)
    rerank = (load_rerank(args.rerank_model), args.rerank_budgets) if args.rerank_model else None
    totals = {m: dict.fromkeys(args.budgets, 0) for m in methods(rerank)}
    per_project = {}
    timings: list[float] = []
    rerank_timings: list[float] = []
    n_total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, project in enumerate(args.projects):
            root = Path(project).resolve()
            cases = find_cases(root)
            rng = random.Random(args.seed)
            sample = sorted(
                rng.sample(cases, min(args.cases, len(cases))), key=lambda c: (c.rel, c.line)
            )
            hits, times, reranked = run_project(
                root, sample, count, args.budgets, Path(tmp) / str(i), rerank
            )
            timings.extend(times)
            rerank_timings.extend(reranked)
            n = len(sample)
            n_total += n
            per_project[root.name] = {
                "cases": n,
                "available": len(cases),
                "recall": {
                    m: {b: round(h[b] / max(n, 1), 3) for b in args.budgets}
                    for m, h in hits.items()
                },
            }
            for m, h in hits.items():
                for b in args.budgets:
                    totals[m][b] += h[b]
            print(f"{root.name}: {per_project[root.name]}", file=sys.stderr)  # noqa: T201
    timings.sort()
    result = {
        "counter": counter_name,
        "cases": n_total,
        "recall": {
            m: {b: round(h[b] / max(n_total, 1), 3) for b in args.budgets}
            for m, h in totals.items()
        },
        "buildMsAt1024": {
            "p50": round(statistics.median(timings), 2) if timings else None,
            "p95": round(timings[int(0.95 * (len(timings) - 1))], 2) if timings else None,
        },
        "projects": per_project,
    }
    if rerank_timings:
        result["modelScoredBuilds"] = {
            "count": len(rerank_timings),
            "p50Ms": round(statistics.median(rerank_timings), 1),
        }
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
