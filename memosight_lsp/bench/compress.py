"""KV compression vs prefix truncation on long prompts, plus a needle test.

memosight bench compress [--model PATH] [--samples N] [--needles N] [--ratios 1,2,4,8]
                         [--min-tokens N] [--max-tokens N] [--out DIR] [--threads N]

Cases are cut (seeded) from long Python files of third-party packages installed next to
memosight (pygls, lsprotocol, transformers, ...): evaluation data, never training data. Each
prompt is the file up to the start of a non-trivial line (2k-8k tokens, capped by the model's
context), and the model completes that line greedily. For every ratio r it is completed:
  - snapkv:   full prefill, then the KV cache compressed to 1/r of the prompt (lossy-snapkv)
  - truncate: only the last 1/r of the prompt tokens (the same KV budget)
  - summarize: the same budget, half of it the lines right above the cursor and the rest the
    code above them compressed by top-level block (full -> signatures -> dropped, least
    relevant first: context/far_prefix.py)
and reports next-line exact match, edit similarity, the true line's negative log-likelihood
under each cache (nats/token, teacher-forced: a quality measure that still moves when a weak
model's exact match is 0 everywhere) and the share of its tokens that are the model's top
choice (token-level exact match), prefill ms, ms per token and KV bytes.
The needle test puts a uniquely named function far above the cursor and ends the prompt at a
call of it (`x = <first part of the name>`); it reports how often each method keeps the name's
positions (for snapkv: the share of layer/head slots keeping them; for truncate and summarize:
whether the prompt still holds the definition) and how often the completed line spells it.
Prints JSON; with --out also writes summary.json and plots there.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from memosight_lsp.context.far_prefix import NEAR_SHARE, compress_prefix
from memosight_lsp.context.tokens import TokenCounter
from memosight_lsp.inference.compressed_decode import CompressedDraftDecoder, decode_greedy, feed
from memosight_lsp.inference.decoder import Generation, StopRules
from memosight_lsp.inference.kv_cache import new_cache
from memosight_lsp.inference.kv_compress import (
    QueryCapture,
    SnapKVConfig,
    compress,
    kept_fraction,
    unsupported_reason,
)
from memosight_lsp.inference.loading import LoadedModel, ModelLoadError, load_model, position_limit
from memosight_lsp.inference.prefix_cache import cache_bytes

if TYPE_CHECKING:
    from memosight_lsp.inference.kv_cache import Cache

# Installed third-party packages are held-out code: the default model is trained on the CPython
# standard library and a few named registry packages only, never on site-packages (MODEL.md).
HELD_OUT_PACKAGES = ("pygls", "lsprotocol", "transformers", "tqdm", "click", "jinja2", "_pytest")
MAX_NEW_TOKENS = 32
WORDS = (
    "amber", "basil", "cedar", "delta", "ember", "fjord", "gamut", "harbor", "iris", "juniper",
    "kelp", "lumen", "maple", "nectar", "onyx", "prism", "quartz", "raven", "sable", "tundra",
)  # fmt: skip


def source_files(min_chars: int) -> list[Path]:
    files: list[Path] = []
    for name in HELD_OUT_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(folder).rglob("*.py")):
                if path.stat().st_size >= min_chars and "/tests/" not in path.as_posix():
                    files.append(path)
    return files


def edit_similarity(a: str, b: str) -> float:
    """1 - Levenshtein distance / longer length."""
    if not a and not b:
        return 1.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return 1.0 - previous[-1] / max(len(a), len(b))


def make_cases(loaded: LoadedModel, count: int, low: int, high: int, seed: int) -> list[dict]:
    """Prompts ending at the start of a line (after its indentation) and the line to complete."""
    rng = random.Random(seed)
    tokenizer = loaded.tokenizer
    files = source_files(min_chars=low * 3)
    rng.shuffle(files)
    cases: list[dict] = []
    for path in files:
        if len(cases) >= count:
            break
        text = path.read_text(errors="replace")
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) < low + 50:
            continue
        # Candidate lines: non-trivial code lines whose start lies within [low, high] tokens.
        lines = text.splitlines(keepends=True)
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line))
        chars_per_token = len(text) / len(ids)
        candidates = [
            i
            for i, line in enumerate(lines)
            if len(line.strip()) >= 12
            and not line.strip().startswith(("#", '"""', "'''"))
            and low * chars_per_token * 1.1 <= offsets[i] <= high * chars_per_token * 0.9
        ]
        if not candidates:
            continue
        i = rng.choice(candidates)
        # End at the previous line's end: the model writes the newline and indentation itself
        # (ending inside the indentation splits a whitespace token the model never saw split).
        prompt = text[: offsets[i] - 1]
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=True)
        if not low <= len(prompt_ids) <= high:
            continue
        cases.append(
            {
                "file": f"{path.parent.name}/{path.name}",
                "text": prompt,
                "prompt_ids": prompt_ids,
                "target": lines[i].strip(),
                "target_ids": continuation_ids(tokenizer, prompt, "\n" + lines[i].rstrip("\n")),
                "next_line": True,
            }
        )
    return cases


def continuation_ids(tokenizer: Any, prompt: str, continuation: str) -> list[int] | None:
    """The true continuation's token ids as the model would see them after the prompt (None
    when the prompt's own tokens change once the continuation follows)."""
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=True)
    joint = tokenizer.encode(prompt + continuation, add_special_tokens=True)
    if joint[: len(prompt_ids)] != prompt_ids or len(joint) == len(prompt_ids):
        return None
    return joint[len(prompt_ids) :]


def target_fit(
    model: Any,
    first_logits: torch.Tensor,
    target_ids: list[int] | None,
    cache: Cache,
    position: int,
    *,
    uniform: bool = True,
) -> dict[str, float]:
    """How well the cache supports the true continuation, teacher forced: its mean negative
    log-likelihood (`targetNll`, nats per token) and the share of its tokens that are the
    model's top choice (`targetTokenAccuracy`: token-level exact match). Both move where a weak
    model's line-level exact match is 0 everywhere. The cache is left as it was; {} without a
    target."""
    if not target_ids:
        return {}
    rows = [first_logits[None]]
    if len(target_ids) > 1:
        rows.append(feed(model, target_ids[:-1], cache, position, uniform=uniform))
        cache.crop(-(len(target_ids) - 1))
    log_probs = torch.log_softmax(torch.cat(rows).float(), dim=-1)
    wanted = torch.tensor(target_ids)
    picked = log_probs[torch.arange(len(target_ids)), wanted]
    top = log_probs.argmax(dim=-1)
    return {
        "targetNll": float(-picked.mean()),
        "targetTokenAccuracy": float((top == wanted).float().mean()),
    }


def make_needles(loaded: LoadedModel, count: int, low: int, high: int, seed: int) -> list[dict]:
    """A unique function defined far above the cursor; the prompt ends at a call of it."""
    rng = random.Random(seed + 1)
    tokenizer = loaded.tokenizer
    files = source_files(min_chars=high * 4)
    cases: list[dict] = []
    for n in range(count):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{rng.choice(WORDS)}_{n}"
        definition = f"def {name}(payload, retries=3):\n    return payload * retries\n\n\n"
        filler_text = rng.choice(files).read_text(errors="replace")
        filler_ids = tokenizer.encode(filler_text, add_special_tokens=False)
        length = rng.randint(low, min(high - 64, len(filler_ids)))
        depth = rng.uniform(0.05, 0.6)  # where the definition sits, as a share of the prompt
        before = tokenizer.decode(filler_ids[: int(length * depth)])
        before = before[: before.rfind("\n") + 1]
        after = tokenizer.decode(filler_ids[int(length * depth) : length])
        after = after[: after.rfind("\n") + 1]
        hint = name.split("_")[0]
        tail = f"\n\ndef use_it(data):\n    value = {hint}"
        head = before + "def "
        prompt = before + definition + after + tail
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=True)
        start = len(tokenizer.encode(head, add_special_tokens=True))
        end = len(tokenizer.encode(head + name, add_special_tokens=True))
        cases.append(
            {
                "text": prompt,
                "prompt_ids": prompt_ids,
                "target": name[len(hint) :] + "(",
                "target_ids": continuation_ids(tokenizer, prompt, name[len(hint) :] + "("),
                "name": name,
                "needle_positions": list(range(start - 1, end)),
            }
        )
    return cases


def completed_line(text: str, next_line: bool) -> str | None:
    """The completed line once it is finished (None while it is not): the rest of the cursor's
    line, or for next-line cases the first non-blank line after the first newline."""
    lines = text.split("\n")
    if not next_line:
        return lines[0].strip() if len(lines) > 1 else None
    for line in lines[1:-1]:
        if line.strip():
            return line.strip()
    return None


def stop_rule(loaded: LoadedModel, next_line: bool):
    def should_stop(tokens) -> bool:
        return completed_line(loaded.tokenizer.decode(list(tokens)), next_line) is not None

    return should_stop


def output_line(loaded: LoadedModel, tokens: list[int], next_line: bool) -> str:
    text = loaded.tokenizer.decode(tokens) + "\n"
    return completed_line(text, next_line) or ""


def row(method: str, ratio: float, gen: Generation, line: str, target: str, kv: int) -> dict:
    # Decode time over generated tokens (speculative passes make passes != tokens).
    per_token = gen.decode_ms / max(len(gen.tokens), 1)
    return {
        "method": method,
        "ratio": ratio,
        "exact": float(line == target),
        "editSimilarity": edit_similarity(line, target),
        "prefillMs": gen.prefill_ms,
        "msPerToken": per_token,
        "kvBytes": kv,
        "tokens": len(gen.tokens),
        "output": line,
    }


@torch.inference_mode()
def run_case(
    loaded: LoadedModel,
    case: dict,
    ratios: list[float],
    snapkv: SnapKVConfig,
    lossless_ratio: float = 0,
    near_share: float = NEAR_SHARE,
) -> list[dict]:
    """Every method at every ratio on one case (`snapkv` gives all but the ratio)."""
    model = loaded.model
    prompt = case["prompt_ids"]
    target = case["target"]
    next_line = bool(case.get("next_line"))
    rules = StopRules(
        max_new_tokens=MAX_NEW_TOKENS,
        stop_token_ids=loaded.stop_token_ids,
        should_stop=stop_rule(loaded, next_line),
    )
    rows: list[dict] = []
    # One full prefill (queries captured) serves every snapkv ratio; each ratio adds its own
    # compression time to the prefill time it reports.
    started = time.perf_counter()
    full = new_cache(model)
    with QueryCapture(model, snapkv.window) as capture:
        logits = feed(model, prompt, full, 0, last_only=True)[-1]
    prefill_ms = (time.perf_counter() - started) * 1000
    needle = case.get("needle_positions")
    target_ids = case.get("target_ids")
    for ratio in ratios:
        if ratio == 1:
            continue
        # snapkv
        t0 = time.perf_counter()
        config = dataclasses.replace(snapkv, ratio=ratio)
        compressed = compress(model, full, capture, len(prompt), config)
        fit = target_fit(
            model, logits, target_ids, compressed.cache, len(prompt), uniform=compressed.uniform
        )
        gen = Generation(tokens=[], prompt_tokens=len(prompt), forward_passes=1)
        gen.prefill_ms = prefill_ms + (time.perf_counter() - t0) * 1000
        t1 = time.perf_counter()
        decode_greedy(model, logits, compressed.cache, len(prompt), rules, gen)
        gen.decode_ms = (time.perf_counter() - t1) * 1000
        kv = cache_bytes(compressed.cache)
        out = row("snapkv", ratio, gen, output_line(loaded, gen.tokens, next_line), target, kv)
        out["needleKept"] = kept_fraction(compressed, needle) if needle else None
        out.update(fit)
        rows.append(out)
        del compressed
        # truncate to the same number of positions, and summarize the far part into them
        # (the same forward as the other methods, so times compare)
        keep = max(1, round(len(prompt) / ratio))
        t0 = time.perf_counter()
        out = _decode_short("truncate", ratio, prompt[-keep:], loaded, case, rules, t0)
        out["needleKept"] = float(min(needle) >= len(prompt) - keep) if needle else None
        rows.append(out)
        text = case.get("text")
        if text is not None:
            t0 = time.perf_counter()
            counter = _counter(loaded.tokenizer)
            summary = compress_prefix(text, keep, counter, near_share)
            ids = loaded.tokenizer.encode(summary, add_special_tokens=True)
            out = _decode_short("summarize", ratio, ids, loaded, case, rules, t0)
            out["needleKept"] = float(f"def {case['name']}(" in summary) if needle else None
            rows.append(out)
    # Uncompressed last: decoding appends to the full cache the ratios above compressed.
    full_fit = target_fit(model, logits, target_ids, full, len(prompt))
    gen = Generation(tokens=[], prompt_tokens=len(prompt), forward_passes=1, prefill_ms=prefill_ms)
    kv = cache_bytes(full)
    t1 = time.perf_counter()
    decode_greedy(model, logits, full, len(prompt), rules, gen)
    gen.decode_ms = (time.perf_counter() - t1) * 1000
    out = row("full", 1, gen, output_line(loaded, gen.tokens, next_line), target, kv)
    out["needleKept"] = 1.0 if needle else None
    out.update(full_fit)
    rows.append(out)
    if lossless_ratio:
        # Lossless: drafts on the compressed cache, verified on the full one (same output).
        decoder = CompressedDraftDecoder(config=dataclasses.replace(snapkv, ratio=lossless_ratio))
        draft = decoder(model, prompt, rules)
        line = output_line(loaded, draft.tokens, next_line)
        lossless = row("lossless-draft", lossless_ratio, draft, line, target, cache_bytes(full))
        lossless["identical"] = float(draft.tokens == gen.tokens)
        lossless["accepted"] = draft.stats["acceptedDraftTokens"] / max(
            draft.stats["draftedTokens"], 1
        )
        rows.append(lossless)
    return rows


def _decode_short(
    method: str,
    ratio: float,
    ids: list[int],
    loaded: LoadedModel,
    case: dict,
    rules: StopRules,
    started: float,
) -> dict:
    """Prefill `ids` (a shortened prompt) on a fresh cache and complete the line; prefill time
    counts from `started` (so it includes building the shortened prompt)."""
    model = loaded.model
    next_line = bool(case.get("next_line"))
    cache = new_cache(model)
    logits = feed(model, ids, cache, 0, last_only=True)[-1]
    gen = Generation(tokens=[], prompt_tokens=len(ids), forward_passes=1)
    gen.prefill_ms = (time.perf_counter() - started) * 1000
    fit = target_fit(model, logits, case.get("target_ids"), cache, len(ids))
    t1 = time.perf_counter()
    decode_greedy(model, logits, cache, len(ids), rules, gen)
    gen.decode_ms = (time.perf_counter() - t1) * 1000
    kv = cache_bytes(cache) * len(ids) // max(cache.get_seq_length(), 1)  # the prompt's share
    out = row(method, ratio, gen, output_line(loaded, gen.tokens, next_line), case["target"], kv)
    out.update(fit)
    return out


_counters: dict[int, TokenCounter] = {}


def _counter(tokenizer: Any) -> TokenCounter:
    """One memoising token counter per tokenizer (lines repeat across ratios and cases)."""
    if id(tokenizer) not in _counters:
        _counters[id(tokenizer)] = TokenCounter(
            lambda text: len(tokenizer.encode(text, add_special_tokens=False))
        )
    return _counters[id(tokenizer)]


def summarise(rows: list[dict], keys: tuple[str, ...]) -> dict:
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(f"{r['method']}@{r['ratio']:g}x", []).append(r)
    out = {}
    for name, members in sorted(groups.items(), key=lambda kv: (kv[1][0]["ratio"], kv[0])):
        out[name] = {"method": members[0]["method"], "ratio": members[0]["ratio"]}
        out[name]["n"] = len(members)
        for key in keys:
            values = [m[key] for m in members if m.get(key) is not None]
            if values:
                out[name][key] = round(statistics.fmean(values), 4)
        if "prefillMs" in out[name] and "msPerToken" in out[name]:
            # What a 32-token completion would cost: where compression pays for latency.
            cost = out[name]["prefillMs"] + 32 * out[name]["msPerToken"]
            out[name]["ms32Tokens"] = round(cost, 1)
    return out


STYLES = (("snapkv", "o-"), ("truncate", "s--"), ("summarize", "d-."), ("lossless-draft", "^:"))


def plot(summary: dict, needle: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    panels = (
        ("exact", summary, "next-line exact match"),
        ("editSimilarity", summary, "edit similarity"),
        ("targetNll", summary, "true next line: nats/token (lower is better)"),
        ("targetTokenAccuracy", summary, "true next line: tokens ranked first"),
        ("msPerToken", summary, "ms per generated token"),
        ("needleKept", needle, "needle kept"),
    )
    for ax, (key, table, title) in zip(axes.flat, panels, strict=False):
        styles = (
            ("snapkv", "o-"),
            ("truncate", "s--"),
            ("summarize", "d-."),
            ("lossless-draft", "^:"),
        )
        for method, style in styles:
            points = sorted(
                (v["ratio"], v[key])
                for name, v in table.items()
                if key in v and (name.startswith(method) or name.startswith("full"))
            )
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], style, label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("KV compression ratio")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "compress.png", dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memosight bench compress", description=__doc__)
    parser.add_argument("--model", help="model folder (default: the embedded model)")
    parser.add_argument("--samples", type=int, default=30, help="next-line cases")
    parser.add_argument("--needles", type=int, default=10, help="needle cases")
    parser.add_argument("--ratios", default="1,2,4,8", help="comma-separated KV ratios")
    parser.add_argument("--min-tokens", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=8192, help="capped by the model")
    parser.add_argument("--window", type=int, default=32, help="SnapKV observation window")
    parser.add_argument(
        "--recent-share",
        type=float,
        default=0.0,
        help="SnapKV: share of the budget kept as the last prompt tokens (default 0: --window)",
    )
    parser.add_argument(
        "--lossless-ratio", type=float, default=4.0, help="also time lossless-draft (0: skip)"
    )
    parser.add_argument(
        "--near-share",
        type=float,
        default=NEAR_SHARE,
        help="summarize: share of the budget kept verbatim above the cursor",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--out", type=Path, help="write summary.json and compress.png here")
    args = parser.parse_args(argv)
    try:
        ratios = sorted({float(r) for r in args.ratios.split(",")} | {1.0})
    except ValueError:
        parser.error(f"--ratios must be numbers, got {args.ratios!r}")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        loaded = load_model(args.model, device="cpu", allow_pickle=True)
    except ModelLoadError as err:
        sys.stderr.write(f"memosight bench compress: {err}\n")
        return 2
    reason = unsupported_reason(loaded.model)
    if reason:
        sys.stderr.write(f"memosight bench compress: {reason}\n")
        return 2
    context = position_limit(loaded.model.config) or 4096
    high = min(args.max_tokens, context - MAX_NEW_TOKENS - 1)
    low = min(args.min_tokens, high // 2)
    if args.window < 1 or not 0.0 <= args.recent_share < 1.0 or not 0.0 < args.near_share <= 1.0:
        parser.error("--window must be positive, --recent-share in [0, 1), --near-share in (0, 1]")
    snapkv = SnapKVConfig(window=args.window, recent=args.window, recent_share=args.recent_share)
    cases = make_cases(loaded, args.samples, low, high, args.seed)
    needles = make_needles(loaded, args.needles, low, high, args.seed)
    quality = ("exact", "editSimilarity", "targetNll", "targetTokenAccuracy")
    keys = (*quality, "prefillMs", "msPerToken", "kvBytes")
    rows: list[dict] = []
    needle_rows: list[dict] = []
    for i, case in enumerate(cases, 1):
        rows += run_case(loaded, case, ratios, snapkv, args.lossless_ratio, args.near_share)
        sys.stderr.write(f"\rcases {i}/{len(cases)}")
    for i, case in enumerate(needles, 1):
        sys.stderr.write(f"\rneedles {i}/{len(needles)}")
        for r in run_case(loaded, case, ratios, snapkv, near_share=args.near_share):
            r["spelled"] = float(r["output"].startswith(case["target"]))
            needle_rows.append(r)
    sys.stderr.write("\n")
    summary = summarise(rows, (*keys, "identical", "accepted"))
    needle = summarise(
        needle_rows,
        ("needleKept", "spelled", "editSimilarity", "targetNll", "targetTokenAccuracy"),
    )
    result: dict[str, Any] = {
        "model": loaded.name,
        "modelContext": context,
        "promptTokens": {
            "min": min((len(c["prompt_ids"]) for c in cases), default=0),
            "max": max((len(c["prompt_ids"]) for c in cases), default=0),
            "mean": round(statistics.fmean(len(c["prompt_ids"]) for c in cases)) if cases else 0,
        },
        "samples": len(cases),
        "needles": len(needles),
        "threads": torch.get_num_threads(),
        "settings": {
            "window": snapkv.window,
            "recentShare": snapkv.recent_share,
            "nearShare": args.near_share,
        },
        "nextLine": summary,
        "needle": needle,
    }
    text = json.dumps(result, indent=2)
    sys.stdout.write(text + "\n")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "summary.json").write_text(text + "\n")
        (args.out / "rows.json").write_text(json.dumps(rows + needle_rows, indent=1) + "\n")
        plot(summary, needle, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
