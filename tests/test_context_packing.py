"""The packing variants of context.Packing (bench/quality.py measures them on real models), on
the real files, index and tree-sitter of test_context_pack.py, and the repository prompt format
with a real tiny model's tokenizer."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_context_pack import APP, char_count, ctx, make_project

from memosight_lsp.context import Packing, build_context
from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.request import CompletionRequest
from memosight_lsp.workspace import WorkspaceIndex

# APP with a long function body above the cursor: 60 lines the window may or may not reach.
FILLER = "".join(f"    value_{i} = total + {i}\n" for i in range(60))
LONG_APP = APP.replace("    for w in widgets:\n", FILLER + "    for w in widgets:\n")
LONG_LINE = LONG_APP.split("\n").index("        total += frobnicate(w.size)") + 1


@pytest.fixture
def project(tmp_path: Path) -> tuple[WorkspaceIndex, Path]:
    return make_project(tmp_path)


def long_ctx(index, root, budget=400, **kw):
    return ctx(index, root, text=LONG_APP, line=LONG_LINE, column=4, budget=budget, **kw)


def window_start(packed) -> int:
    return next(s.start_line for s in packed.snippets if s.kind == "prefix")


def cross_tokens(packed) -> int:
    return sum(s.tokens for s in packed.snippets if s.path not in ("pkg/app.py",))


def test_the_default_packing_is_todays(project) -> None:
    index, root = project
    assert long_ctx(index, root) == long_ctx(index, root, packing=Packing())


def test_a_floor_of_lines_comes_before_snippets(project) -> None:
    index, root = project
    default = long_ctx(index, root)
    floor = long_ctx(index, root, packing=Packing(prefix_floor_lines=40))
    assert LONG_LINE - window_start(default) < 40 <= LONG_LINE - window_start(floor)
    assert cross_tokens(floor) < cross_tokens(default)
    assert floor.prompt_tokens <= 400
    # A floor the budget cannot hold takes what fits and leaves no room to snippets.
    small = long_ctx(index, root, budget=120, packing=Packing(prefix_floor_lines=200))
    assert small.prompt_tokens <= 120
    assert cross_tokens(small) == 0


def test_the_suffix_share(project) -> None:
    index, root = project
    text = APP + "".join(f"# trailing line {i} of the file\n" for i in range(80))
    default = ctx(index, root, text=text, budget=400)
    quarter = ctx(index, root, text=text, budget=400, packing=Packing(suffix_share=1 / 4))
    assert char_count(default.suffix) <= 50 < char_count(quarter.suffix) <= 100


def test_foreign_only_keeps_used_or_imported_names_and_no_windows(project) -> None:
    index, root = project
    neighbour = (
        "x = 1\n" * 40
        + "def configure(registry, settings):\n"
        + "    registry.connect(settings.host, settings.port)\n"
        + "y = 2\n" * 40
    )
    query = (
        "from .util import frobnicate\n\n\ndef setup(registry, settings):\n"
        "    registry.connect(settings.host, settings.port)\n    "
    )
    kwargs = {
        "text": query,
        "path": str(root / "pkg" / "wire.py"),
        "line": 5,
        "column": 4,
        "language_id": "python",
        "budget_tokens": 400,
        "count_tokens": char_count,
        "index": index,
        "open_buffers": {str(root / "pkg" / "events.py"): neighbour},
    }
    default = build_context(**kwargs)
    assert any(s.kind == "window" for s in default.snippets)
    foreign = build_context(**kwargs, packing=Packing(foreign_only=True))
    assert not any(s.kind == "window" for s in foreign.snippets)
    assert "def frobnicate(" in foreign.prefix  # imported: kept
    assert foreign.prompt_tokens <= 400


def test_cross_share_packs_the_file_as_alone_after_the_snippets(project) -> None:
    index, root = project
    share = Packing(cross_share=1 / 4)
    packed = long_ctx(index, root, budget=800, packing=share)
    cross = [s for s in packed.snippets if s.path != "pkg/app.py"]
    assert cross and sum(s.tokens for s in cross) <= 200
    assert packed.prefix.index("# file: pkg/util.py") < packed.prefix.index("# file: pkg/app.py")
    # The current file as without an index: the far part compressed, the suffix at B/4 of the
    # room the snippets left.
    alone = ctx(None, root, text=LONG_APP, line=LONG_LINE, column=4, budget=400)
    assert {s.kind for s in alone.snippets} >= {"far", "prefix"}
    assert {s.kind for s in packed.snippets} >= {"prefix", "suffix"}
    assert packed.prompt_tokens <= 800
    # No share: the current file alone, whatever the index holds.
    none = long_ctx(index, root, packing=Packing(cross_share=0.0))
    assert none.cross_chars == 0 and none.suffix == alone.suffix
    assert none.prefix[none.marker_chars :] == alone.prefix[alone.marker_chars :]
    for budget in (8, 32, 100, 250):
        assert long_ctx(index, root, budget=budget, packing=share).prompt_tokens <= budget


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> LocalBackend:
    return LocalBackend(
        load_model(str(tiny_model_dir), device="cpu"), speculative=False, time_passes=False
    )


def test_repo_format_names_files_with_the_familys_tokens(engine, project) -> None:
    index, root = project
    lines = APP.split("\n")
    request = CompletionRequest(
        text=APP,
        line=9,
        column=4,
        path=str(root / "pkg" / "app.py"),
        language_id="python",
        index=index,
        budget_tokens=1500,
        repo_format=True,
    )
    prompt = engine.prepare(request, stable=False)
    assert prompt.text.startswith("<|repo_name|>proj\n<|file_sep|>pkg/models.py\n")
    assert "<|file_sep|>pkg/util.py\ndef frobnicate(" in prompt.text
    own = "<|file_sep|>pkg/app.py\n<|fim_prefix|>" + "\n".join(lines[:9])
    assert own in prompt.text and "# file:" not in prompt.text
    assert prompt.text.endswith("<|fim_suffix|>" + prompt.context.suffix + "<|fim_middle|>")
    # Path marker comments without it, and without an index there are no other files to name.
    markers = engine.prepare(CompletionRequest(**{**request.__dict__, "repo_format": False}))
    assert markers.text.startswith("<|fim_prefix|># file: pkg/models.py\n")
    alone = CompletionRequest(**{**request.__dict__, "index": None})
    assert not engine.prepare(alone).text.startswith("<|repo_name|>")


def test_the_current_file_keeps_its_first_tokens_before_other_files_get_any(project) -> None:
    from memosight_lsp.context.pack import MIN_OWN_TOKENS

    index, root = project
    share = Packing(cross_share=0.35, similar=4)
    longer = LONG_APP.replace(FILLER, FILLER * 3)  # ~800 tokens: more than the floor
    line = longer.split("\n").index("        total += frobnicate(w.size)") + 1

    def pack(budget: int):
        return ctx(index, root, text=longer, line=line, column=4, budget=budget, packing=share)

    at_floor = pack(MIN_OWN_TOKENS)
    assert cross_tokens(at_floor) == 0
    assert all(s.path == "pkg/app.py" for s in at_floor.snippets)
    assert 0 < cross_tokens(pack(MIN_OWN_TOKENS + 100)) <= 100
    # A file shorter than the floor leaves the rest of the budget unused.
    assert char_count("# file: pkg/app.py\n" + LONG_APP) < MIN_OWN_TOKENS
    assert cross_tokens(long_ctx(index, root, budget=MIN_OWN_TOKENS, packing=share)) == 0


def test_verbatim_fills_the_files_room_with_its_nearest_lines(project) -> None:
    index, root = project
    shared = Packing(cross_share=0.35, similar=4)
    compressed = long_ctx(index, root, budget=200, packing=shared)
    verbatim = long_ctx(
        index, root, budget=200, packing=Packing(**{**vars(shared), "far_prefix": False})
    )
    assert "far" in {s.kind for s in compressed.snippets}
    assert "far" not in {s.kind for s in verbatim.snippets}
    assert window_start(verbatim) < window_start(compressed)  # more lines above, verbatim
    assert verbatim.prompt_tokens <= 200


def test_without_the_current_marker_the_file_alone_has_no_path_comment(project) -> None:
    index, root = project
    alone = Packing(cross_share=0.35, gate=True, gate_similarity=1.0, gate_names=False)
    marked = long_ctx(index, root, budget=200, packing=alone)
    bare = long_ctx(
        index, root, budget=200, packing=dataclasses.replace(alone, current_marker=False)
    )
    assert marked.cross_chars == 0 and bare.cross_chars == 0  # the gate keeps other files out
    assert marked.prefix.startswith("# file: pkg/app.py\n") and bare.marker_chars == 0
    assert not bare.prefix.startswith("# file:")
    assert bare.prompt_tokens <= 200
    # With other files' code before it, the current file keeps its marker: it ends theirs.
    shared = Packing(cross_share=0.35, similar=4, current_marker=False)
    crossed = ctx(
        index, root, text=LONG_APP, line=LONG_APP.count("\n"), column=0, budget=600, packing=shared
    )
    assert crossed.cross_chars > 0 and "# file: pkg/app.py\n" in crossed.prefix


def test_a_suffix_share_applies_to_the_file_packed_as_alone(project) -> None:
    index, root = project
    alone = Packing(cross_share=0.35, gate=True, gate_similarity=1.0, gate_names=False)
    text = LONG_APP + "".join(f"value_{i} = {i}\n" for i in range(200))

    def suffix_tokens(packing: Packing) -> int:
        packed = ctx(index, root, text=text, line=LONG_LINE, column=4, budget=400, packing=packing)
        return sum(s.tokens for s in packed.snippets if s.kind == "suffix")

    quarter = suffix_tokens(alone)
    eighth = suffix_tokens(dataclasses.replace(alone, suffix_share=1 / 8))
    assert 400 // 8 - 10 <= eighth <= 400 // 8 < quarter <= 400 // 4
