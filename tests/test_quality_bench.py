"""`memosight bench quality`: its cases, strategies, scores and intervals, and one run end to end
on the embedded model."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from memosight_lsp.bench import model_quality, quality
from memosight_lsp.commands.bench import BENCHMARKS
from memosight_lsp.config import Settings
from memosight_lsp.context import Packing
from memosight_lsp.inference.loading import load_tokenizer
from memosight_lsp.pipeline.request import packing_for

pytestmark = pytest.mark.usefixtures("one_torch_thread")

UTIL = "def frobnicate(value):\n    return value * 2\n"
APP = (
    "from .util import frobnicate\n\n\ndef main(x):\n    y = x.get(1)\n"
    "    return frobnicate(y)\n" + "".join(f"NOTE_{i} = '{'x' * 40}'\n" for i in range(60))
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    root.mkdir()
    (root / "util.py").write_text(UTIL)
    (root / "app.py").write_text(APP)
    return root


def test_cross_file_cases_cut_the_call_line_and_keep_the_rest(root: Path) -> None:
    (case,) = quality.cross_file_cases([root], 10, seed=0)
    assert case.kind == "crossFile" and case.root == root
    assert case.callee is not None and case.callee.name == "frobnicate"
    assert case.callee.targets == ("util.py",)
    assert (case.case.line, case.case.column, case.case.target) == (5, 4, "return frobnicate(y)")
    lines = case.case.text.split("\n")
    assert lines[5] == "    " and lines[6] == APP.split("\n")[6]  # the rest is the suffix
    assert quality.cross_file_cases([root], 10, seed=0) == [case]  # seeded


def test_random_cases_come_from_the_roots_files(root: Path) -> None:
    cases = quality.random_cases([root], 5, seed=1)
    assert len(cases) == 5 and {c.kind for c in cases} == {"random"}
    assert all(c.root == root and c.callee is None for c in cases)
    for c in cases:
        original = Path(c.case.path).read_text().split("\n")
        assert original[c.case.line].strip() == c.case.target
    assert quality.random_cases([root], 5, seed=1) == cases


def test_no_case_comes_from_a_generated_file(root: Path) -> None:
    generated = "# THIS IS A GENERATED FILE, DO NOT EDIT.\n" + APP.replace("util", "gen_util")
    (root / "gen_util.py").write_text(UTIL)
    (root / "generated.py").write_text(generated)
    cases = quality.random_cases([root], 40, seed=1) + quality.cross_file_cases([root], 10, seed=0)
    assert {Path(c.case.path).name for c in cases} == {"app.py"}
    (root / "generated.py").write_text(generated.replace("DO NOT EDIT", "edit freely"))
    assert "generated.py" in {Path(c.case.path).name for c in quality.random_cases([root], 40, 1)}


def test_strategies_parse_into_settings_and_packing() -> None:
    assert quality.parse_strategy("file").cross_file is False
    assert quality.parse_strategy("default").packing is None  # the settings' own
    assert quality.parse_strategy("packed").packing == Packing()
    mixed = quality.parse_strategy("floor40+suffix4+foreign+repo")
    assert mixed.packing == Packing(prefix_floor_lines=40, suffix_share=0.25, foreign_only=True)
    assert mixed.repo_format is True
    assert quality.parse_strategy("share25").packing == Packing(cross_share=0.25)
    assert quality.parse_strategy("share35+sim4").packing == Packing(cross_share=0.35, similar=4)
    only = quality.parse_strategy("share25+sim2+simonly").packing
    assert only == Packing(cross_share=0.25, similar=2, similar_only=True)
    # The settings' defaults with a variant after them (the repository format left as set).
    verbatim = quality.parse_strategy("default+verbatim")
    assert verbatim.packing == dataclasses.replace(packing_for(Settings()), far_prefix=False)
    assert verbatim.repo_format is None
    eighth = quality.parse_strategy("default+suffix8").packing
    assert eighth is not None and eighth.suffix_share == 1 / 8
    bare = quality.parse_strategy("default+nomarker")
    assert bare.packing == dataclasses.replace(packing_for(Settings()), current_marker=False)
    with pytest.raises(ValueError, match="unknown strategy part 'wide'"):
        quality.parse_strategy("floor40+wide")
    with pytest.raises(ValueError, match="unknown strategy part 'suffix0'"):
        quality.parse_strategy("default+suffix0")


def test_wilson_interval() -> None:
    assert quality.wilson(0, 0) == (0.0, 1.0)
    lo, hi = quality.wilson(5, 10)
    assert math.isclose(lo, 0.2366, abs_tol=1e-4) and math.isclose(hi, 0.7634, abs_tol=1e-4)
    lo, hi = quality.wilson(0, 10)
    assert lo == 0.0 and math.isclose(hi, 0.2775, abs_tol=1e-4)
    lo, hi = quality.wilson(150, 150)
    assert hi == 1.0 and 0.97 < lo < 1.0


def test_bootstrap_and_paired_difference() -> None:
    assert quality.bootstrap_mean([0.4] * 30, seed=0) == pytest.approx((0.4, 0.4))
    values = [float(i % 2) for i in range(200)]
    lo, hi = quality.bootstrap_mean(values, seed=0)
    assert lo < 0.5 < hi and hi - lo < 0.2
    assert quality.bootstrap_mean(values, seed=0) == (lo, hi)  # seeded
    # The same cases, one strategy right on 20 more of 200: +10 points, clear of zero.
    a = [1.0] * 60 + [0.0] * 140
    b = [1.0] * 40 + [0.0] * 160
    d = quality.paired_difference(a, b, seed=0)
    assert d["mean"] == pytest.approx(0.1) and 0 < d["lo"] < 0.1 < d["hi"]
    same = quality.paired_difference(a, a, seed=0)
    assert same == {"mean": 0.0, "lo": 0.0, "hi": 0.0}


def test_scores_of_outcomes() -> None:
    tokenizer = load_tokenizer(None)
    assert quality.first_token_match("return frobnicate(y)", "return x", tokenizer.encode)
    assert not quality.first_token_match("", "return x", tokenizer.encode)
    assert not quality.first_token_match("yield x", "return x", tokenizer.encode)

    def outcome(exact: bool, similarity: float, recalled: bool | None = None) -> quality.Outcome:
        return quality.Outcome(
            exact=exact,
            similarity=similarity,
            first_token=exact,
            recalled=recalled,
            prompt_tokens=100,
            ms=5.0,
        )

    outcomes = [outcome(True, 1.0, True), outcome(False, 0.5, False)] * 10
    summary = quality.summarize(outcomes, seed=0)
    assert summary["cases"] == 20 and summary["recall"] == 50.0
    assert summary["exactMatch"]["value"] == 50.0
    assert summary["exactMatch"]["lo"] < 50.0 < summary["exactMatch"]["hi"]
    assert summary["editSimilarity"]["value"] == 75.0
    baseline = [outcome(False, 0.5)] * 20
    versus = quality.versus(outcomes, baseline, seed=0)
    assert versus["exactMatch"]["value"] == 50.0 and versus["editSimilarity"]["value"] == 25.0
    assert "lineExact" not in summary and "lineExact" not in versus  # nothing after the cursor

    # With code after the cursor, the line after accepting is scored too.
    lines = [dataclasses.replace(o, line_exact=i % 4 == 0) for i, o in enumerate(outcomes)]
    assert quality.summarize(lines, seed=0)["lineExact"]["value"] == 25.0
    none = [dataclasses.replace(o, line_exact=False) for o in baseline]
    assert quality.versus(lines, none, seed=0)["lineExact"]["value"] == 25.0


def test_the_line_after_accepting_reads_a_replaced_rest_and_an_insertion_alike() -> None:
    moved = model_quality.Case(
        path="x.go",
        text="func TestX()\n",
        line=0,
        column=len("func TestX("),
        target="t *testing.T",
        line_rest="t *testing.T) {",
    )
    case = quality.QualityCase(kind="random", root=Path("."), case=moved, language="go")
    assert quality.rest_of_line(case) == ")"
    assert quality.line_matches("t *testing.T) {", case)  # an answer that replaced the `)`
    assert not quality.line_matches("t *testing.T" + ")", case)  # inserted before it
    at_line_start = dataclasses.replace(case, case=dataclasses.replace(moved, line_rest=""))
    assert quality.line_matches("t *testing.T) {", at_line_start) is None


def test_bench_quality_end_to_end_on_the_embedded_model(tmp_path: Path, capsys) -> None:
    assert BENCHMARKS["quality"] == "quality"
    out, png = tmp_path / "q.json", tmp_path / "q.png"
    argv = ["--packages", "pathspec", "--cases", "2", "--strategies", "file,default,share25+repo"]
    argv += ["--budgets", "256,512", "--threads", "1", "--out", str(out), "--plot", str(png)]
    argv += ["--examples", "1"]
    assert quality.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(out.read_text())
    assert printed["cases"] == {"crossFile": 2, "random": 2}
    assert printed["packages"] == ["pathspec"]
    for budget in ("256", "512"):
        cells = printed["quality"][budget]
        assert set(cells) == {"file", "default", "share25+repo"}
        for name, kinds in cells.items():
            assert set(kinds) == {"crossFile", "random"}
            for kind, cell in kinds.items():
                assert cell["cases"] == 2 and cell["promptTokens"] <= int(budget) + 8
                assert 0 <= cell["exactMatch"]["lo"] <= cell["exactMatch"]["hi"] <= 100
                assert ("recall" in cell) == (kind == "crossFile")
                assert ("vsFile" in cell) == (name != "file")
                assert ("vsDefault" in cell) == (name != "default")
        assert cells["file"]["crossFile"]["recall"] == 0.0
    assert png.stat().st_size > 10_000
    assert [e["kind"] for e in printed["examples"]] == ["crossFile", "random"]
    assert set(printed["examples"][0]["predictions"]) == {"file", "default", "share25+repo"}
    assert printed["examples"][0]["path"].startswith("pathspec/")
