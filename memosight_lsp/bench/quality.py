"""`memosight bench quality`: which context makes a model complete better, measured end to end.

Cases come from held-out third-party packages installed from PyPI (never trained on), two kinds:
- `crossFile`: lines that call a function or class defined in another file of the package
  (bench/context_recall.py finds them with `ast`), the line cut at its indentation and the rest of
  the file after the cursor;
- `random`: seeded random lines of the same packages' files (bench/model_quality.py's sampling).
Every case is completed through LocalBackend.complete under each context strategy and budget
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
  suffixN   the suffix gets B/N (suffix4: B/4, as without an index; the ranked packing's
            default is B/8, the current file's as alone B/4)
  foreign   snippets only for names used near the cursor or imported, not defined in the file
  verbatim  the current file's nearest lines fill its room, no compressed code above them
            (as llama.cpp's `/infill` keeps the file); `default+verbatim`: the defaults with it
  nomarker  no `// file: path` comment above the current file's code when no other file's code
            is in the prompt (a file-level FIM prompt)
  repo      other files in the model family's repository format (Qwen2.5-Coder `<|file_sep|>`)
  above, around, choose
            how a line start is read (`completion.lineStartReading`, pipeline/readings.py; the
            default `above`): `default+around` is the defaults with the fill-in-the-middle
            prompt alone, `file+above` the current file without the code below the cursor
  simN      with shareP: N windows of other files most like the lines above the cursor first
            (context/similar.py; the defaults are share35+sim4)
  simonly   with simN: those windows only, no ranked definitions
  gateN     with shareP: other files' code only where it pays (context.pack.cross_pays): a
            similar window at least N% alike (default 50), or a name another file defines on
            the cursor's line or the line above; else the current file alone (the rule in every
            language; `default` has each language's own, context.pack.GATE_RULES)
  gatesimN  the same, the similar window alone opening the gate

    memosight bench quality --model M --cases 200 --strategies file,default,share10,floor40 \\
        --budgets 1024 --threads 1 --out q.json --plot q.png --examples 20

Every language (`--langs typescript,go,rust,java,cpp,python`): the cases come from the pinned
real projects of bench/corpora.py instead (bench/language_cases.py: random code lines and
cross-file call lines of each language), the report is per language and over all of them. With
`--llama-server URL` every case also goes to llama.cpp's `/infill` on the same model, as the
anchor: `llama.cpp` (the file around the cursor, cut to llama.cpp's own window) and
`llama.cpp+snippets` (with the other files' code of our `default` packing as `input_extra`);
its answer's first line is scored as ours is, and `vsLlama` is the paired difference from it.
`--cursor call` moves each case's cursor into its line's first call, right after the `(`, with
the editor's auto-closed `)` after it (lines without a call are left out; the expected text is
the arguments); `--cursor call-open` the same with nothing after the cursor (the rest of the
line). `--held-out` takes the cases from corpora.HELD_OUT, a project per language no default was
chosen on.

    memosight bench quality --model M --langs typescript,go,rust,java,cpp,python --cases 20 \\
        --llama-server http://127.0.0.1:8012 --threads 2 --out q.json --markdown q.md
    memosight bench quality --merge go.json,rust.json --markdown all.md   # runs pooled
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
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
from typing import get_args

import numpy as np

from memosight_lsp.bench import context_recall, corpora, language_cases, model_quality
from memosight_lsp.bench.llama_server import LlamaServer, LlamaServerError
from memosight_lsp.config import LineStartReading, Settings
from memosight_lsp.context import Packing
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.positions import split_at
from memosight_lsp.pipeline.request import CompletionRequest, packing_for
from memosight_lsp.workspace import WorkspaceIndex

# Multi-file packages installed with the project (runtime and dev dependencies): held out.
PACKAGES = (*model_quality.THIRD_PARTY_PACKAGES, "click", "jinja2", "requests", "rich")
KINDS = ("crossFile", "random")
CURSORS = ("line", "call", "call-open")  # where a --langs case puts the cursor (in_calls)
READINGS = get_args(LineStartReading)  # how a line start is read (completion.lineStartReading)
MAX_NEW_TOKENS = 48
MAX_WAIT_MS = 600_000  # the most config.py allows
BOOTSTRAP_ROUNDS = 2000
Z95 = 1.959964


# -- cases ----------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class QualityCase:
    kind: str  # one of KINDS
    root: Path  # the package folder: the workspace its index covers
    case: model_quality.Case  # the text with the line cut, the cursor, the expected line
    callee: context_recall.Case | None = None  # crossFile: what the line calls, where defined
    language: str = "python"  # the LSP languageId the editor would send


def package_roots(names: Sequence[str]) -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return [site / n for n in names if (site / n).is_dir()]


def cross_file_cases(roots: Sequence[Path], count: int, seed: int) -> list[QualityCase]:
    """`count` seeded call lines into other files of the same package, over all the roots."""
    written = functools.cache(hand_written)
    pool = [
        (root, c)
        for root in roots
        for c in context_recall.find_cases(root)
        if written(root / c.rel)
    ]
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


def hand_written(path: Path) -> bool:
    """Not a generated file (`DO NOT EDIT` near its top): nobody types in one, and the server
    completes none, so no case is taken from it."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return not language_cases.generated(f.read(2000))
    except OSError:
        return False


def random_cases(roots: Sequence[Path], count: int, seed: int) -> list[QualityCase]:
    """`count` seeded random lines of the roots' files (model_quality.sample_cases)."""
    files = [
        f
        for root in roots
        for f in sorted(root.rglob("*.py"))
        if f.stat().st_size > 2000 and hand_written(f)
    ]
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
    line_start_reading: str | None = None  # None: the settings' default (above)


_VARIANT = re.compile(
    r"floor(\d+)|share(\d+)|sim(\d+)|gate(?:sim)?(\d+)?|simonly|suffix([1-9]\d*)|foreign|repo|verbatim"
    r"|nomarker|above|around|choose"
)


def parse_strategy(name: str) -> Strategy:
    """A strategy from its name (see the module's docstring); ValueError names a bad part."""
    if name == "file":
        return Strategy(name=name, cross_file=False)
    if name.startswith("file+") and name[5:] in READINGS:
        return Strategy(name=name, cross_file=False, line_start_reading=name[5:])
    if name == "default":
        return Strategy(name=name)
    packing = Packing()
    repo: bool | None = False
    reading = None
    parts = name.split("+")
    if parts[0] == "default":  # the settings' defaults, then the variants after it
        packing, repo, parts = packing_for(Settings()), None, parts[1:]
    for part in parts:
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
        elif part.startswith("gate"):
            # An explicit rule, the same in every language (the default's differs by language).
            similarity = int(match.group(4)) / 100 if match.group(4) else 0.5
            packing = dataclasses.replace(
                packing, gate=True, gate_names=part[4:7] != "sim", gate_similarity=similarity
            )
        elif part == "simonly":
            packing = dataclasses.replace(packing, similar_only=True)
        elif match.group(5):
            packing = dataclasses.replace(packing, suffix_share=1 / int(match.group(5)))
        elif part == "foreign":
            packing = dataclasses.replace(packing, foreign_only=True)
        elif part == "verbatim":
            packing = dataclasses.replace(packing, far_prefix=False)
        elif part == "nomarker":
            packing = dataclasses.replace(packing, current_marker=False)
        elif part in READINGS:
            reading = part
        else:
            repo = True
    return Strategy(name=name, packing=packing, repo_format=repo, line_start_reading=reading)


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
        language_id=case.language,
        index=index if settings.context.cross_file else None,
    )
    overrides: dict = {
        "max_new_tokens": MAX_NEW_TOKENS,
        "multiline": "never",
        "plain": True,
        "first_response_ms": 0,  # the whole budget: quality, not latency, is measured
        # ... and no deadline: on a busy machine the 10 s default cut answers to nothing.
        "max_wait_ms": MAX_WAIT_MS,
    }
    if strategy.packing is not None:
        overrides["packing"] = strategy.packing
    if strategy.repo_format is not None:
        overrides["repo_format"] = strategy.repo_format
    if strategy.line_start_reading is not None:
        overrides["line_start_reading"] = strategy.line_start_reading
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
    # With code after the cursor (Case.line_rest): the line after accepting the answer is the
    # real one (an answer that replaces the line's rest, or the answer before that rest).
    line_exact: bool | None = None


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
    lines = [o.line_exact for o in outcomes if o.line_exact is not None]
    if lines:
        out["lineExact"] = _pct(sum(lines) / len(lines), *wilson(sum(lines), len(lines)))
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
    pairs = [(o, b) for o, b in zip(outcomes, baseline, strict=True) if o.line_exact is not None]
    if pairs and all(b.line_exact is not None for _, b in pairs):
        d = paired_difference(
            [float(bool(o.line_exact)) for o, _ in pairs],
            [float(bool(b.line_exact)) for _, b in pairs],
            seed,
        )
        out["lineExact"] = _pct(d["mean"], d["lo"], d["hi"])
    return out


def _pct(value: float, lo: float, hi: float) -> dict:
    return {"value": round(100 * value, 1), "lo": round(100 * lo, 1), "hi": round(100 * hi, 1)}


# -- the anchor: llama.cpp's /infill ---------------------------------------------------------------
ANCHORS = ("llama.cpp", "llama.cpp+snippets")
VS_ANCHOR = (("llama.cpp", "vsLlama"),)


def infill_case(
    server: LlamaServer,
    engine: LocalBackend,
    case: QualityCase,
    extra: Sequence[tuple[str, str]],
) -> Outcome:
    """The case through llama.cpp's /infill: the whole file split at the cursor (llama.cpp keeps
    what its batch size allows of each side, as llama.vim sends it), `extra` as input_extra; the
    answer's first line, scored as ours is. A request that fails counts as an empty answer."""
    prefix, suffix = split_at(case.case.text, case.case.line, case.case.column)
    body = {
        "input_prefix": prefix,
        "input_suffix": suffix,
        "input_extra": [{"filename": path, "text": text} for path, text in extra],
        "prompt": "",
        "n_predict": MAX_NEW_TOKENS,
        "stop": ["\n"],  # one line, as ours: the first line is all that is scored
        "cache_prompt": True,
    }
    started = time.perf_counter()
    try:
        answer = server.infill(body)
        text, prompt_tokens = answer.text, answer.prompt_tokens + answer.cached_tokens
    except LlamaServerError as err:
        sys.stderr.write(f"quality: {err}\n")
        text, prompt_tokens = "", 0
    line = text.split("\n", 1)[0]
    prediction = line.strip()
    target = case.case.target
    return Outcome(
        exact=prediction == target,
        similarity=model_quality.edit_similarity(prediction, target),
        first_token=first_token_match(prediction, target, engine.loaded.tokenizer.encode),
        recalled=None,
        prompt_tokens=prompt_tokens,
        ms=(time.perf_counter() - started) * 1000,
        prediction=prediction,
        # Shown before the code after the cursor, as llama.vim draws it.
        line_exact=line_matches(line + rest_of_line(case), case),
    )


def rest_of_line(case: QualityCase) -> str:
    """The case's line after the cursor (the editor's `)` with --cursor call)."""
    return case.case.text.split("\n")[case.case.line][case.case.column :]


def line_matches(written: str, case: QualityCase) -> bool | None:
    """Whether the line from the cursor on, as accepting the answer leaves it, is the real one;
    None for cases with nothing after the cursor (Case.line_rest)."""
    if not case.case.line_rest:
        return None
    return written.strip() == case.case.line_rest


# -- every language: the pinned projects of bench/corpora.py ------------------------------------
def corpus_cases(
    languages: Sequence[str],
    count: int,
    seed: int,
    kinds: Sequence[str],
    cache_dir: Path,
    held_out: bool = False,
) -> dict[str, list[QualityCase]]:
    """Per language, `count` cases of each kind over its pinned projects (corpora.HELD_OUT's
    with `held_out`; seeded; the projects share the count; the kinds take turns). Python's call
    lines are found with `ast` (context_recall), the others' with the index's outlines
    (language_cases)."""
    out: dict[str, list[QualityCase]] = {}
    for language in languages:
        roots = [corpora.fetch(p) for p in corpora.projects([language], held_out=held_out)]
        calls: list[QualityCase] = []
        plain: list[QualityCase] = []
        for n, root in enumerate(roots):
            share = count // len(roots) + (n < count % len(roots))
            files = language_cases.project_files(root, language)
            if "crossFile" in kinds:
                if language == "python":
                    found = [
                        (c.case, c.callee)
                        for c in cross_file_cases([root], share, seed)
                        if c.callee is not None
                    ]
                else:
                    folder = cache_dir / f"cases-{language}-{n}"
                    index = WorkspaceIndex(root, cache_dir=folder)
                    index.scan()
                    found = language_cases.call_lines(root, language, index, files, share, seed)
                calls += [
                    QualityCase(
                        kind="crossFile", root=root, case=c, callee=callee, language=language
                    )
                    for c, callee in found
                ]
            if "random" in kinds:
                plain += [
                    QualityCase(kind="random", root=root, case=c, language=language)
                    for c in language_cases.random_lines(files, language, share, seed)
                ]
        out[language] = [c for pair in itertools.zip_longest(calls, plain) for c in pair if c]
    return out


def in_calls(cases: Sequence[QualityCase], cursor: str) -> list[QualityCase]:
    """The cases whose line has a call, the cursor after its `(` (language_cases.in_call; the
    editor's `)` after it with `call`, nothing with `call-open`)."""
    out = []
    for case in cases:
        moved = language_cases.in_call(case.case, case.language, closed=cursor == "call")
        if moved is not None:
            out.append(dataclasses.replace(case, case=moved))
    return out


def pooled(per_language: dict[str, Results]) -> Results:
    """Every language's outcomes together (in language order, so pairs stay paired), for
    the strategies run in every language."""
    keys = set.intersection(*(set(r) for r in per_language.values())) if per_language else set()
    out: Results = {}
    for results in per_language.values():
        for key, outcomes in results.items():
            if key in keys:
                out.setdefault(key, []).extend(outcomes)
    return out


def dump_outcomes(results: Results) -> dict[str, list[list]]:
    """Every case's scores, `budget/strategy/kind` -> [exact, similarity, first token,
    recalled, prompt tokens, ms, line exact] in case order: what `--merge` pools across runs."""
    return {
        f"{budget}/{name}/{kind}": [
            [
                o.exact,
                round(o.similarity, 4),
                o.first_token,
                o.recalled,
                o.prompt_tokens,
                o.ms,
                o.line_exact,
            ]
            for o in outcomes
        ]
        for (budget, name, kind), outcomes in results.items()
    }


def load_outcomes(rows: dict[str, list[list]]) -> Results:
    """dump_outcomes' inverse (predictions are not kept)."""
    out: Results = {}
    for key, values in rows.items():
        budget, name, kind = key.split("/", 2)
        out[(int(budget), name, kind)] = [
            Outcome(
                exact=v[0],
                similarity=v[1],
                first_token=v[2],
                recalled=v[3],
                prompt_tokens=v[4],
                ms=v[5],
                line_exact=v[6] if len(v) > 6 else None,  # runs before it have none
            )
            for v in values
        ]
    return out


def merge(paths: Sequence[str], seed: int) -> tuple[dict, str]:
    """The reports of several `--langs` runs (their JSON files) together: per language and
    pooled over all their cases, and the markdown table of the first budget. Runs of the
    same languages with other strategies (same seed and --cases: the same cases) add their
    columns."""
    per_language: dict[str, Results] = {}
    names: list[str] = []
    budgets: list[int] = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        for language, rows in data["outcomes"].items():
            # Runs of other strategies on the same cases (same seed and --cases) add up.
            per_language.setdefault(language, {}).update(load_outcomes(rows))
        names += [n for n in data["strategies"] if n not in names]
        budgets += [b for b in data["budgets"] if b not in budgets]
    table = {
        language: report(results, names, budgets, seed)
        for language, results in per_language.items()
    }
    table["all"] = report(pooled(per_language), names, budgets, seed)
    return table, markdown(table, budgets[0], names)


def markdown(table: dict, budget: int, names: Sequence[str]) -> str:
    """One row per language, kind and strategy: exact match and edit similarity with their
    intervals, and the paired differences from the file alone and from llama.cpp."""

    def cell(d: dict | None) -> str:
        return "" if d is None else f"{d['value']:.1f} [{d['lo']:.1f}, {d['hi']:.1f}]"

    def diff(d: dict | None) -> str:
        return "" if d is None else f"{d['value']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}]"

    cells = [
        (language, kind, name, c)
        for language, per_budget in table.items()
        for kind in KINDS
        for name in names
        if (c := per_budget.get(str(budget), {}).get(name, {}).get(kind)) is not None
    ]
    # Cases with code after the cursor (--cursor call) also score the line after accepting.
    lines = any("lineExact" in c for *_, c in cells)
    rows = [
        "| language | lines | n | context | exact match | vs file | vs llama.cpp "
        "| edit similarity | vs file | vs llama.cpp |"
        + (" line after accepting | vs llama.cpp |" if lines else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if lines else ""),
    ]
    for language, kind, name, c in cells:
        vs_file, vs_llama = c.get("vsFile", {}), c.get("vsLlama", {})
        rows.append(
            f"| {language} | {kind} | {c['cases']} | {name} "
            f"| {cell(c['exactMatch'])} | {diff(vs_file.get('exactMatch'))} "
            f"| {diff(vs_llama.get('exactMatch'))} | {cell(c['editSimilarity'])} "
            f"| {diff(vs_file.get('editSimilarity'))} "
            f"| {diff(vs_llama.get('editSimilarity'))} |"
            + (
                f" {cell(c.get('lineExact'))} | {diff(vs_llama.get('lineExact'))} |"
                if lines
                else ""
            )
        )
    return "\n".join(rows) + "\n"


# -- running --------------------------------------------------------------------------------------
Results = dict[tuple[int, str, str], list[Outcome]]  # (budget, strategy, kind) -> outcomes


def complete_case(engine: LocalBackend, request: CompletionRequest, case: QualityCase) -> Outcome:
    recalled = None
    if case.callee is not None:
        context = engine.prepare(request, stable=False).context
        if case.language == "python":
            recalled = context_recall.recalled(context.prefix, case.callee)
        else:  # no header rule per language: the callee is named in other files' code
            cross = context.prefix[: context.cross_chars]
            recalled = re.search(rf"\b{re.escape(case.callee.name)}\b", cross) is not None
    started = time.perf_counter()
    completion = engine.complete(request)
    text, rest = completion.text, rest_of_line(case)
    if completion.replaces_rest:  # the line through the code after the cursor
        added, written = text[: text.rfind(rest)], text
    else:
        added, written = text, text + rest
    prediction = added.strip()
    target = case.case.target
    return Outcome(
        exact=prediction == target,
        similarity=model_quality.edit_similarity(prediction, target),
        first_token=first_token_match(prediction, target, engine.loaded.tokenizer.encode),
        recalled=recalled,
        prompt_tokens=completion.prompt_tokens,
        ms=(time.perf_counter() - started) * 1000,
        prediction=prediction,
        line_exact=line_matches(written, case),
    )


def run_cases(
    engine: LocalBackend,
    cases: Sequence[QualityCase],
    strategies: Sequence[Strategy],
    budgets: Sequence[int],
    cache_dir: Path,
    on_progress: Callable[[Results, int], None] | None = None,
    anchor: LlamaServer | None = None,
    anchors: Sequence[str] = (),
) -> Results:
    """(budget, strategy, kind) -> one outcome per case of the kind, in case order. Every ten
    cases `on_progress` gets the results so far and how many cases they hold. With `anchor`,
    the case also goes to that llama.cpp server's /infill once per budget and name of
    `anchors` (ANCHORS: the file alone, and with our snippets)."""
    indexes: dict[Path, WorkspaceIndex] = {}
    results: Results = {}
    started = time.perf_counter()
    for done, case in enumerate(cases, start=1):
        index = indexes.get(case.root)
        if index is None:
            # Numbered: two projects' source folders may share a name (`src`).
            folder = cache_dir / f"{len(indexes)}-{case.root.name}"
            index = WorkspaceIndex(case.root, cache_dir=folder)
            index.scan()
            indexes[case.root] = index
        # As the server does on didChange: the index sees the buffer with the line cut.
        index.update_buffer(case.case.path, case.case.text, language_id=case.language)
        for budget in budgets:
            for strategy in strategies:
                request = request_for(strategy, case, index, budget)
                outcome = complete_case(engine, request, case)
                results.setdefault((budget, strategy.name, case.kind), []).append(outcome)
            if anchor is not None:
                ours = request_for(Strategy(name="default"), case, index, budget)
                extra = engine.prepare(ours, stable=False).context.cross_files
                for name, files in zip(ANCHORS, ((), extra), strict=True):
                    if name not in anchors:
                        continue
                    outcome = infill_case(anchor, engine, case, files)
                    results.setdefault((budget, name, case.kind), []).append(outcome)
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
    names: Sequence[str],
    budgets: Sequence[int],
    seed: int,
) -> dict:
    """{budget: {strategy: {kind: summary + vsFile, vsDefault, vsLlama}}}: the paired
    differences from `file`, `default` and llama.cpp's /infill where they were run."""
    out: dict = {}
    for budget in budgets:
        per_strategy: dict = {}
        for name in names:
            per_kind = {}
            for kind in KINDS:
                outcomes = results.get((budget, name, kind))
                if not outcomes:
                    continue
                per_kind[kind] = summarize(outcomes, seed)
                for base, key in (("file", "vsFile"), ("default", "vsDefault"), *VS_ANCHOR):
                    baseline = results.get((budget, base, kind))
                    if baseline and name != base:
                        per_kind[kind][key] = versus(outcomes, baseline, seed)
            per_strategy[name] = per_kind
        out[str(budget)] = per_strategy
    return out


def examples(
    results: Results,
    cases: Sequence[QualityCase],
    names: Sequence[str],
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
            for name in names:
                outcomes = results.get((budget, name, kind), [])
                if i < len(outcomes):
                    predictions[name] = outcomes[i].prediction
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
    parser.add_argument("--quantization", default="auto", help="auto, none, int8, int4, gguf")
    parser.add_argument("--cases", type=int, default=100, help="cases per kind (and language)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="crossFile,random")
    parser.add_argument("--strategies", default="file,default", help="comma-separated")
    parser.add_argument("--budgets", default="1024", help="comma-separated, e.g. 256,512,1024")
    parser.add_argument("--packages", default=",".join(PACKAGES), help="site-packages folders")
    parser.add_argument(
        "--langs", help="languages of bench/corpora.py's projects, e.g. typescript,go,rust"
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="with --langs: the projects no default was chosen on (corpora.HELD_OUT)",
    )
    parser.add_argument(
        "--llama-server", help="also ask this llama.cpp server's /infill (the anchor)"
    )
    parser.add_argument(
        "--anchors", default=",".join(ANCHORS), help="with --llama-server: which of them"
    )
    parser.add_argument(
        "--cursor",
        choices=CURSORS,
        default="line",
        help="with --langs: line (the start of the line, the default), call (after the line's "
        "first `(`, the editor's `)` after it), call-open (after it, nothing after it)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's own)")
    parser.add_argument("--examples", type=int, default=0, help="show N cases' predictions")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--markdown", help="with --langs: write a table per language here")
    parser.add_argument("--plot", help="draw exact match per budget and strategy into this PNG")
    parser.add_argument(
        "--merge", help="comma-separated JSON files of --langs runs: report them together"
    )
    args = parser.parse_args(argv)
    if args.merge:
        table, text = merge(args.merge.split(","), args.seed)
        sys.stdout.write(json.dumps(table, indent=2) + "\n")
        if args.markdown:
            Path(args.markdown).write_text(text)
        return 0
    try:
        strategies = [parse_strategy(s) for s in args.strategies.split(",") if s]
    except ValueError as err:
        parser.error(str(err))
    budgets = [int(b) for b in args.budgets.split(",") if b]
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"unknown kinds: {', '.join(sorted(unknown))}")
    languages = [lang for lang in (args.langs or "").split(",") if lang]
    known = {p.language for p in corpora.projects(held_out=args.held_out)}
    if unknown := set(languages) - known:
        parser.error(f"no pinned projects in: {', '.join(sorted(unknown))}")
    anchor = LlamaServer(args.llama_server, timeout_s=120) if args.llama_server else None
    if anchor is not None:
        try:
            anchor.props()
        except LlamaServerError as err:
            parser.error(str(err))

    import torch

    from memosight_lsp.inference.loading import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    anchors = [a for a in args.anchors.split(",") if a] if anchor is not None else []
    if unknown := set(anchors) - set(ANCHORS):
        parser.error(f"unknown anchors: {', '.join(sorted(unknown))}")
    names = [s.name for s in strategies] + anchors
    with tempfile.TemporaryDirectory() as tmp:
        if languages:
            groups = corpus_cases(
                languages, args.cases, args.seed, kinds, Path(tmp), held_out=args.held_out
            )
            if args.cursor != "line":
                groups = {lang: in_calls(cases, args.cursor) for lang, cases in groups.items()}
            sources = [p.key for p in corpora.projects(languages, held_out=args.held_out)]
        else:
            roots = package_roots(args.packages.split(","))
            cross = cross_file_cases(roots, args.cases, args.seed) if "crossFile" in kinds else []
            plain = random_cases(roots, args.cases, args.seed) if "random" in kinds else []
            # The kinds take turns, so that results written on the way hold as many of each.
            groups = {
                "python": [c for pair in itertools.zip_longest(cross, plain) for c in pair if c]
            }
            sources = [r.name for r in roots]
        loaded = load_model(
            args.model, device="cpu", dtype=args.dtype, quantization=args.quantization
        )
        engine = LocalBackend(loaded, speculative=False, time_passes=False)
        started = time.perf_counter()
        done_results: dict[str, Results] = {}

        def summary(per_language: dict[str, Results], partial: str | None) -> dict:
            cases = [c for language in per_language for c in groups[language]]
            first = budgets[0]
            out = {
                "model": loaded.describe(),
                "seed": args.seed,
                "cursor": args.cursor,
                "packages": sources,
                "cases": {k: sum(c.kind == k for c in cases) for k in KINDS},
                "budgets": budgets,
                "strategies": names,
                "effectiveBudget": {str(b): engine.context_budget(_sized(b)) for b in budgets},
                "seconds": round(time.perf_counter() - started, 1),
                **({"partial": partial} if partial else {}),
            }
            if not languages:
                results = per_language.get("python", {})
                out["quality"] = report(results, names, budgets, args.seed)
                out["examples"] = examples(results, cases, names, first, args.examples)
                return out
            out["languages"] = {
                language: report(results, names, budgets, args.seed)
                for language, results in per_language.items()
            }
            out["overall"] = report(pooled(per_language), names, budgets, args.seed)
            out["examples"] = {
                language: examples(results, groups[language], names, first, args.examples)
                for language, results in per_language.items()
            }
            out["outcomes"] = {
                language: dump_outcomes(results) for language, results in per_language.items()
            }
            return out

        for language, cases in groups.items():

            def write_partial(results: Results, done: int, language: str = language) -> None:
                if args.out:
                    partial = {**done_results, language: results}
                    note = f"{language}: {done} of {len(groups[language])} cases"
                    Path(args.out).write_text(json.dumps(summary(partial, note), indent=2) + "\n")

            sys.stderr.write(f"quality: {language}, {len(cases)} cases\n")
            done_results[language] = run_cases(
                engine, cases, strategies, budgets, Path(tmp), write_partial, anchor, anchors
            )
    result = summary(done_results, None)
    text = json.dumps(result, indent=2)
    sys.stdout.write(text + "\n")
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.markdown and languages:
        tables = {**result["languages"], "all": result["overall"]}
        Path(args.markdown).write_text(markdown(tables, budgets[0], names))
    if args.plot and not languages:
        title = f"{loaded.name}: {result['cases']} cases, seed {args.seed}"
        plot(result["quality"], args.plot, title)
    return 0


def _sized(budget: int) -> CompletionRequest:
    return CompletionRequest(
        text="", line=0, column=0, budget_tokens=budget, max_new_tokens=MAX_NEW_TOKENS
    )


if __name__ == "__main__":
    raise SystemExit(main())
