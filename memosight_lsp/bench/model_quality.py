"""`memosight bench model`: next-line quality and speed of a model through the completion path.

Cases: seeded random lines of held-out files; the cursor sits after the line's indentation and
the model must produce the rest of the line. Each case runs with the code after the line in view
(FIM) and without it (prefix only). Reports exact match and edit similarity per corpus, decode
speed, time to first token on a ~1,000-token prompt, load time and peak memory. Prints JSON.

--speculative also completes every case with speculative decoding in the same precision and
reports the share of completions identical to plain greedy decoding and both paths' scores
(on a CPU every precision should give 100%: verification passes equal one-token steps,
docs/speculative.md; the share checks it on real prompts).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import LoadedModel, load_model
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest

# Third-party packages installed with the project from PyPI: evaluation data, never trained on.
THIRD_PARTY_PACKAGES = ("pygls", "lsprotocol", "attrs", "cattrs", "tqdm", "pathspec", "packaging")


@dataclass(frozen=True, kw_only=True)
class Case:
    path: str
    text: str  # the file with the target line's content removed
    line: int
    column: int
    target: str
    # Where code follows the cursor (bench quality --cursor call): the real line from the
    # cursor to its end, which the line after accepting the answer is scored against.
    line_rest: str = ""


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein distance / longer length (1.0 for two empty strings)."""
    if not a and not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1.0 - previous[-1] / max(len(a), len(b))


def is_target_line(line: str) -> bool:
    content = line.strip()
    return len(content) >= 4 and not content.startswith(("#", '"""', "'''"))


def sample_cases(files: list[Path], count: int, seed: int) -> list[Case]:
    rng = random.Random(seed)
    candidates: list[tuple[Path, int]] = []
    texts: dict[Path, list[str]] = {}
    for path in files:
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError):
            continue
        texts[path] = lines
        candidates += [(path, i) for i in range(20, len(lines)) if is_target_line(lines[i])]
    cases = []
    for path, i in rng.sample(candidates, min(count, len(candidates))):
        lines = list(texts[path])
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        target = lines[i].strip()
        lines[i] = indent
        cases.append(
            Case(path=str(path), text="\n".join(lines), line=i, column=len(indent), target=target)
        )
    return cases


def held_out_stdlib_files(loaded: LoadedModel) -> list[Path]:
    """The stdlib files the embedded model held out for validation (recorded at training)."""
    corpus = Path(loaded.source) / "corpus.json"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    if not corpus.is_file():
        return []
    relpaths = json.loads(corpus.read_text())["val_relpaths"]
    prefix = stdlib.name + "/"
    return [stdlib / r.removeprefix(prefix) for r in relpaths if r.startswith(prefix)]


def third_party_files() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    files: list[Path] = []
    for package in THIRD_PARTY_PACKAGES:
        files += sorted((site / package).rglob("*.py"))
    return [f for f in files if f.stat().st_size > 2000]


def predict(
    engine: LocalBackend, cases: list[Case], with_suffix: bool, plain: bool = True
) -> list[str]:
    out = []
    for case in cases:
        text = case.text
        if not with_suffix:
            text = "\n".join(text.split("\n")[: case.line + 1])
        request = CompletionRequest(
            text=text,
            line=case.line,
            column=case.column,
            max_new_tokens=48,
            budget_tokens=1024,
            multiline="never",
            mid_word="complete",
            plain=plain,
        )
        out.append(engine.complete(request).text.strip())
    return out


def score(cases: list[Case], predictions: list[str]) -> dict:
    exact = [p == c.target for p, c in zip(predictions, cases, strict=True)]
    similarity = [edit_similarity(p, c.target) for p, c in zip(predictions, cases, strict=True)]
    return {
        "cases": len(cases),
        "exact_match": round(100 * sum(exact) / max(1, len(exact)), 1),
        "edit_similarity": round(100 * statistics.fmean(similarity or [0.0]), 1),
    }


def evaluate(
    engine: LocalBackend, cases: list[Case], with_suffix: bool, speculative: bool = False
) -> dict:
    plain = predict(engine, cases, with_suffix)
    report = score(cases, plain)
    if speculative:
        fast = predict(engine, cases, with_suffix, plain=False)
        report["speculative"] = score(cases, fast)
        same = sum(a == b for a, b in zip(plain, fast, strict=True))
        report["identical_to_plain"] = round(same / max(1, len(cases)), 4)
    return report


def measure_speed(loaded: LoadedModel, prompt_tokens: int, new_tokens: int, runs: int) -> dict:
    """Time to first token and decode speed with plain greedy decoding."""
    source = (Path(sysconfig.get_paths()["stdlib"]) / "argparse.py").read_text()
    ids = loaded.tokenizer.encode(source, add_special_tokens=False)[:prompt_tokens]
    ttft, rates = [], []
    for _ in range(runs):
        gen = greedy_generate(loaded.model, ids, StopRules(max_new_tokens=new_tokens))
        per_token = gen.decode_ms / max(1, len(gen.tokens) - 1)
        ttft.append(gen.prefill_ms)
        rates.append(1000.0 / per_token)
    return {
        "prompt_tokens": len(ids),
        "time_to_first_token_ms": round(statistics.median(ttft), 1),
        "decode_tokens_per_s": round(statistics.median(rates), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memosight bench model", description=__doc__)
    parser.add_argument("--model", help="model folder or .gguf file (default: the embedded model)")
    parser.add_argument("--dtype", default="auto", help="auto, float32, bfloat16")
    parser.add_argument("--quantization", default="auto", help="auto, none, int8, int4, gguf")
    parser.add_argument(
        "--speculative", action="store_true", help="also decode speculatively and compare"
    )
    parser.add_argument("--cases", type=int, default=100, help="cases per corpus")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    loaded = load_model(
        args.model,
        device="cpu",
        dtype=args.dtype,
        quantization=args.quantization,
        allow_pickle=True,  # a folder the user named on the command line
    )
    load_s = time.perf_counter() - started
    engine = LocalBackend(loaded)
    corpora = {"stdlib_held_out": held_out_stdlib_files(loaded), "third_party": third_party_files()}
    quality = {}
    for name, files in corpora.items():
        if not files:
            continue
        cases = sample_cases(files, args.cases, args.seed)
        quality[name] = {
            "files": len(files),
            "with_suffix_fim": evaluate(engine, cases, True, args.speculative),
            "prefix_only": evaluate(engine, cases, False, args.speculative),
        }
    report = {
        "model": loaded.describe(),
        "load_seconds": round(load_s, 2),
        "next_line": quality,
        "speed": measure_speed(loaded, prompt_tokens=1000, new_tokens=64, runs=3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    text = json.dumps(report, indent=2)
    sys.stdout.write(text + "\n")
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0
