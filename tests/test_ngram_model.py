"""The n-gram drafter: counting, backing off, pruning, files bound to their model, lossless use."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from test_cli import memosight
from test_speculative import FLAT_COST, prompts_from_files
from tiny_models import model_and_code_to_fit

from memosight_lsp.inference.decoder import StopRules
from memosight_lsp.inference.greedy import greedy_generate
from memosight_lsp.inference.heads import lm_head_fingerprint
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.ngram_model import (
    NGRAMS_FILE,
    CorpusNgrams,
    NgramDrafter,
    NgramTable,
    context_key,
    context_keys,
    find_ngram_table,
)
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.training.ngrams import count_ngrams, source_texts

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def seqs(*rows: list[int]) -> list[np.ndarray]:
    return [np.asarray(r, dtype=np.int64) for r in rows]


def test_vectorised_keys_equal_the_lookup_keys():
    ids = np.random.default_rng(0).integers(0, 70000, 50)
    for order in (1, 2, 4):
        keys = context_keys(ids, order)
        assert [int(k) for k in keys] == [
            context_key(ids[i : i + order].tolist()) for i in range(len(ids) - order + 1)
        ]
    assert context_key([5]) != context_key([5, 5])  # the length seeds the key


def test_counts_keep_the_two_commonest_tokens_and_back_off():
    # After 1: 2 (x4), 3 (x3). After (7, 1): 3 (x3), so the longer context overrides.
    table = count_ngrams(
        seqs([1, 2, 1, 2, 1, 2, 1, 2, 7, 1, 3], [7, 1, 3, 9, 7, 1, 3]),
        model_fingerprint="f",
        min_count=2,
    )
    first, second = table.next_tokens([1])
    assert first[0] == 2 and first[1] == pytest.approx(4 / 7, abs=0.01)
    assert second[0] == 3 and second[1] == pytest.approx(3 / 7, abs=0.01)
    assert table.next_tokens([7, 1])[0] == (3, 1.0)
    assert table.next_tokens([4, 7, 1])[0][0] == 3  # unseen 3-gram: backs off to (7, 1)
    assert table.next_tokens([9]) == []  # seen once, below min_count
    assert table.next_tokens([42]) == []  # never seen
    assert table.next_tokens([2, 7, 1, 3, 9, 7, 1]) != []  # longer tails are cut to max_order


def test_min_count_and_pruning_shrink_the_table_without_changing_answers():
    rng = np.random.default_rng(1)
    # A small grammar: token t is mostly followed by t + 1 (mod 20), sometimes by anything.
    rows = []
    for _ in range(40):
        row = [int(rng.integers(20))]
        for _ in range(200):
            row.append((row[-1] + 1) % 20 if rng.random() < 0.8 else int(rng.integers(20)))
        rows.append(row)
    full = count_ngrams(seqs(*rows), model_fingerprint="f", min_count=1, same_share=0.0)
    pruned = count_ngrams(seqs(*rows), model_fingerprint="f", min_count=1, same_share=0.2)
    rare = count_ngrams(seqs(*rows), model_fingerprint="f", min_count=50, same_share=0.0)
    assert len(pruned) < len(full) and len(rare) < len(full)
    for row in rows[:5]:
        for i in range(4, len(row)):
            tail = row[i - 4 : i]
            want, got = full.next_tokens(tail), pruned.next_tokens(tail)
            assert got[0][0] == want[0][0]
            assert abs(got[0][1] - want[0][1]) < 0.2 + 0.01


def test_large_vocabularies_keep_their_token_ids(tmp_path):
    table = count_ngrams(seqs([70000, 150000, 70000, 150000]), model_fingerprint="f", min_count=1)
    assert table.tokens.dtype == np.int32
    back = NgramTable.load(table.save(tmp_path / "big.npz"))
    assert back.next_tokens([70000])[0][0] == 150000


def test_model_labels_replace_the_text(tmp_path):
    ids = seqs([1, 2, 1, 2, 1, 2])
    labels = [np.asarray([5, 6, 5, 6, 5, -1])]  # what a model said after each position
    table = count_ngrams(ids, labels=labels, model_fingerprint="f", min_count=1)
    assert table.next_tokens([1])[0][0] == 5
    assert table.next_tokens([2])[0][0] == 6


def test_save_load_round_trip_and_corrupt_files(tmp_path):
    table = count_ngrams(seqs([1, 2, 3, 1, 2, 4, 1, 2, 3]), model_fingerprint="abc", min_count=1)
    path = table.save(tmp_path / "t.npz")
    back = NgramTable.load(path)
    assert back.model_fingerprint == "abc" and back.max_order == table.max_order
    assert np.array_equal(back.keys, table.keys) and np.array_equal(back.tokens, table.tokens)
    assert back.next_tokens([1, 2]) == table.next_tokens([1, 2])
    (tmp_path / "bad.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="unreadable"):
        NgramTable.load(tmp_path / "bad.npz")
    np.savez(tmp_path / "partial.npz", keys=table.keys)
    with pytest.raises(ValueError, match="unreadable"):
        NgramTable.load(tmp_path / "partial.npz")
    shuffled = NgramTable(
        table.keys[::-1].copy(), table.tokens, table.shares, model_fingerprint="abc"
    )
    with pytest.raises(ValueError, match="corrupt"):
        NgramTable.load(shuffled.save(tmp_path / "shuffled.npz"))


def test_drafter_chains_guesses_and_learns_from_misses():
    table = count_ngrams(
        seqs([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3, 9, 8]), model_fingerprint="f", min_count=1
    )
    drafter = NgramDrafter(table)
    cands = drafter.candidates([7, 1], limit=4)
    assert cands[0].tokens == [2, 3, 4, 5]
    assert all(a >= b for a, b in zip(cands[0].probs, cands[0].probs[1:], strict=False))
    detours = [c.tokens for c in cands[1:]]
    # (1, 2, 3) is followed by 9 once: a second guess, which goes on as first guesses do.
    assert detours == [[2, 3, 9, 8]]
    before = cands[0].probs[0]
    for _ in range(30):
        drafter.candidates([7, 1], limit=4)
        drafter.feedback([8])  # the model never says 2 here
    assert drafter.candidates([7, 1], limit=4)[0].probs[0] < before / 2


def test_table_is_found_only_for_its_model(tiny_model_dirs, tmp_path):
    llama_dir = tmp_path / "llama"
    shutil.copytree(tiny_model_dirs["llama"], llama_dir)
    llama = load_model(llama_dir, device="cpu").model
    qwen = load_model(tiny_model_dirs["qwen2"], device="cpu").model
    table = count_ngrams(
        seqs([1, 2, 3, 1, 2, 3]), model_fingerprint=lm_head_fingerprint(qwen), min_count=1
    )
    table.save(llama_dir / NGRAMS_FILE)
    assert find_ngram_table(llama) is None  # counted for another model
    table.model_fingerprint = lm_head_fingerprint(llama)
    table.save(llama_dir / NGRAMS_FILE)
    assert find_ngram_table(llama) is not None
    table.tokens[0, 0] = 60000  # beyond the tiny vocabulary: would crash the embedding
    table.save(llama_dir / NGRAMS_FILE)
    assert find_ngram_table(llama) is None
    (llama_dir / NGRAMS_FILE).write_bytes(b"\x00" * 100)
    assert find_ngram_table(llama) is None  # corrupt: ignored with a warning


def test_installed_packages_are_never_counted(tmp_path):
    (tmp_path / "lib" / "site-packages" / "pkg").mkdir(parents=True)
    (tmp_path / "lib" / "site-packages" / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "lib" / "own.py").write_text("y = 2\n")
    assert [rel for rel, _ in source_texts([tmp_path])] == [f"{tmp_path.name}/lib/own.py"]


@pytest.mark.slow
def test_cli_builds_a_table_the_decoder_uses_losslessly(tiny_model_dir, tmp_path):
    model_dir, data = model_and_code_to_fit(tiny_model_dir, tmp_path)
    run = memosight(
        "train", "ngrams", "--model", str(model_dir), "--data", str(data), "--min-count", "2"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""
    assert '"contexts"' in run.stderr and (model_dir / NGRAMS_FILE).is_file()
    loaded = load_model(model_dir, device="cpu")
    decoder = SpeculativeDecoder(sources=[CorpusNgrams()], cost_model=FLAT_COST)
    accepted = 0
    for prompt in prompts_from_files(loaded.tokenizer, 40, seed=7):
        rules = StopRules(max_new_tokens=32)
        got = decoder(loaded.model, prompt, rules)
        assert got.tokens == greedy_generate(loaded.model, prompt, rules).tokens
        accepted += got.stats["acceptedBySource"].get("corpus", 0)
    assert "corpus" in decoder.describe()["draftSources"] and accepted > 0


def test_cli_refuses_bad_arguments(tmp_path):
    run = memosight("train", "ngrams", "--data", str(tmp_path / "missing"))
    assert run.returncode == 2 and "--data folder not found" in run.stderr
    assert "Traceback" not in run.stderr
