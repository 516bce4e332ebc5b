"""Decoding speed: transformers generate vs plain greedy vs speculative decoding, same prompts.

memosight bench speed [--model PATH|FILE.gguf] [--dtype D] [--quantization Q] [--files F ...]
                      [--samples N] [--max-new-tokens N] [--repeats N] [--no-hf]
                      [--llama-server URL] [--json] [--plot OUT.png]

Cursor positions are sampled (seeded) from held-out code that is not training data (by default,
Python files of third-party packages installed next to memosight: pygls, lsprotocol, tqdm,
click, attrs, cattrs, jinja2, packaging, pathspec). Prompts are built by the completion pipeline
(FIM when the model has it). Each prompt is completed three ways; the JSON has per-sample and
median tokens/s, speed-ups, whether the outputs are identical, accepted tokens per forward pass,
which draft source supplied the accepted tokens, time to first token cold vs after a
one-character edit on a long prompt, and peak memory. With --repeats N every path is timed N
times per sample, the paths taking turns, and the fastest run of each is reported.

The precision is the server's by default (`auto`: measured once per model and machine, e.g.
int4 weights on a CPU with AVX-512 VNNI); the summary says which one ran (`precision`).
`--dtype float32 --quantization none` is the lossless reference.

--llama-server URL sends the very same prompt token ids to a llama.cpp server holding the same
weights (`/completion`, greedy, `cache_prompt` off so each prompt is prefilled as here) and
reports its prefill and decode rates beside ours, per sample and as medians. --no-hf leaves out
transformers' generate (slow on real models; the speed-ups vs greedy do not need it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import resource
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import LoadedModel, ModelLoadError, load_model
from memosight_lsp.inference.memory import release_free_memory
from memosight_lsp.inference.speculative import SpeculativeDecoder, default_sources
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest

from .llama_server import LlamaServer, LlamaServerError

# Installed third-party packages are held-out code: the default model is trained on the CPython
# standard library and a few named registry packages only, never on site-packages (MODEL.md).
HELD_OUT_PACKAGES = (
    "pygls",
    "lsprotocol",
    "tqdm",
    "click",
    "attr",
    "cattrs",
    "jinja2",
    "packaging",
    "pathspec",
)
MIN_FILE_CHARS = 2000
TTFT_PROMPT_TOKENS = 2000


def default_files() -> list[Path]:
    files: list[Path] = []
    for name in HELD_OUT_PACKAGES:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            for path in sorted(Path(folder).rglob("*.py")):
                if path.stat().st_size >= MIN_FILE_CHARS and "/tests/" not in path.as_posix():
                    files.append(path)
    return files


def sample_prompts(
    engine: LocalBackend, files: list[Path], count: int, budget: int, seed: int
) -> list[dict[str, Any]]:
    """Cursor positions at line starts or after punctuation, so no token healing is involved."""
    rng = random.Random(seed)
    texts = {f: f.read_text(encoding="utf-8", errors="replace") for f in files}
    out: list[dict[str, Any]] = []
    attempts = 0
    while len(out) < count and attempts < count * 20:
        attempts += 1
        path = rng.choice(files)
        lines = texts[path].splitlines()
        if len(lines) < 10:
            continue
        line = rng.randrange(5, len(lines))
        spots = [0] + [i + 1 for i, ch in enumerate(lines[line]) if ch in "(.,=[:"]
        column = rng.choice(spots)
        request = CompletionRequest(
            text=texts[path], line=line, column=column, budget_tokens=budget, mid_word="complete"
        )
        prompt = engine.prepare(request)
        if prompt.healed:
            continue
        ids = engine.loaded.tokenizer.encode(prompt.text, add_special_tokens=True)
        out.append({"file": str(path), "line": line, "column": column, "ids": ids})
    return out


def hf_generate(loaded: LoadedModel, ids: list[int], max_new: int) -> list[int]:
    eos = sorted(loaded.stop_token_ids) or None
    with torch.inference_mode():
        out = loaded.model.generate(
            torch.tensor([ids], device=loaded.device),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=loaded.device),
            do_sample=False,
            max_new_tokens=max_new,
            eos_token_id=eos,
            pad_token_id=eos[0] if eos else 0,
        )
    new = out[0, len(ids) :].tolist()
    for i, token in enumerate(new):
        if token in loaded.stop_token_ids:
            return new[:i]
    return new


def timed(fn, *args, **kwargs) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn(*args, **kwargs)
    seconds = time.perf_counter() - started
    release_free_memory()  # between calls, as the server's model worker does when idle
    return value, seconds


def fastest(runs: dict[str, Any], repeats: int) -> dict[str, tuple[Any, float]]:
    """name -> (result, seconds) of the fastest of `repeats` calls of each run. The runs take
    turns, so a neighbour's busy spell slows them alike rather than one of them; each must give
    the same tokens every time."""
    best: dict[str, tuple[Any, float]] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            value, seconds = timed(run)
            if name not in best:
                best[name] = (value, seconds)
                continue
            first = best[name][0]
            if getattr(value, "tokens", value) != getattr(first, "tokens", first):
                raise AssertionError(f"{name} gave different tokens on a repeat")
            if seconds < best[name][1]:
                best[name] = (value, seconds)
    return best


def run_samples(
    loaded: LoadedModel,
    prompts: list[dict],
    max_new: int,
    decoder: SpeculativeDecoder,
    repeats: int = 1,
    *,
    with_hf: bool = True,
) -> list[dict[str, Any]]:
    rules = StopRules(max_new_tokens=max_new, stop_token_ids=loaded.stop_token_ids)
    model = loaded.model
    warm = prompts[0]["ids"]
    if with_hf:
        hf_generate(loaded, warm, 4)
    greedy_generate(model, warm, rules)
    decoder(model, warm, rules)
    rows = []
    for i, sample in enumerate(prompts):
        ids = sample["ids"]
        runs: dict[str, Callable[[], Any]] = {
            "greedy": partial(greedy_generate, model, ids, rules),
            "speculative": partial(decoder, model, ids, rules),
        }
        if with_hf:
            runs["hf"] = partial(hf_generate, loaded, ids, max_new)
            runs["hfFirst"] = partial(hf_generate, loaded, ids, 1)  # its prefill + one token
        timings = fastest(runs, repeats)
        (plain, t_plain), (fast, t_fast) = timings["greedy"], timings["speculative"]
        (hf, t_hf), (_, t_hf_first) = (
            timings.get("hf", ([], 0.0)),
            timings.get("hfFirst", ([], 0.0)),
        )
        n = len(plain.tokens)
        rows.append(
            {
                "sample": i,
                "file": sample["file"],
                "line": sample["line"],
                "column": sample["column"],
                "promptTokens": len(ids),
                "newTokens": n,
                "hfTokensPerS": len(hf) / t_hf if t_hf else 0.0,
                "greedyTokensPerS": n / t_plain if t_plain else 0.0,
                "speculativeTokensPerS": len(fast.tokens) / t_fast if t_fast else 0.0,
                "hfMs": t_hf * 1000,
                "greedyMs": t_plain * 1000,
                "speculativeMs": t_fast * 1000,
                "speedupVsHf": t_hf / t_fast if t_fast else 0.0,
                # After the first token: prefill is the same work on every path.
                "hfDecodeMs": max(t_hf - t_hf_first, 1e-6) * 1000,
                "speculativeDecodeMs": fast.decode_ms,
                "decodeSpeedupVsHf": (t_hf - t_hf_first) * 1000 / max(fast.decode_ms, 1e-3),
                "prefillMs": fast.prefill_ms,
                "prefillTokensPerS": len(ids) / (fast.prefill_ms / 1000)
                if fast.prefill_ms
                else 0.0,
                "greedyDecodeTokensPerS": _decode_rate(plain),
                "speculativeDecodeTokensPerS": _decode_rate(fast),
                "speedupVsGreedy": t_plain / t_fast if t_fast else 0.0,
                "identical": fast.tokens == plain.tokens,
                "greedyMatchesHf": hf == plain.tokens if with_hf else None,
                "tokensPerPass": fast.stats.get("tokensPerPass", 0.0),
                "acceptedBySource": fast.stats.get("acceptedBySource", {}),
            }
        )
        print_progress(i + 1, len(prompts))
    return rows


def _decode_rate(generation: Any) -> float:
    """Tokens per second after the first token (the prefill pass makes the first one)."""
    after_first = len(generation.tokens) - 1
    return after_first / (generation.decode_ms / 1000) if generation.decode_ms > 0 else 0.0


def llama_server_rows(
    server: LlamaServer, prompts: list[dict], rows: list[dict], max_new: int
) -> dict[str, Any]:
    """The same prompt ids through llama.cpp's server, greedy; its own prefill/decode timings.
    Adds per-sample fields to `rows` and returns medians and our ratios against it."""
    server.complete(prompts[0]["ids"], 4, cache_prompt=False)  # warm-up
    for sample, row in zip(prompts, rows, strict=True):
        got = server.complete(sample["ids"], max_new, cache_prompt=False)
        decode = (got.predicted - 1) / (got.decode_ms / 1000) if got.decode_ms else 0.0
        row["llamaPrefillTokensPerS"] = (
            got.prompt_tokens / (got.prompt_ms / 1000) if got.prompt_ms else 0.0
        )
        row["llamaDecodeTokensPerS"] = decode
        row["llamaTokensPerS"] = got.predicted / ((got.prompt_ms + got.decode_ms) / 1000)
        row["llamaNewTokens"] = got.predicted
        row["speculativeVsLlamaDecode"] = (
            row["speculativeDecodeTokensPerS"] / decode if decode else 0.0
        )
        row["speculativeVsLlama"] = (
            row["speculativeTokensPerS"] / row["llamaTokensPerS"] if row["llamaTokensPerS"] else 0.0
        )
    props = server.props()

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    return {
        "url": server.url,
        "model": props.get("model_path"),
        "medianPrefillTokensPerS": median("llamaPrefillTokensPerS"),
        "medianDecodeTokensPerS": median("llamaDecodeTokensPerS"),
        "medianTokensPerS": median("llamaTokensPerS"),
        "medianSpeculativeVsLlamaDecode": median("speculativeVsLlamaDecode"),
        "medianSpeculativeVsLlama": median("speculativeVsLlama"),
    }


def ablation(
    loaded: LoadedModel,
    prompts: list[dict],
    rows: list[dict],
    max_new: int,
    drafters: dict[str, Any],
) -> dict[str, Any]:
    """Median speed-up vs transformers generate with one draft source at a time (each that
    drafts in a one-off call and has what it needs for the model)."""
    rules = StopRules(max_new_tokens=max_new, stop_token_ids=loaded.stop_token_ids)
    out = {}
    for source in default_sources(**drafters):
        if not source.drafts_alone:
            continue
        decoder = SpeculativeDecoder(sources=[source])
        decoder(loaded.model, prompts[0]["ids"], rules)  # calibrate and warm up
        if source not in decoder.ready:
            continue
        speedups, per_pass = [], []
        for sample, row in zip(prompts, rows, strict=True):
            got, seconds = timed(decoder, loaded.model, sample["ids"], rules)
            speedups.append(row["hfMs"] / (seconds * 1000))
            per_pass.append(got.stats["tokensPerPass"])
        out[source.name] = {
            "medianSpeedupVsHf": round(statistics.median(speedups), 3),
            "meanTokensPerPass": round(statistics.mean(per_pass), 3),
        }
    return out


def typed_prefix(suggestion: str) -> str | None:
    """What a user types of a suggestion before asking again: up to its first punctuation mark
    (never ending inside a word or on a blank, so the prompt needs no token healing)."""
    first_line = suggestion.split("\n", 1)[0]
    for i, ch in enumerate(first_line[:40]):
        if i and ch in "(.,[:=)" and not first_line[: i + 1].endswith(" "):
            return first_line[: i + 1]
    return None


def type_through(
    loaded: LoadedModel,
    engine: LocalBackend,
    prompts: list[dict],
    rows: list[dict],
    max_new: int,
    budget: int,
    drafters: dict[str, Any],
    *,
    with_hf: bool = True,
) -> dict[str, Any]:
    """Ask, type the start of the suggestion, ask again in the same buffer: KV reuse and the
    previous suggestion both apply. Compared with a cold transformers generate on the new prompt
    (without it: with cold plain greedy decoding)."""
    rules = StopRules(max_new_tokens=max_new, stop_token_ids=loaded.stop_token_ids)
    decoder = SpeculativeDecoder(sources=default_sources(**drafters))
    decoder(loaded.model, prompts[0]["ids"], rules)  # calibrate and warm up
    tok = loaded.tokenizer
    speedups: list[float] = []
    identical: list[bool] = []
    reused: list[float] = []
    by_source: dict[str, int] = {}
    for i, sample in enumerate(prompts):
        buffer = f"bench://{i}"
        first = decoder(loaded.model, sample["ids"], rules, buffer_id=buffer)
        typed = typed_prefix(tok.decode(first.tokens))
        if not typed:
            continue
        text = Path(sample["file"]).read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        line = lines[sample["line"]]
        col = sample["column"]
        lines[sample["line"]] = line[:col] + typed + line[col:]
        request = CompletionRequest(
            text="\n".join(lines),
            line=sample["line"],
            column=col + len(typed),
            budget_tokens=budget,
            mid_word="complete",
        )
        prompt = engine.prepare(request)
        if prompt.healed:
            continue
        ids = tok.encode(prompt.text, add_special_tokens=True)
        if with_hf:
            _, t_cold = timed(hf_generate, loaded, ids, max_new)
        got, t_fast = timed(decoder, loaded.model, ids, rules, buffer_id=buffer)
        plain, t_plain = timed(greedy_generate, loaded.model, ids, rules)
        identical.append(got.tokens == plain.tokens)
        speedups.append((t_cold if with_hf else t_plain) / t_fast)
        reused.append(got.stats["reusedPromptTokens"] / len(ids))
        for source, count in got.stats["acceptedBySource"].items():
            by_source[source] = by_source.get(source, 0) + count
    if not speedups:
        return {"samples": 0}
    return {
        "samples": len(speedups),
        ("medianSpeedupVsHf" if with_hf else "medianSpeedupVsColdGreedy"): round(
            statistics.median(speedups), 3
        ),
        "identical": sum(identical) / len(identical),
        "medianReusedPromptShare": round(statistics.median(reused), 3),
        "acceptedDraftTokensBySource": by_source,
    }


def print_progress(done: int, total: int) -> None:
    sys.stderr.write(f"\rsamples {done}/{total}")
    if done == total:
        sys.stderr.write("\n")


def long_prompt(loaded: LoadedModel, files: list[Path], tokens: int) -> str:
    """About `tokens` tokens of held-out code, ending mid-file."""
    text = ""
    for path in files:
        text += path.read_text(encoding="utf-8", errors="replace")
        if len(loaded.tokenizer.encode(text)) > tokens:
            break
    ids = loaded.tokenizer.encode(text)[:tokens]
    return loaded.tokenizer.decode(ids)


def time_to_first_token(
    loaded: LoadedModel, files: list[Path], decoder: SpeculativeDecoder, repeats: int = 5
) -> dict[str, Any]:
    """One call with max_new_tokens=1: cold (no cached buffer) vs after typing one character."""
    text = long_prompt(loaded, files, TTFT_PROMPT_TOKENS)
    rules = StopRules(max_new_tokens=1, stop_token_ids=loaded.stop_token_ids)
    model, tok = loaded.model, loaded.tokenizer
    cold_ms, edit_ms, prefilled = [], [], []
    for i in range(repeats):
        decoder.forget("ttft")
        base = tok.encode(text + "x" * i)
        _, t_cold = timed(decoder, model, base, rules, buffer_id="ttft")
        edited = tok.encode(text + "x" * i + "(")
        out, t_edit = timed(decoder, model, edited, rules, buffer_id="ttft")
        cold_ms.append(t_cold * 1000)
        edit_ms.append(t_edit * 1000)
        prefilled.append(len(edited) - out.stats["reusedPromptTokens"])
    cold, edit = statistics.median(cold_ms), statistics.median(edit_ms)
    return {
        "promptTokens": len(tok.encode(text)),
        "coldMs": round(cold, 2),
        "afterEditMs": round(edit, 2),
        "speedup": round(cold / edit, 2) if edit else None,
        "tokensPrefilledAfterEdit": statistics.median(prefilled),
    }


def fim_edit_ttft(
    loaded: LoadedModel, files: list[Path], decoder: SpeculativeDecoder, repeats: int = 5
) -> dict[str, Any]:
    """The same through the completion pipeline: a FIM prompt (prefix and suffix around the
    cursor, 2,000-token budget), one character typed at the cursor. Everything after the cursor
    in the prompt (the suffix) has to be prefilled again."""
    path = max(files, key=lambda f: f.stat().st_size)
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    line = len(lines) // 2
    engine = LocalBackend(loaded, decoder=decoder)
    cold_ms: list[float] = []
    edit_ms: list[float] = []
    prefilled: list[int] = []
    prompt_tokens = 0
    for i in range(repeats):
        decoder.forget("fim")
        for typed in ("", "("):
            doc = lines[:]
            doc[line + i] = typed + doc[line + i]
            request = CompletionRequest(
                text="\n".join(doc),
                line=line + i,
                column=len(typed),
                max_new_tokens=1,
                budget_tokens=TTFT_PROMPT_TOKENS,
                mid_word="complete",
                buffer_id="fim",
            )
            done = engine.complete(request)
            (edit_ms if typed else cold_ms).append(done.total_ms)
            if typed:
                prefilled.append(done.prompt_tokens - done.stats.get("reusedPromptTokens", 0))
            prompt_tokens = done.prompt_tokens
    cold, edit = statistics.median(cold_ms), statistics.median(edit_ms)
    return {
        "file": str(path),
        "promptTokens": prompt_tokens,
        "coldMs": round(cold, 2),
        "afterEditMs": round(edit, 2),
        "speedup": round(cold / edit, 2) if edit else None,
        "tokensPrefilledAfterEdit": statistics.median(prefilled),
    }


def summarize(rows: list[dict]) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    # From the rows (the reported run of each sample), not the decoder's totals, which also
    # count the repeats of --repeats.
    sources: dict[str, int] = {}
    for row in rows:
        for source, count in row["acceptedBySource"].items():
            sources[source] = sources.get(source, 0) + count
    accepted = sum(sources.values())
    tokens = sum(r["newTokens"] for r in rows)
    return {
        "samples": len(rows),
        "medianHfTokensPerS": median("hfTokensPerS"),
        "medianGreedyTokensPerS": median("greedyTokensPerS"),
        "medianSpeculativeTokensPerS": median("speculativeTokensPerS"),
        "medianGreedyDecodeTokensPerS": median("greedyDecodeTokensPerS"),
        "medianSpeculativeDecodeTokensPerS": median("speculativeDecodeTokensPerS"),
        "medianPrefillTokensPerS": median("prefillTokensPerS"),
        "medianSpeedupVsHf": median("speedupVsHf"),
        "medianSpeedupVsGreedy": median("speedupVsGreedy"),
        "medianDecodeSpeedupVsHf": median("decodeSpeedupVsHf"),
        "medianPrefillMs": median("prefillMs"),
        "medianPromptTokens": median("promptTokens"),
        "totalSpeedupVsHf": round(
            sum(r["hfMs"] for r in rows) / sum(r["speculativeMs"] for r in rows), 3
        ),
        "totalSpeedupVsGreedy": round(
            sum(r["greedyMs"] for r in rows) / sum(r["speculativeMs"] for r in rows), 3
        ),
        "identical": sum(r["identical"] for r in rows) / len(rows),
        "greedyMatchesHf": (
            sum(r["greedyMatchesHf"] for r in rows) / len(rows)
            if rows[0]["greedyMatchesHf"] is not None
            else None
        ),
        "meanTokensPerPass": round(statistics.mean(r["tokensPerPass"] for r in rows), 3),
        "acceptedDraftTokensBySource": sources,
        "shareOfOutputBySource": {k: round(v / tokens, 3) for k, v in sources.items()}
        if tokens
        else {},
        "draftedShareOfOutput": round(accepted / tokens, 3) if tokens else 0.0,
    }


def plot(rows: list[dict], summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    hf = summary["greedyMatchesHf"] is not None
    key = "speedupVsHf" if hf else "speedupVsGreedy"
    against = "transformers generate" if hf else "plain greedy"
    order = sorted(rows, key=lambda r: r[key])
    left.bar(range(len(order)), [r[key] for r in order], color="tab:blue")
    left.axhline(1.0, color="grey", lw=1)
    median = statistics.median(r[key] for r in rows)
    left.axhline(median, color="tab:red", ls="--", label="median")
    left.set(xlabel="sample (sorted)", ylabel=f"speed-up vs {against}")
    left.legend()
    right.scatter([r["tokensPerPass"] for r in rows], [r[key] for r in rows], s=12)
    right.set(xlabel="tokens per forward pass", ylabel=f"speed-up vs {against}")
    fig.suptitle(f"identical outputs {summary['identical']:.0%}, median speed-up {median:.2f}x")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memosight bench speed", description=__doc__)
    parser.add_argument(
        "--model", default=None, help="model folder or .gguf file (default: the embedded one)"
    )
    parser.add_argument(
        "--dtype",
        default="auto",
        help="auto (default: what the server runs), float32 (with --quantization none: the "
        "lossless reference), bfloat16",
    )
    parser.add_argument(
        "--quantization", default="auto", help="auto (default), none, int8, int4, gguf"
    )
    parser.add_argument("--no-hf", action="store_true", help="leave out transformers generate")
    parser.add_argument(
        "--llama-server", metavar="URL", help="also run the prompts on this llama.cpp server"
    )
    parser.add_argument("--files", nargs="+", type=Path, help="held-out source files")
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--budget-tokens", type=int, default=1024, help="prompt context budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="time every path this many times per sample, taking turns, and keep the fastest",
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--no-heads", action="store_true", help="draft without the heads")
    parser.add_argument(
        "--no-ngrams", action="store_true", help="draft without the model's n-gram table"
    )
    parser.add_argument("--ablate", action="store_true", help="also time each source alone")
    parser.add_argument("--json", action="store_true", help="print the full JSON to stdout")
    parser.add_argument("--plot", type=Path, help="write a PNG of speed-up and acceptance")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.ablate and args.no_hf:
        sys.stderr.write("error: --ablate compares with transformers generate: drop --no-hf\n")
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        loaded = load_model(
            args.model,
            device="cpu",
            dtype=args.dtype,
            quantization=args.quantization,
            allow_pickle=True,  # a folder the user named on the command line
        )
    except ModelLoadError as err:
        sys.stderr.write(f"error: {err}\n")
        return 2
    files = args.files or default_files()
    missing = [str(f) for f in files if not Path(f).is_file()]
    if missing or not files:
        sys.stderr.write(f"error: no such file: {missing[0] if missing else '(none found)'}\n")
        return 2
    engine = LocalBackend(loaded, speculative=False)
    prompts = sample_prompts(engine, list(files), args.samples, args.budget_tokens, args.seed)
    if not prompts:
        sys.stderr.write("error: could not sample any cursor position from the files\n")
        return 2
    drafters: dict[str, Any] = {
        "heads": None if args.no_heads else "auto",
        "ngrams": None if args.no_ngrams else "auto",
    }
    decoder = SpeculativeDecoder(sources=default_sources(**drafters))
    rows = run_samples(
        loaded, prompts, args.max_new_tokens, decoder, max(1, args.repeats), with_hf=not args.no_hf
    )
    summary = summarize(rows)
    if args.llama_server:
        try:
            summary["llamaServer"] = llama_server_rows(
                LlamaServer(args.llama_server), prompts, rows, args.max_new_tokens
            )
        except LlamaServerError as err:
            sys.stderr.write(f"error: {err}\n")
            return 2
    if args.ablate:
        summary["bySourceAlone"] = ablation(loaded, prompts, rows, args.max_new_tokens, drafters)
    summary["typeThrough"] = type_through(
        loaded,
        engine,
        prompts,
        rows,
        args.max_new_tokens,
        args.budget_tokens,
        drafters,
        with_hf=not args.no_hf,
    )
    summary["timeToFirstToken"] = time_to_first_token(loaded, list(files), decoder)
    summary["timeToFirstTokenFim"] = fim_edit_ttft(loaded, list(files), decoder)
    summary["peakRssMiB"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    summary["decoder"] = decoder.describe()
    summary["model"] = loaded.describe()
    summary["precision"] = loaded.precision.describe()  # what ran: auto's pick or what was asked
    summary["precisionReason"] = loaded.precision.reason
    summary["threads"] = torch.get_num_threads()
    summary["maxNewTokens"] = args.max_new_tokens
    report = {"summary": summary, "samples": rows}
    if args.plot:
        plot(rows, summary, args.plot)
    sys.stdout.write(json.dumps(report if args.json else summary, indent=2) + "\n")
    return 0
