"""N-gram draft lookup and the candidate tree, on plain token lists."""

from __future__ import annotations

from memosight_lsp.inference.drafters import (
    OTHER,
    AcceptanceStats,
    CostModel,
    TokenIndex,
    build_tree,
    ngram_candidates,
)


def test_lookup_gives_the_latest_match_and_an_older_different_one() -> None:
    index = TokenIndex([1, 2, 3, 9, 8, 1, 2, 3, 7, 6, 1, 2])
    index.extend([3])
    found = dict((n, cont) for n, cont in index.lookup([1, 2, 3], 3))
    assert found[3] == [7, 6, 1]  # the most recent `1 2 3` went on with 7
    assert found[3 + OTHER] == [9, 8, 1]  # the one before went on with 9: a second guess
    # The same next token twice is no second guess.
    same = TokenIndex([5, 4, 5, 4, 5])
    assert all(n < OTHER for n, _ in same.lookup([4, 5], 4))


def test_a_match_running_to_the_end_repeats() -> None:
    index = TokenIndex([7, 1, 2, 1, 2])
    (n, cont), *_ = index.lookup([1, 2], 5)
    assert (n, cont) == (2, [1, 2, 1, 2, 1])


def test_second_guesses_branch_the_tree() -> None:
    index = TokenIndex([1, 2, 3, 9, 8, 1, 2, 3, 7, 6, 1, 2, 3])
    stats = AcceptanceStats()
    candidates = ngram_candidates("prompt", index, [1, 2, 3], 4, stats)
    assert {c.bucket for c in candidates} >= {("prompt", 3), ("prompt", 3 + OTHER)}
    flat = CostModel({1: 1.0, 32: 1.0})
    tree = build_tree(candidates, flat, max_nodes=16, max_depth=4)
    assert set(tree.children[0]) >= {7, 9}  # both continuations hang off the root
    assert not tree.chain
