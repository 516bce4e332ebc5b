"""Recursive compression: least useful units shrink first, groups collapse, budget is met."""

from __future__ import annotations

from memosight_lsp.context.recursive import Unit, fit, signature_summary, units_for


def words(text: str) -> int:
    return len(text.split())


FILE_A = (
    "def alpha(x):\n    y = x + 1\n    return y * 2\n\n"
    "class Beta:\n    def gamma(self):\n        pass\n"
)


def test_signature_summary_keeps_declarations():
    assert signature_summary(FILE_A) == "def alpha(x):\nclass Beta:\n    def gamma(self):\n"
    assert signature_summary("x = 1\n") == ""


def test_fits_by_shrinking_the_least_useful_first():
    chunks = [("a.py", FILE_A), ("b.py", FILE_A.replace("alpha", "delta")), ("c.py", "x = 1 + 2\n")]
    units = units_for(chunks, scores=[0.9, 0.1, 0.5])
    full = sum(words(t) for _, t in chunks)
    fitted = fit(units, full - 5, words)
    assert fitted.tokens <= full - 5
    assert [u.level for u in units] == [0, 1, 0]  # b.py became its signatures
    fitted = fit(units, 12, words)
    # b dropped, then c dropped, before the best one (a) shrank to its signatures.
    assert [u.level for u in units] == [1, 2, 1]
    assert fitted.text() == "def alpha(x):\nclass Beta:\n    def gamma(self):\n"
    assert fitted.tokens == 6


def test_groups_collapse_into_one_summary():
    chunks = [(f"pkg/m{i}.py", FILE_A.replace("alpha", f"f{i}")) for i in range(4)]
    units = units_for(chunks, scores=[0, 1, 2, 3], group_of=lambda key: key.split("/")[0])

    def folder_summary(group: str, members: list[Unit]) -> str:
        return f"# {group}/: {len(members)} modules\n"

    # The best module's signatures alone (6 words) fit 6: no need to collapse.
    fitted = fit(units, 6, words, group_summary=folder_summary)
    assert (
        fitted.collapsed == {}
        and fitted.text() == "def f3(x):\nclass Beta:\n    def gamma(self):\n"
    )
    for unit in units:
        unit.level = 0
    # 5 does not hold them: the folder collapses into its one line.
    fitted = fit(units, 5, words, group_summary=folder_summary)
    assert fitted.collapsed == {"pkg": "# pkg/: 4 modules\n"}
    assert fitted.text() == "# pkg/: 4 modules\n" and fitted.tokens <= 5


def test_gives_up_cleanly_when_nothing_can_shrink():
    units = [Unit(key="k", levels=["one two three"], score=1.0)]
    fitted = fit(units, 1, words)
    assert fitted.tokens == 3 and fitted.steps == 0


def test_refill_gives_room_a_big_step_freed_back_to_the_best_units():
    big = "x = 1\n" * 40  # 80 words, no signature: full -> dropped in one step

    def units() -> list[Unit]:
        return units_for([("small.py", FILE_A), ("big.py", big)], scores=[0.1, 0.9])

    budget = words(FILE_A) + 60
    plain = units()
    # small.py, the least useful, goes first (signatures, then dropped); only dropping big.py
    # fits, which frees far more than was needed.
    assert fit(plain, budget, words).tokens == 0
    assert [u.level for u in plain] == [2, 1]
    refilled = units()
    fitted = fit(refilled, budget, words, refill=True)
    # With refill the freed room brings small.py's full text back.
    assert [u.level for u in refilled] == [0, 1]
    assert fitted.tokens == words(FILE_A) <= budget
