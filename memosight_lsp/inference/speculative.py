"""Lossless speculative decoding: draft a token tree, verify it in one pass, keep the agreed path.

    One pass feeds [last committed token] + draft tree nodes, each at position (past + depth) and
    attending to the past and its own ancestors only (a 4D mask). Row i's logits are then exactly
    the model's next-token logits after the path to node i, so we walk down the tree while the
    model's greedy choice is a child, commit that path plus the model's own next token (the bonus),
    and drop the other nodes from the KV cache. Every committed token is the model's argmax given
    the committed prefix, hence the output equals plain greedy decoding (up to float rounding
    between a k-token and a 1-token pass: fp32 keeps that ~1e-6, see docs/speculative.md).

The decoder honours StopRules and allowed_tokens token by token exactly like greedy_generate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch

from .branches import branch_off
from .decoder import Decoder, Run
from .drafters import (
    CostModel,
    DraftCandidate,
    DraftSource,
    DraftState,
    DraftTree,
    HiddenStateDrafter,
    PreviousSuggestion,
    PromptLookup,
    TokenIndex,
    WorkspaceLookup,
    build_tree,
)
from .fused_trunk import prepare_trunk
from .greedy import GreedyDecoder
from .heads import PredictionHeads
from .kv_cache import new_cache, plain_attention
from .loading import position_limit
from .ngram_model import CorpusNgrams, NgramTable
from .prefix_cache import PrefixCache
from .timing import check

if TYPE_CHECKING:
    from .kv_cache import Cache

PROBE_CALLS = 64  # calls of a metered source before judging whether it pays
REPROBE_EVERY = 2048
CALIBRATION_CONTEXT = (256, 2048)  # cache lengths the pass costs may be timed on
# Turns per pass size (the fastest kept): with too few, one slow turn on a busy machine skews
# the pass costs, and with them every draft tree, for as long as the costs are kept (figures:
# docs/speculative.md).
CALIBRATION_REPEATS = 12
CALIBRATION_PREFILL_CHUNK = 128  # tokens per prefill pass of the timing cache


def default_sources(
    *,
    heads: HiddenStateDrafter | Literal["auto"] | None = "auto",
    ngrams: NgramTable | Literal["auto"] | None = "auto",
) -> list[DraftSource]:
    """A new instance of every built-in draft source, in the order their candidates enter the
    tree (the first to propose a node names it). heads / ngrams: "auto" (what is saved for the
    model), the drafter or table to use, or None (no such source)."""
    sources: list[DraftSource] = [PreviousSuggestion(), PromptLookup(), WorkspaceLookup()]
    if ngrams is not None:
        sources.append(CorpusNgrams(ngrams))
    if heads is not None:
        sources.append(PredictionHeads(heads))
    return sources


@dataclass
class Meter:
    """What a metered draft source's calls have cost so far."""

    ms: float = 0.0
    calls: int = 0


class ModelRunner:
    """The model split into trunk and LM head, so heads can read the last hidden state."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.trunk = prepare_trunk(model)
        self.device = next(model.parameters()).device
        # Tree rollback edits the cache in place: only plain full-length layers support that
        # (sliding-window, quantized or linear-attention layers fall back to greedy decoding).
        self.supported = model.get_output_embeddings() is not None and plain_attention(model.config)

    @torch.inference_mode()
    def prefill(self, ids: Sequence[int], cache: Cache) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden state [H] and logits [V] of the last of `ids`, appended to the cache."""
        input_ids = torch.tensor([list(ids)], device=self.device)  # [1, S]
        last = self.trunk(input_ids, cache, prefill=True)[-1:]  # [1, H]
        return last[0], self.trunk.logits(last)[0]

    @torch.inference_mode()
    def verify(self, root: int, tree: DraftTree, cache: Cache, past: int) -> torch.Tensor:
        """Hidden states [1+n, H] for the root token and every tree node."""
        input_ids = torch.tensor([[root, *tree.tokens]], device=self.device)  # [1, 1+n]
        if tree.chain:  # a chain is plain causal attention: the trunk builds its own mask
            return self.trunk(input_ids, cache)
        n = len(tree.tokens) + 1
        positions = torch.tensor([past, *(past + d for d in tree.depths)], device=self.device)
        return self.trunk(input_ids, cache, positions=positions, mask=self.tree_mask(tree, past, n))

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[R, H] -> [R, V]. The LM head is a third of a small model's FLOPs: callers project
        only the rows the walk can reach."""
        return self.trunk.logits(hidden)

    def tree_mask(self, tree: DraftTree, past: int, n: int) -> torch.Tensor:
        """[n, past + n] bool: every node sees the past, its ancestors and itself."""
        rows = [[True] + [False] * (n - 1)]
        for i, parent in enumerate(tree.parents, 1):
            row = list(rows[parent])
            row[i] = True
            rows.append(row)
        mask = torch.ones(n, past + n, dtype=torch.bool, device=self.device)
        mask[:, past:] = torch.tensor(rows, device=self.device)
        return mask

    @staticmethod
    @torch.inference_mode()
    def keep_path(cache: Cache, past: int, path: list[int], total: int) -> None:
        """Keep only the accepted nodes (input indices `path`) of the last `total` cache entries."""
        m = len(path)
        if path[-1] != m - 1:  # not the contiguous first branch: move the path into place
            index = torch.tensor(path) + past
            for layer in cache.layers:
                keys: Any = getattr(layer, "keys")  # noqa: B009 (attention layers only)
                values: Any = getattr(layer, "values")  # noqa: B009
                index = index.to(keys.device)
                keys[:, :, past : past + m] = keys[:, :, index]
                values[:, :, past : past + m] = values[:, :, index]
        if total > m:
            cache.crop(m - total)

    def calibrate(self, context: int, cancelled: Callable[[], bool] | None = None) -> CostModel:
        """Time verification passes of 1..32 tokens on a `context`-token cache, each with one
        LM-head row: a walk projects only the rows it reaches (PassLogits), mostly one or two.
        Raises timing.TimingCancelled when `cancelled()` turns true between passes."""
        vocab = int(self.model.config.vocab_size)
        positions = position_limit(self.model.config)
        if positions:
            context = max(1, min(context, positions - 40))
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, vocab, (context + 40,), generator=generator).tolist()
        cache = new_cache(self.model)
        # In chunks, asking between them: a request arriving meanwhile must not wait for a
        # whole long prefill.
        for start in range(0, context, CALIBRATION_PREFILL_CHUNK):
            check(cancelled)
            self.prefill(ids[start : min(context, start + CALIBRATION_PREFILL_CHUNK)], cache)

        def run(q: int) -> None:
            tree = DraftTree(tokens=ids[context + 1 : context + q], depths=list(range(1, q)))
            self.logits(self.verify(ids[context], tree, cache, context)[:1])
            cache.crop(-q)

        return CostModel.calibrate(run, repeats=CALIBRATION_REPEATS, cancelled=cancelled)


class PassLogits:
    """Logits of one verification pass, projected through the LM head only as the walk needs
    them: the likeliest branch in blocks of rows that double (the first covers the rows the walk
    is expected to need, its accepted drafts and the bonus row, and at least FIRST_BLOCK), other
    nodes one by one. A head's product over a few rows costs about what one row costs, so a
    second call costs more than a few rows too many (figures: docs/speculative.md)."""

    FIRST_BLOCK = 2

    def __init__(
        self, runner: ModelRunner, hiddens: torch.Tensor, main: int, expected: float = 0.0
    ) -> None:
        self.runner = runner
        self.hiddens = hiddens
        self.main = main
        self.rows: dict[int, torch.Tensor] = {}
        self.choices: dict[int, int] = {}
        self.projected = 0  # rows 0 .. projected-1 of the main branch are in self.rows
        self.block = max(self.FIRST_BLOCK, math.ceil(expected) + 1)

    def _project(self, i: int) -> None:
        while self.projected <= i:
            start, end = self.projected, min(self.main + 1, self.projected + self.block)
            block = self.runner.logits(self.hiddens[start:end])  # [end-start, V]
            for k, choice in enumerate(block.argmax(-1).tolist()):
                self.rows[start + k] = block[k]
                self.choices[start + k] = choice
            self.projected = end
            self.block *= 2

    def at(self, i: int) -> torch.Tensor:
        if i <= self.main:
            self._project(i)
        elif i not in self.rows:
            self.rows[i] = self.runner.logits(self.hiddens[i : i + 1])[0]
        return self.rows[i]

    def choice(self, i: int) -> int:
        if i <= self.main:
            self._project(i)
            return self.choices[i]
        return int(self.at(i).argmax())


class SpeculativeDecoder(Decoder):
    """A drop-in for greedy_generate that drafts and verifies; keeps per-buffer state.

    Called as decoder(model, prompt_ids, rules, allowed_tokens=..., buffer_id=...). With a
    buffer_id the KV cache and the suggestion are kept for that buffer between requests.
    """

    drafts_from_workspace = True
    reuses_cache = True

    def __init__(
        self,
        *,
        prefix_cache: PrefixCache | None = None,
        sources: Sequence[DraftSource] | None = None,
        cost_model: CostModel | None = None,
        max_draft: int = 32,
        max_depth: int = 24,
        calibrate: bool = True,
    ) -> None:
        super().__init__(prefix_cache=prefix_cache)
        # Where drafts come from (default_sources() when None); each decoder needs its own.
        self.sources = list(default_sources() if sources is None else sources)
        self.ready: list[DraftSource] = []  # the sources fitted to the current model
        self.cost_model = cost_model
        self.max_draft = max_draft
        self.max_depth = max_depth
        self.calibrate = calibrate
        self.workspace: TokenIndex | None = None
        self.totals: dict[str, Any] = {"passes": 0, "tokens": 0, "sources": {}}
        self._runner: ModelRunner | None = None
        self._meters: dict[str, Meter] = {}  # per metered source

    def set_workspace_tokens(self, documents: Sequence[Sequence[int]]) -> None:
        index = TokenIndex()
        for doc in documents:
            index.extend(doc)
        self.workspace = index if index.tokens else None

    def runner(self, model: Any) -> ModelRunner:
        if self._runner is None or self._runner.model is not model:
            self._runner = ModelRunner(model)
            self.ready = [source for source in self.sources if source.fit(model)]
            self.prefix_cache.clear()
        return self._runner

    def cost(self, model: Any, prompt_tokens: int) -> CostModel:
        """The pass costs: given (a server gives the cached ones, or the defaults until it has
        timed them after its first answer), else timed when first needed (the trunk times its
        row kernels then too) on a cache as long as the first prompt, within limits: the longer
        the context, the more a pass over many tokens costs next to a one-token pass. Any costs
        give the same tokens: they only shape the draft trees."""
        if self.cost_model is None:
            timed = self.measure_costs(model, prompt_tokens) if self.calibrate else None
            self.cost_model = timed or CostModel()
        return self.cost_model

    def measure_costs(
        self, model: Any, prompt_tokens: int, cancelled: Callable[[], bool] | None = None
    ) -> CostModel | None:
        """Time the pass costs now for prompts of about `prompt_tokens` (None: this model
        decodes plain greedy); raises timing.TimingCancelled when `cancelled()` turns true."""
        runner = self.runner(model)
        if not runner.supported:
            return None
        length = min(max(prompt_tokens, CALIBRATION_CONTEXT[0]), CALIBRATION_CONTEXT[1])
        return runner.calibrate(length, cancelled)

    def warm_up(self, model: Any, prompt_tokens: int) -> None:
        self.cost(model, prompt_tokens)

    def reuses_cache_of(self, model: Any) -> bool:
        return self.runner(model).supported  # others decode plain greedy, on a fresh cache

    def generate(self, run: Run) -> None:
        model, prompt_ids, rules, result = run.model, run.prompt_ids, run.rules, run.result
        runner = self.runner(model)
        if not runner.supported:
            GreedyDecoder().generate(run)
            return
        cost = self.cost(model, len(prompt_ids))
        cache, reused = run.take_cache()
        prefilled = run.prefill(lambda ids: runner.prefill(ids, cache), cache, reused)
        if prefilled is None:  # cancelled while prefilling: the part done is kept
            result.stats = {"speculative": True, "reusedPromptTokens": reused}
            return
        hidden, logits = prefilled
        first = logits  # [V]: the alternatives start here
        state = DraftState(
            committed=list(prompt_ids),  # ids whose keys/values are in the cache
            prompt_len=len(prompt_ids),
            hidden=hidden,
            workspace=self.workspace,
            kept=run.attached or {},  # what the sources kept for this buffer
        )
        for draft_source in self.ready:
            draft_source.start(state)
        drafted = accepted_total = 0
        by_source: dict[str, int] = {}
        while (token := run.take_next(logits)) is not None:
            state.committed.append(token)
            room = min(rules.max_new_tokens - len(result.tokens), self.max_depth)
            candidates, asked = self._candidates(state, room)
            tree = build_tree(candidates, cost, self.max_draft, room)
            past = len(state.committed) - 1
            hiddens = runner.verify(token, tree, cache, past)
            result.forward_passes += 1
            drafted += len(tree)
            scores = PassLogits(runner, hiddens, tree.main, tree.expected_main)
            path, ended = run.accept(tree, scores)
            runner.keep_path(cache, past, path, len(tree) + 1)
            new = [tree.tokens[i - 1] for i in path[1:]]
            for i in path[1:]:
                name = tree.sources[i - 1]
                by_source[name] = by_source.get(name, 0) + 1
            state.committed.extend(new)
            accepted_total += len(new)
            node = path[-1]
            if candidates:  # learn how the candidates did: the accepted path and the bonus
                truth = new + ([] if ended else [scores.choice(node)])
                for asked_source in asked:
                    asked_source.feedback(truth)
            state.hidden, logits = hiddens[node], scores.at(node)
            if ended:
                break
        branch_off(run, runner.trunk, cache, first, runner.device)
        kept = {src.name: k for src in self.ready if (k := src.keep(state)) is not None}
        run.keep(state.committed, cache, kept)
        decode_passes = max(result.forward_passes - 1, 1)
        result.stats = {
            **result.stats,  # alternativesMs
            "speculative": True,
            "reusedPromptTokens": reused,
            "draftedTokens": drafted,
            "acceptedDraftTokens": accepted_total,
            "tokensPerPass": round(len(result.tokens) / decode_passes, 3),
            "acceptedBySource": by_source,
        }
        self.totals["passes"] += result.forward_passes
        self.totals["tokens"] += len(result.tokens)
        for name, count in by_source.items():
            self.totals["sources"][name] = self.totals["sources"].get(name, 0) + count

    def _candidates(
        self, state: DraftState, room: int
    ) -> tuple[list[DraftCandidate], list[DraftSource]]:
        """The candidates of every ready source for this pass, and the sources asked."""
        if room <= 0:
            return [], []
        out: list[DraftCandidate] = []
        asked: list[DraftSource] = []
        for source in self.ready:
            if not source.metered:
                out += source.candidates(state, room)
            elif self._pays(source):
                started = time.perf_counter()
                out += source.candidates(state, room)
                meter = self._meters[source.name]
                meter.ms += (time.perf_counter() - started) * 1000
                meter.calls += 1
            else:
                continue
            asked.append(source)
        return out, asked

    def _pays(self, source: DraftSource) -> bool:
        """Whether a metered source is worth asking: probed for PROBE_CALLS calls (again every
        REPROBE_EVERY), then kept only while the tokens it got accepted saved more time than
        its calls took."""
        meter = self._meters.setdefault(source.name, Meter())
        if meter.calls < PROBE_CALLS or meter.calls % REPROBE_EVERY < PROBE_CALLS:
            return True
        accepted = self.totals["sources"].get(source.name, 0)
        if accepted * (self.cost_model or CostModel()).cost(1) >= meter.ms:
            return True
        meter.calls += 1  # skipped calls still advance toward the next probe
        return False

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "costModelMs": self.cost_model.costs if self.cost_model else None,
            "totals": self.totals,
            "draftSources": [source.name for source in self.ready],
        }
