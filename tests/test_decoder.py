"""The Decoder base: a new decoder is one method; the base keeps the books and walks the drafts."""

from __future__ import annotations

import pytest
import torch
from test_speculative import prompts_from_files

from memosight_lsp.inference.decoder import Decoder, Generation, RowScores, Run, StopRules
from memosight_lsp.inference.drafters import DraftTree
from memosight_lsp.inference.fused_trunk import prepare_trunk
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.prefix_cache import PrefixCache

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 16


class OneHot:
    """Pass scores whose row i chooses choices[i]."""

    def __init__(self, choices: list[int]) -> None:
        self.choices = choices

    def at(self, i: int) -> torch.Tensor:
        return torch.nn.functional.one_hot(torch.tensor(self.choices[i]), VOCAB).float()

    def choice(self, i: int) -> int:
        return self.choices[i]


def run_with(rules: StopRules, allowed=None) -> Run:
    return Run(None, [1, 2, 3], rules, allowed, None, PrefixCache())


def test_accept_walks_a_chain_while_the_model_agrees():
    run = run_with(StopRules(max_new_tokens=10))
    path, ended = run.accept(DraftTree.chain_of([5, 6, 7]), OneHot([5, 6, 9, 0]))
    assert (path, ended, run.result.tokens) == ([0, 1, 2], False, [5, 6])


def test_accept_follows_the_branch_the_model_chooses():
    # Root children 4 (node 1) and 5 (node 2); node 2 has child 6 (node 3).
    tree = DraftTree(
        tokens=[4, 5, 6],
        parents=[0, 0, 2],
        depths=[1, 1, 2],
        sources=["a", "b", "b"],
        children=[{4: 1, 5: 2}, {}, {6: 3}, {}],
        chain=False,
        main=1,
    )
    run = run_with(StopRules(max_new_tokens=10))
    path, ended = run.accept(tree, OneHot([5, 0, 6, 8]))
    assert (path, ended, run.result.tokens) == ([0, 2, 3], False, [5, 6])


def test_accept_applies_the_stop_rules_token_by_token():
    tree = DraftTree.chain_of([5, 6, 7])
    scores = OneHot([5, 6, 7, 8])
    run = run_with(StopRules(max_new_tokens=2))
    assert run.accept(tree, scores) == ([0, 1, 2], True)
    assert (run.result.tokens, run.result.stop_reason) == ([5, 6], "max_tokens")
    run = run_with(StopRules(max_new_tokens=9, stop_token_ids=frozenset({6})))
    assert run.accept(tree, scores)[1] and run.result.stop_reason == "eos"
    assert run.result.tokens == [5]  # a stop token is not part of the output
    run = run_with(StopRules(max_new_tokens=9, should_stop=lambda t: t[-1] == 5))
    assert run.accept(tree, scores) == ([0, 1], True) and run.result.stop_reason == "stop"


def test_accept_honours_allowed_tokens():
    # After the first token only 7 is allowed: the model's 6 would be drafted, 7 is not.
    run = run_with(StopRules(max_new_tokens=9), allowed=lambda done: [7] if done else None)
    path, ended = run.accept(DraftTree.chain_of([5, 6]), OneHot([5, 6, 0]))
    assert (path, ended, run.result.tokens) == ([0, 1], False, [5])


def lookup(ids: list[int], k: int) -> list[int]:
    """What followed the last earlier occurrence of the last token (prompt lookup)."""
    last = ids[-1]
    for i in range(len(ids) - 2, -1, -1):
        if ids[i] == last:
            return ids[i + 1 : i + 1 + k]
    return []


class PromptLookupDecoder(Decoder):
    """A decoder written as the base intends: one method, drafting by prompt lookup."""

    def generate(self, run: Run) -> None:
        trunk = prepare_trunk(run.model)
        cache, reused = run.take_cache()
        ids = list(run.prompt_ids)  # the ids whose keys/values are in the cache
        logits = trunk.logits(trunk(torch.tensor([ids[reused:]]), cache)[-1:])[0]  # [V]
        run.prefilled()
        while (token := run.take_next(logits)) is not None:
            ids.append(token)
            room = run.rules.max_new_tokens - len(run.result.tokens)
            draft = lookup(ids, min(4, room))
            rows = trunk.logits(trunk(torch.tensor([[token, *draft]]), cache))  # [1+k, V]
            run.result.forward_passes += 1
            path, ended = run.accept(DraftTree.chain_of(draft), RowScores(rows))
            accepted = len(path) - 1
            ids += draft[:accepted]
            if accepted < len(draft):
                cache.crop(accepted - len(draft))
            logits = rows[accepted]
            if ended:
                break
        run.keep(ids, cache)


def test_a_one_method_decoder_gets_the_bookkeeping_right(tiny_model_dir):
    loaded = load_model(tiny_model_dir, device="cpu")
    decoder = PromptLookupDecoder()
    saved = 0
    for i, prompt in enumerate(prompts_from_files(loaded.tokenizer, 8, seed=7)):
        free = greedy_generate(loaded.model, prompt, StopRules(max_new_tokens=24))
        cases = [
            StopRules(max_new_tokens=24),
            StopRules(max_new_tokens=24, stop_token_ids=frozenset({free.tokens[7]})),
            StopRules(max_new_tokens=24, should_stop=lambda t: len(t) >= 9),
        ]
        for rules in cases:
            want = greedy_generate(loaded.model, prompt, rules)
            got = decoder(loaded.model, prompt, rules, buffer_id=f"buf{i}")
            assert (got.tokens, got.stop_reason) == (want.tokens, want.stop_reason)
            assert got.prompt_tokens == len(prompt)
            assert 1 <= got.forward_passes <= want.forward_passes
            assert got.prefill_ms > 0 and got.decode_ms > 0
            saved += want.forward_passes - got.forward_passes
    assert saved > 0  # drafts were accepted
    stats = decoder.describe()["prefixCache"]
    assert stats["hits"] >= 16 and stats["buffers"] == 8  # kept per buffer by the base
    decoder.forget("buf0")
    assert "buf0" not in decoder.prefix_cache
    assert decoder(loaded.model, [], StopRules(max_new_tokens=4)).tokens == []
    assert decoder(loaded.model, prompt, StopRules(max_new_tokens=0)).forward_passes == 0


@pytest.mark.parametrize("reason", ["cancelled", "time"])
def test_a_prewarm_stopped_between_chunks_counts_the_chunks_it_did(reason):
    # 300 prompt tokens, 40 found in the buffer's cache, stopped with 100 in it: 60 prefilled.
    stopped = Generation(
        tokens=[],
        prompt_tokens=300,
        stop_reason=reason,
        cancelled_at_prompt_tokens=100,
        stats={"reusedPromptTokens": 40},
    )
    report = stopped.prefill_report()
    assert report["prefilledTokens"] == 60 and report["cancelled"]
    assert report["promptTokens"] == 300 and report["reusedPromptTokens"] == 40
    whole = Generation(tokens=[], prompt_tokens=300, stats={"reusedPromptTokens": 40})
    assert whole.prefill_report()["prefilledTokens"] == 260
    assert not whole.prefill_report()["cancelled"]
