"""`memosight bench packing`: context packing on real projects of every language, seeded.

Each case is a real file of a pinned project (bench/corpora.py), a random cursor, a budget drawn
log-uniformly from 16 to 4,096 tokens, the project's index or none (`context.crossFile`), the
packings the settings give (the default share of other files, the ranked shares) and, for half of
the cases, the suffix bound a first-response deadline sets (pipeline/latency.py). Every packing
must end and fit its budget as the tokenizer counts the whole prompt. Prints JSON: per language
the time per packing (p50 / p99 / max) and the cases over budget.

    memosight bench packing [--cases 10000] [--langs go,rust] [--seed 0] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from memosight_lsp.context import Packing, build_context
from memosight_lsp.context.tokens import TokenCounter
from memosight_lsp.context.types import DEFAULT_PACKING
from memosight_lsp.workspace import WorkspaceIndex

from . import corpora

MIN_BUDGET, MAX_BUDGET = 16, 4096
PACKINGS = (DEFAULT_PACKING, Packing(cross_share=0.35, similar=4))
SUFFIX_BOUNDS = (None, 16, 64, 128)  # None: the suffix's share of the budget
MAX_FILE_CHARS = 400_000  # bigger files are packed as the server packs them, but drawn less


@dataclass(frozen=True, kw_only=True)
class PackCase:
    project: str
    language: str
    path: Path
    text: str
    line: int
    column: int
    budget: int
    index: WorkspaceIndex | None
    packing: Packing
    max_suffix_tokens: int | None

    def describe(self) -> str:
        return (
            f"{self.project}:{self.path.name}:{self.line + 1}:{self.column + 1} budget "
            f"{self.budget} index {self.index is not None} suffix {self.max_suffix_tokens} "
            f"{self.packing}"
        )


@dataclass(frozen=True, kw_only=True)
class PackResult:
    case: PackCase
    tokens: int  # the whole prompt as the tokenizer counts it
    ms: float

    @property
    def fits(self) -> bool:
        return self.tokens <= self.case.budget


def project_trees(languages: Sequence[str] | None = None) -> list[tuple[corpora.Project, Path]]:
    """The pinned projects' source folders (fetched on first use)."""
    return [(p, corpora.fetch(p)) for p in corpora.projects(languages)]


def cases(
    trees: Sequence[tuple[corpora.Project, Path]], count: int, seed: int
) -> Iterator[PackCase]:
    """`count` seeded cases spread evenly over the projects."""
    rng = random.Random(seed)
    prepared = []
    for project, root in trees:
        files = corpora.source_files(root)
        texts = [(f, f.read_text(encoding="utf-8", errors="replace")) for f in files]
        texts = [(f, t) for f, t in texts if t.strip()]
        if texts:
            index = WorkspaceIndex(root, use_cache=False)
            index.scan()
            prepared.append((project, texts, index))
    for i in range(count):
        project, texts, index = prepared[i % len(prepared)]
        path, text = rng.choice(texts)
        if len(text) > MAX_FILE_CHARS and rng.random() < 0.5:
            path, text = rng.choice(texts)
        lines = text.split("\n")
        line = rng.randrange(len(lines))
        column = rng.randint(0, len(lines[line]))
        budget = int(math.exp(rng.uniform(math.log(MIN_BUDGET), math.log(MAX_BUDGET))))
        yield PackCase(
            project=project.name,
            language=project.language,
            path=path,
            text=text,
            line=line,
            column=column,
            budget=budget,
            index=index if rng.random() < 0.5 else None,
            packing=rng.choice(PACKINGS),
            max_suffix_tokens=rng.choice(SUFFIX_BOUNDS),
        )


def pack(case: PackCase, counter: TokenCounter) -> PackResult:
    """Pack one case and count the whole prompt with the tokenizer."""
    started = time.perf_counter()
    packed = build_context(
        text=case.text,
        path=str(case.path),
        line=case.line,
        column=case.column,
        language_id=None,
        budget_tokens=case.budget,
        count_tokens=counter,
        index=case.index,
        max_suffix_tokens=case.max_suffix_tokens,
        packing=case.packing,
    )
    ms = (time.perf_counter() - started) * 1000
    tokens = counter(packed.prefix) + counter(packed.suffix)
    return PackResult(case=case, tokens=tokens, ms=ms)


def report(results: Sequence[PackResult]) -> dict:
    by_language: dict[str, list[PackResult]] = {}
    for result in results:
        by_language.setdefault(result.case.language, []).append(result)
    table = {}
    for language, rows in sorted(by_language.items()):
        times = sorted(r.ms for r in rows)
        table[language] = {
            "cases": len(rows),
            "p50_ms": round(_quantile(times, 0.5), 2),
            "p99_ms": round(_quantile(times, 0.99), 2),
            "max_ms": round(times[-1], 2),
            "over_budget": sum(not r.fits for r in rows),
        }
    every = sorted(r.ms for r in results)
    slowest = max(results, key=lambda r: r.ms)
    return {
        "cases": len(results),
        "p50_ms": round(_quantile(every, 0.5), 2),
        "p99_ms": round(_quantile(every, 0.99), 2),
        "max_ms": round(every[-1], 2),
        "over_budget": sum(not r.fits for r in results),
        "slowest": slowest.case.describe(),
        "languages": table,
    }


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def tokenizer_counter(model: str | None) -> Callable[[str], int]:
    """Counting with the model's tokenizer (the embedded model's by default)."""
    from transformers import AutoTokenizer

    from memosight_lsp.inference.loading import EMBEDDED_MODEL_DIR

    tokenizer = AutoTokenizer.from_pretrained(str(model or EMBEDDED_MODEL_DIR))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memosight bench packing", description=__doc__)
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--langs", help="comma-separated languages (default: all pinned)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", help="a Hugging Face folder whose tokenizer counts")
    args = parser.parse_args(argv)
    trees = project_trees(args.langs.split(",") if args.langs else None)
    counter = TokenCounter(tokenizer_counter(args.model))
    results = []
    for i, case in enumerate(cases(trees, args.cases, args.seed)):
        results.append(pack(case, counter))
        if (i + 1) % 1000 == 0:
            sys.stderr.write(f"packing: {i + 1}/{args.cases}\n")
    sys.stdout.write(json.dumps(report(results), indent=2) + "\n")
    return 0 if all(r.fits for r in results) else 1
