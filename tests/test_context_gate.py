"""Packing.gate's rule per language (context/pack.py, GATE_RULES), on a real index and
tree-sitter: in Python a name near the cursor that another file defines lets that file's code
in; in Go, where a package's names are on nearly every line, only a near copy of the code above
the cursor does."""

from __future__ import annotations

from pathlib import Path

from memosight_lsp.context import Packing, build_context
from memosight_lsp.context.pack import GATE_RULES, OTHER_GATE_RULE, gate_rule
from memosight_lsp.workspace import WorkspaceIndex

GATED = Packing(cross_share=0.35, similar=4, gate=True)

# The body of a function that means a grid's cells, in shapes.go and again in copy.go.
MEAN_BODY = """\ttotal := 0.0
\tcount := 0
\tfor _, row := range grid {
\t\tfor _, cell := range row {
\t\t\ttotal += cell * scale
\t\t\tcount++
\t\t}
\t}
\tif count == 0 {
\t\treturn 0
\t}
\tmean := total / float64(count)
"""

# Go: shapes.go defines Area and MeanGrid.
SHAPES_GO = f"""package geo

func Area(w, h float64) float64 {{
\treturn w * h
}}

func MeanGrid(grid [][]float64, scale float64) float64 {{
{MEAN_BODY}\treturn mean
}}
"""

# report.go calls Area (the names rule would open the gate) in code like nothing elsewhere.
REPORT_GO = """package geo

import "fmt"

func Describe(label string, width, height float64) string {
\tprefix := fmt.Sprintf("%s:", label)
\tsize := Area(width, height)
\treturn fmt.Sprintf("%s %.2f", prefix, size)
}
"""

# copy.go repeats MeanGrid's body: a near copy of another file's code above the cursor.
COPY_GO = f"""package geo

func MeanGridTwice(grid [][]float64, scale float64) float64 {{
{MEAN_BODY}\treturn mean * 2
}}
"""

UTIL_PY = """def area(width, height):
    return width * height
"""

REPORT_PY = """import util


def describe(label, width, height):
    prefix = label + ":"
    size = util.area(width, height)
    return f"{prefix} {size:.2f}"
"""


def workspace(tmp_path: Path, files: dict[str, str]) -> WorkspaceIndex:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    index = WorkspaceIndex(tmp_path, cache_dir=tmp_path / ".cache")
    index.scan()
    return index


def cross_chars(
    index: WorkspaceIndex, rel: str, line: int, language: str, packing: Packing = GATED
) -> int:
    """Other files' characters in the prompt at the end of the line `line` of `rel`."""
    text = index.abspath(rel).read_text()
    return build_context(
        text=text,
        path=str(index.abspath(rel)),
        line=line,
        column=len(text.split("\n")[line]),
        language_id=language,
        budget_tokens=1024,
        count_tokens=lambda s: (len(s) + 3) // 4,
        index=index,
        packing=packing,
    ).cross_chars


def test_the_rule_is_the_languages_unless_the_packing_names_one() -> None:
    assert gate_rule(Packing(gate=True), "python") == GATE_RULES["python"]
    assert gate_rule(Packing(gate=True), "go") == OTHER_GATE_RULE
    assert GATE_RULES["python"].names and not OTHER_GATE_RULE.names
    own = gate_rule(Packing(gate=True, gate_names=True, gate_similarity=0.3), "go")
    assert own.names and own.similarity == 0.3


def test_a_name_from_another_file_opens_the_gate_in_python(tmp_path: Path) -> None:
    index = workspace(tmp_path, {"util.py": UTIL_PY, "report.py": REPORT_PY})
    assert cross_chars(index, "report.py", 5, "python") > 0  # `size = util.area(...)`
    assert cross_chars(index, "report.py", 4, "python") == 0  # `prefix = label + ":"`


def test_in_go_only_a_near_copy_opens_the_gate(tmp_path: Path) -> None:
    index = workspace(
        tmp_path, {"shapes.go": SHAPES_GO, "report.go": REPORT_GO, "copy.go": COPY_GO}
    )
    # `size := Area(width, height)`: Area is shapes.go's, but in Go that is no reason ...
    assert cross_chars(index, "report.go", 6, "go") == 0
    # ... as it is under the names rule named explicitly.
    names = Packing(cross_share=0.35, similar=4, gate=True, gate_names=True)
    assert cross_chars(index, "report.go", 6, "go", names) > 0
    # Deep in the body that repeats MeanGrid's, shapes.go's window comes (more than 80% of
    # the identifiers above the cursor are in it) ...
    assert cross_chars(index, "copy.go", 14, "go") > 0
    # ... but not four lines earlier, where a third of them are not, as it would under
    # Python's threshold.
    assert cross_chars(index, "copy.go", 11, "go") == 0
    half = Packing(cross_share=0.35, similar=4, gate=True, gate_similarity=0.5)
    assert cross_chars(index, "copy.go", 11, "go", half) > 0
