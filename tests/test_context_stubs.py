"""Compact stubs and import signals of the context packer, on real files with real tree-sitter."""

from __future__ import annotations

from pathlib import Path

from memosight_lsp.context import PackedContext, build_context
from memosight_lsp.context.render import CONSTRUCTOR, DOCUMENTED, HEADER, render_signature
from memosight_lsp.workspace import WorkspaceIndex

COOKIES = '''from typing import overload


@overload
def jar_from_dict(
    values: dict[str, str],
    jar: None = None,
) -> dict: ...
@overload
def jar_from_dict(
    values: dict[str, str],
    jar: list,
) -> list: ...
def jar_from_dict(
    values: dict[str, str],
    jar=None,  # the jar to fill
):
    """Fill a jar."""
    return jar


class Session:
    """Keeps cookies between requests."""

    def __init__(
        self,
        name: str,
        timeout: float = 1.0,
    ) -> None:
        self.name = name

    def send(self, request):
        return request

    def close(self):
        pass
'''

# Many helpers, each imported by the app below; only the ones near the cursor are used.
HELPERS = "\n\n".join(
    f'def helper_{i}(value: int, *, scale: float = 1.0) -> int:\n    """Helper {i}."""\n'
    f"    return value * {i}"
    for i in range(12)
)
APP_IMPORTS = "from .helpers import (\n" + "".join(f"    helper_{i},\n" for i in range(12)) + ")\n"
APP_BODY = "".join(f"    total += helper_{i}(total)\n" for i in range(11))
APP = APP_IMPORTS + "\n\ndef run(total):\n" + APP_BODY + "    \n    return total\n"


def char_count(text: str) -> int:
    return (len(text) + 3) // 4


def make_index(tmp_path: Path) -> tuple[WorkspaceIndex, Path]:
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "cookies.py").write_text(COOKIES)
    (root / "pkg" / "helpers.py").write_text(HELPERS + "\n")
    (root / "pkg" / "app.py").write_text(APP)
    index = WorkspaceIndex(root, use_cache=False)
    index.scan()
    return index, root


def context_at_blank_line(index, root, text: str, budget: int) -> PackedContext:
    line = text.split("\n").index("    ")
    return build_context(
        text=text,
        path=str(root / "pkg" / "app.py"),
        line=line,
        column=4,
        language_id="python",
        budget_tokens=budget,
        count_tokens=char_count,
        index=index,
    )


def test_header_level_joins_a_multi_line_signature(tmp_path) -> None:
    index, _ = make_index(tmp_path)
    symbols = index.symbols("pkg/cookies.py")
    assert symbols is not None
    lines = COOKIES.split("\n")
    names = [d.name for d in symbols.definitions]
    first_overload = names.index("jar_from_dict")
    header = render_signature(lines, symbols, first_overload, detail=HEADER)
    assert (
        header
        == "@overload\ndef jar_from_dict(values: dict[str, str], jar: None = None) -> dict: ...\n"
    )
    # A comment inside the signature would swallow the rest of a joined line: kept as written.
    implementation = len(names) - 1 - names[::-1].index("jar_from_dict")
    kept = render_signature(lines, symbols, implementation, detail=HEADER)
    assert "    jar=None,  # the jar to fill\n" in kept


def test_type_stub_levels_add_constructor_then_members(tmp_path) -> None:
    index, _ = make_index(tmp_path)
    symbols = index.symbols("pkg/cookies.py")
    assert symbols is not None
    lines = COOKIES.split("\n")
    session = [d.name for d in symbols.definitions].index("Session")
    header = render_signature(lines, symbols, session, detail=HEADER)
    constructor = render_signature(lines, symbols, session, detail=CONSTRUCTOR)
    documented = render_signature(lines, symbols, session, detail=DOCUMENTED)
    assert header == "class Session: ...\n"
    assert constructor == (
        "class Session:\n    def __init__(self, name: str, timeout: float = 1.0) -> None: ...\n"
    )
    assert '"""Keeps cookies between requests."""' in documented
    assert "def send(self, request): ..." in documented
    assert "def send" not in constructor


def test_overload_stubs_give_way_to_the_implementation(tmp_path) -> None:
    index, root = make_index(tmp_path)
    text = (
        "from .cookies import jar_from_dict\n\n\n"
        "def load(values):\n    jar = jar_from_dict(values)\n    \n    return jar\n"
    )
    packed = context_at_blank_line(index, root, text, budget=400)
    chunks = [s for s in packed.snippets if s.symbol == "jar_from_dict"]
    assert len(chunks) == 1
    assert chunks[0].path == "pkg/cookies.py"
    assert "@overload" not in packed.prefix
    assert "def jar_from_dict(" in packed.prefix


def test_an_imported_name_not_used_yet_is_in_a_small_context(tmp_path) -> None:
    index, root = make_index(tmp_path)
    budget = 200  # room for some helper headers, not all twelve
    packed = context_at_blank_line(index, root, APP, budget=budget)
    helpers = {s.symbol for s in packed.snippets if s.path == "pkg/helpers.py"}
    assert "helper_11" in helpers, helpers  # the one import the file has not used yet
    assert len(helpers) < 12
    # Once it is used (far from the cursor), it is no longer singled out.
    used = APP + "\n\ndef other():\n    return helper_11(1)\n"
    again = context_at_blank_line(index, root, used, budget=budget)
    assert packed.prompt_tokens <= budget and again.prompt_tokens <= budget
    assert "helper_11" not in {s.symbol for s in again.snippets if s.path == "pkg/helpers.py"}
