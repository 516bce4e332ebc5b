"""`memosight bench quality`: which context makes a model complete better, measured end to end.

Cases come from held-out third-party packages installed from PyPI (never trained on), two kinds:
- `crossFile`: lines that call a function or class defined in another file of the package
  (bench/context_recall.py finds them with `ast`), the line cut at its indentation and the rest of
  the file after the cursor;
- `random`: seeded random lines of the same packages' files (bench/model_quality.py's sampling).
Every case is completed through CompletionEngine.complete under each context strategy and budget
(same cases, same model, plain greedy decoding, one line) and scored: next-line exact match,
edit similarity and first-token accuracy, each with its 95% interval (Wilson for shares, a
seeded bootstrap for means), and the paired differences from the current file alone and from
the defaults with their bootstrap intervals, so a difference can be told from noise. For
cross-file cases the recall of the packed context (bench/context_recall.py: the callee's header
under its file's marker) is reported beside quality.

Strategies (`--strategies`, comma-separated; variants join with `+`, e.g. `floor40+foreign`):
  file      the current file only (`context.crossFile: false`)
  default   the settings' defaults as they are
  packed    the ranked packing that `context.crossFileShare` replaced (context.Packing())
  floorN    N lines above the cursor before any snippet, then the suffix, snippets from the rest
  shareP    other files' snippets in at most P% of the budget, then the current file packed as
            alone (nearest lines, the code above them compressed, suffix B/4) in the rest
  suffix4   the suffix gets B/4 (as without an index) instead of B/8
  foreign   snippets only for names used near the cursor or imported, not defined in the file
  repo      other files in the model family's repository format (Qwen2.5-Coder `<|file_sep|>`)
  simN      with shareP: N windows of other files most like the lines above the cursor first
            (context/similar.py; the defaults are share35+sim4)
  simonly   with simN: those windows only, no ranked definitions

    memosight bench quality --model M --cases 200 --strategies file,default,share10,floor40 \\
        --budgets 1024 --threads 1 --out q.json --plot q.png --examples 20
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import random
import re
import statistics
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from memosight_lsp.bench import context_recall, model_quality
from memosight_lsp.completion.service import CompletionEngine, CompletionRequest
from memosight_lsp.config import Settings
from memosight_lsp.context import Packing
from memosight_lsp.workspace import WorkspaceIndex

# Multi-file packages installed with the project (runtime and dev dependencies): held out.
PACKAGES = (*model_quality.THIRD_PARTY_PACKAGES, "click", "jinja2", "requests", "rich")
KINDS = ("crossFile", "random")
MAX_NEW_TOKENS = 48
BOOTSTRAP_ROUNDS = 2000
Z95 = 1.959964


# -- cases ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class QualityCase:
    kind: str  # one of KINDS
    root: Path  # the package folder: the workspace its index covers
    case: model_quality.Case  # the text with the line cut, the cursor, the expected line
    callee: context_recall.Case | None = None  # crossFile: what the line calls, where defined


def package_roots(names: Sequence[str]) -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return [site / n for n in names if (site / n).is_dir()]


def cross_file_cases(roots: Sequence[Path], count: int, seed: int) -> list[QualityCase]:
    """`count` seeded call lines into other files of the same package, over all the roots."""
    pool = [(root, c) for root in roots for c in context_recall.find_cases(root)]
    rng = random.Random(seed)
    out = []
    for root, callee in rng.sample(pool, min(count, len(pool))):
        path = root / callee.rel
        original = path.read_text(encoding="utf-8")
        text, column = context_recall.cut_line(original, callee.line)
        target = original.split("\n")[callee.line].strip()
        case = model_quality.Case(
            path=str(path), text=text, line=callee.line, column=column, target=target
        )
        out.append(QualityCase(kind="crossFile", root=root, case=case, callee=callee))
    return out


def random_cases(roots: Sequence[Path], count: int, seed: int) -> list[QualityCase]:
    """`count` seeded random lines of the roots' files (model_quality.sample_cases)."""
    files = [f for root in roots for f in sorted(root.rglob("*.py")) if f.stat().st_size > 2000]
    out = []
    for case in model_quality.sample_cases(files, count, seed):
        root = next(r for r in roots if Path(case.path).is_relative_to(r))
        out.append(QualityCase(kind="random", root=root, case=case))
    return out


# -- strategies -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Strategy:
    name: str
    cross_file: bool = True
    packing: Packing | None = None  # None: the settings' defaults
    repo_format: bool | None = None  # None: the settings' defaults


_VARIANT = re.compile(r"floor(\d+)|share(\d+)|sim(\d+)|simonly|suffix4|foreign|repo")


def parse_strategy(name: str) -> Strategy:
    """A strategy from its name (see the module's docstring); ValueError names a bad part."""
    if name == "file":
        return Strategy(name=name, cross_file=False)
    if name == "default":
        return Strategy(name=name)
    packing, repo = Packing(), False
    for part in name.split("+"):
        match = _VARIANT.fullmatch(part)
        if part == "packed":
            continue
        if match is None:
            raise ValueError(f"unknown strategy part {part!r} in {name!r}")
        if match.group(1):
            packing = dataclasses.replace(packing, prefix_floor_lines=int(match.group(1)))
        elif match.group(2):
            packing = dataclasses.replace(packing, cross_share=int(match.group(2)) / 100)
        elif match.group(3):
            packing = dataclasses.replace(packing, similar=int(match.group(3)))
        elif part == "simonly":
            packing = dataclasses.replace(packing, similar_only=True)
        elif part == "suffix4":
            packing = dataclasses.replace(packing, suffix_share=1 / 4)
        elif part == "foreign":
            packing = dataclasses.replace(packing, foreign_only=True)
        else:
            repo = True
    return Strategy(name=name, packing=packing, repo_format=repo)


def request_for(
    strategy: Strategy, case: QualityCase, index: WorkspaceIndex, budget: int
) -> CompletionRequest:
    """The request an editor would send at the case's cursor under the strategy's settings:
    one line, plain greedy decoding (the same tokens speculative decoding gives)."""
    settings = Settings()
    settings.context.budget_tokens = budget
    settings.context.cross_file = strategy.cross_file
    request = CompletionRequest.from_settings(
        settings,
        text=case.case.text,
        line=case.case.line,
        column=case.case.column,
        path=case.case.path,
        language_id="python",
        index=index if settings.context.cross_file else None,
    )
    overrides: dict = {
        "max_new_tokens": MAX_NEW_TOKENS,
        "multiline": "never",
        "plain": True,
        "first_response_ms": 0,  # the whole budget: quality, not latency, is measured
    }
    if strategy.packing is not None:
        overrides["packing"] = strategy.packing
    if strategy.repo_format is not None:
        overrides["repo_format"] = strategy.repo_format
    return dataclasses.replace(request, **overrides)


# -- scoring --------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Outcome:
    exact: bool
    similarity: float
    first_token: bool
    recalled: bool | None  # crossFile: the callee's header was in the prompt
    prompt_tokens: int
    ms: float
    prediction: str = ""


def first_token_match(prediction: str, target: str, encode) -> bool:
    """The prediction's first token is the expected line's first token (empty: a miss)."""
    if not prediction or not target:
        return prediction == target
    return encode(prediction)[:1] == encode(target)[:1]


def wilson(hits: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a share (hits of n); (0, 1) for no cases."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_mean(values: Sequence[float], seed: int) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the mean (seeded)."""
    if not values:
        return 0.0, 0.0
    data = np.asarray(values, dtype=np.float64)  # [N]
    picks = np.random.default_rng(seed).integers(0, len(data), (BOOTSTRAP_ROUNDS, len(data)))
    means = data[picks].mean(axis=1)  # [R]
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def paired_difference(a: Sequence[float], b: Sequence[float], seed: int) -> dict:
    """Mean of a - b over the same cases, with its 95% bootstrap interval (cases resampled)."""
    diff = [x - y for x, y in zip(a, b, strict=True)]
    lo, hi = bootstrap_mean(diff, seed)
    return {"mean": statistics.fmean(diff) if diff else 0.0, "lo": lo, "hi": hi}


def summarize(outcomes: Sequence[Outcome], seed: int) -> dict:
    """Each measure with its 95% interval, in percent (edit similarity: mean x 100)."""
    n = len(outcomes)
    out: dict = {"cases": n}
    for key, field_name in (("exactMatch", "exact"), ("firstToken", "first_token")):
        hits = sum(getattr(o, field_name) for o in outcomes)
        lo, hi = wilson(hits, n)
        out[key] = _pct(hits / max(1, n), lo, hi)
    sims = [o.similarity for o in outcomes]
    out["editSimilarity"] = _pct(
        statistics.fmean(sims) if sims else 0.0, *bootstrap_mean(sims, seed)
    )
    recalls = [o.recalled for o in outcomes if o.recalled is not None]
    if recalls:
        out["recall"] = round(100 * sum(recalls) / len(recalls), 1)
    out["promptTokens"] = round(statistics.fmean(o.prompt_tokens for o in outcomes), 1) if n else 0
    out["msPerCompletion"] = round(statistics.fmean(o.ms for o in outcomes), 1) if n else 0
    return out


def versus(outcomes: Sequence[Outcome], baseline: Sequence[Outcome], seed: int) -> dict:
    """Paired differences from the baseline strategy on the same cases, in points."""
    out = {}
    for key, get in (
        ("exactMatch", lambda o: float(o.exact)),
        ("editSimilarity", lambda o: o.similarity),
        ("firstToken", lambda o: float(o.first_token)),
    ):
        d = paired_difference([get(o) for o in outcomes], [get(o) for o in baseline], seed)
        out[key] = _pct(d["mean"], d["lo"], d["hi"])
    return out


def _pct(value: float, lo: float, hi: float) -> dict:
    return {"value": round(100 * value, 1), "lo": round(100 * lo, 1), "hi": round(100 * hi, 1)}


# -- running --------------------------------------------------------------------------------------
Results = dict[tuple[int, str, str], list[Outcome]]  # (budget, strategy, kind) -> outcomes


def complete_case(
    engine: CompletionEngine, request: CompletionRequest, case: QualityCase
) -> Outcome:
    recalled = None
    if case.callee is not None:
        prompt = engine.prepare(request, stable=False)
        recalled = context_recall.recalled(prompt.context.prefix, case.callee)
    started = time.perf_counter()
    completion = engine.complete(request)
    prediction = completion.text.strip()
    target = case.case.target
    return Outcome(
        exact=prediction == target,
        similarity=model_quality.edit_similarity(prediction, target),
        first_token=first_token_match(prediction, target, engine.loaded.tokenizer.encode),
        recalled=recalled,
        prompt_tokens=completion.prompt_tokens,
        ms=(time.perf_counter() - started) * 1000,
        prediction=prediction,
    )


def run_cases(
    engine: CompletionEngine,
    cases: Sequence[QualityCase],
    strategies: Sequence[Strategy],
    budgets: Sequence[int],
    cache_dir: Path,
    on_progress: Callable[[Results, int], None] | None = None,
) -> Results:
    """(budget, strategy, kind) -> one outcome per case of the kind, in case order. Every ten
    cases `on_progress` gets the results so far and how many cases they hold."""
    indexes: dict[Path, WorkspaceIndex] = {}
    results: Results = {}
    started = time.perf_counter()
    for done, case in enumerate(cases, start=1):
        index = indexes.get(case.root)
        if index is None:
            index = WorkspaceIndex(case.root, cache_dir=cache_dir / case.root.name)
            index.scan()
            indexes[case.root] = index
        # As the server does on didChange: the index sees the buffer with the line cut.
        index.update_buffer(case.case.path, case.case.text, language_id="python")
        for budget in budgets:
            for strategy in strategies:
                request = request_for(strategy, case, index, budget)
                outcome = complete_case(engine, request, case)
                results.setdefault((budget, strategy.name, case.kind), []).append(outcome)
        index.close_buffer(case.case.path)
        if done % 10 == 0 or done == len(cases):
            elapsed = time.perf_counter() - started
            left = elapsed / done * (len(cases) - done)
            sys.stderr.write(
                f"quality: {done}/{len(cases)} cases, {elapsed:.0f} s, ~{left:.0f} s left\n"
            )
            if on_progress is not None:
                on_progress(results, done)
    return results


def report(
    results: Results,
    strategies: Sequence[Strategy],
    budgets: Sequence[int],
    seed: int,
) -> dict:
    """{budget: {strategy: {kind: summary + vsFile, vsDefault}}}: the paired differences from
    `file` and `default` where they were run."""
    out: dict = {}
    for budget in budgets:
        per_strategy: dict = {}
        for strategy in strategies:
            per_kind = {}
            for kind in KINDS:
                outcomes = results.get((budget, strategy.name, kind))
                if not outcomes:
                    continue
                per_kind[kind] = summarize(outcomes, seed)
                for base, key in (("file", "vsFile"), ("default", "vsDefault")):
                    baseline = results.get((budget, base, kind))
                    if baseline and strategy.name != base:
                        per_kind[kind][key] = versus(outcomes, baseline, seed)
            per_strategy[strategy.name] = per_kind
        out[str(budget)] = per_strategy
    return out


def examples(
    results: Results,
    cases: Sequence[QualityCase],
    strategies: Sequence[Strategy],
    budget: int,
    count: int,
) -> list[dict]:
    """The first `count` cases of each kind: where, the expected line and each strategy's
    prediction at `budget`."""
    out = []
    for kind in KINDS:
        of_kind = [c for c in cases if c.kind == kind]
        for i, case in enumerate(of_kind[:count]):
            predictions = {}
            for strategy in strategies:
                outcomes = results.get((budget, strategy.name, kind), [])
                if i < len(outcomes):
                    predictions[strategy.name] = outcomes[i].prediction
            out.append(
                {
                    "kind": kind,
                    "path": str(Path(case.case.path).relative_to(case.root.parent)),
                    "line": case.case.line,
                    "target": case.case.target,
                    "predictions": predictions,
                }
            )
    return out


def plot(table: dict, path: str, title: str) -> None:
    """Exact match (with its 95% interval) per budget, one line per strategy, one panel per kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = sorted(int(b) for b in table)
    names = list(dict.fromkeys(s for b in table.values() for s in b))
    fig, axes = plt.subplots(1, len(KINDS), figsize=(11, 4.2), sharey=True)
    for ax, kind in zip(axes, KINDS, strict=True):
        for name in names:
            xs: list[int] = []
            ys: list[float] = []
            errs: list[list[float]] = [[], []]
            for b in budgets:
                cell = table[str(b)].get(name, {}).get(kind)
                if cell is None:
                    continue
                em = cell["exactMatch"]
                xs.append(b)
                ys.append(em["value"])
                errs[0].append(em["value"] - em["lo"])
                errs[1].append(em["hi"] - em["value"])
            if xs:
                ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.set_xlabel("context budget (tokens)")
        ax.set_title(f"{kind} lines")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("next-line exact match (%), 95% interval")
    axes[-1].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="memosight bench quality",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--model", help="model folder or .gguf file (default: the embedded model)")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16")
    parser.add_argument("--quantization", default="auto", help="auto, none, int8, int4")
    parser.add_argument("--cases", type=int, default=100, help="cases per kind")
    parser.add_argument("--kinds", default=",".join(KINDS), help="crossFile,random")
    parser.add_argument("--strategies", default="file,default", help="comma-separated")
    parser.add_argument("--budgets", default="1024", help="comma-separated, e.g. 256,512,1024")
    parser.add_argument("--packages", default=",".join(PACKAGES), help="site-packages folders")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    parser.add_argument("--examples", type=int, default=0, help="show N cases' predictions")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--plot", help="draw exact match per budget and strategy into this PNG")
    args = parser.parse_args(argv)
    try:
        strategies = [parse_strategy(s) for s in args.strategies.split(",") if s]
    except ValueError as err:
        parser.error(str(err))
    budgets = [int(b) for b in args.budgets.split(",") if b]
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")

    import torch

    from memosight_lsp.engine.loading import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    roots = package_roots(args.packages.split(","))
    cross = cross_file_cases(roots, args.cases, args.seed) if "crossFile" in kinds else []
    plain = random_cases(roots, args.cases, args.seed) if "random" in kinds else []
    # The kinds take turns, so that results written on the way hold as many of each.
    cases = [c for pair in itertools.zip_longest(cross, plain) for c in pair if c is not None]
    loaded = load_model(args.model, device="cpu", dtype=args.dtype, quantization=args.quantization)
    engine = CompletionEngine(loaded, speculative=False, time_passes=False)
    started = time.perf_counter()

    def summary(results: Results, done: int) -> dict:
        return {
            "model": loaded.describe(),
            "seed": args.seed,
            "packages": [r.name for r in roots],
            "cases": {k: sum(c.kind == k for c in cases[:done]) for k in KINDS},
            "budgets": budgets,
            "strategies": [s.name for s in strategies],
            "effectiveBudget": {str(b): engine.context_budget(_sized(b)) for b in budgets},
            "seconds": round(time.perf_counter() - started, 1),
            **({"partial": f"{done} of {len(cases)} cases"} if done < len(cases) else {}),
            "quality": report(results, strategies, budgets, args.seed),
            "examples": examples(results, cases[:done], strategies, budgets[0], args.examples),
        }

    def write_partial(results: Results, done: int) -> None:
        if args.out and done < len(cases):
            Path(args.out).write_text(json.dumps(summary(results, done), indent=2) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        results = run_cases(engine, cases, strategies, budgets, Path(tmp), write_partial)
    result = summary(results, len(cases))
    table = result["quality"]
    text = json.dumps(result, indent=2)
    sys.stdout.write(text + "\n")
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.plot:
        plot(table, args.plot, f"{loaded.name}: {result['cases']} cases, seed {args.seed}")
    return 0


def _sized(budget: int) -> CompletionRequest:
    return CompletionRequest(
        text="", line=0, column=0, budget_tokens=budget, max_new_tokens=MAX_NEW_TOKENS
    )


if __name__ == "__main__":
    raise SystemExit(main())
