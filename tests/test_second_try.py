"""A one-line answer cut before a bracket that closes nothing is decoded once more without that
bracket at that place (pipeline/second_try.py), and the longer line is kept when it begins with
the cut one. Where the cut falls in the model's text, the constraint over a real tokenizer's
vocabulary, and Qwen2.5-Coder (registry GGUF) on toml11's parser.hpp (the pinned held-out C++
project), where its line `source_location(loc)});` closed a `{` nobody opened."""

from __future__ import annotations

import pytest

from memosight_lsp.inference.decoder import Generation
from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline import second_try
from memosight_lsp.pipeline.healing import VocabularyText
from memosight_lsp.pipeline.policy import CursorSituation, describe_cursor
from memosight_lsp.pipeline.postprocess import cut_closer_at, cut_unmatched_closer, finish

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# toml11's parser.hpp, read_utf8_codepoint: the cursor on the line after `}}),`, where only the
# `(` of `syntax_error(` is still open.
ABOVE = (
    "    else // out of UTF-8 region\n    {\n"
    '        throw syntax_error(format_underline("toml::read_utf8_codepoint:"\n'
    '            " input codepoint is too large.",\n'
    '            {{source_location(loc), "should be in [0x00..0x10FFFF]"}}),\n'
    "            "
)
BELOW = "\n    }\n    return character;\n}\n"
STRAY = "    source_location(loc)});\n"  # what the model wrote: its indentation, then the line


def situation():
    return describe_cursor(ABOVE, BELOW, language="cpp")


def test_the_cut_is_found_in_the_models_own_text():
    at = cut_closer_at(STRAY, situation())
    assert at == STRAY.index("}")
    assert finish(STRAY, situation(), multiline=False) == STRAY[:at].strip()
    # Blank lines the model writes first on a blank line are skipped, and counted.
    blank = describe_cursor(
        "    if(x)\n    {\n        f(\n            ", "\n    }\n", language="cpp"
    )
    assert cut_closer_at("\n\n    a, b)});", blank) == len("\n\n    a, b)")
    # Nothing cut: a line that closes what is open, brackets in a string, an empty answer.
    assert cut_closer_at("    source_location(loc));\n", situation()) is None
    assert cut_closer_at('"a } in a string");', situation()) is None
    assert cut_closer_at("\n", situation()) is None


def test_second_answers_are_kept_only_when_they_add_to_the_line():
    assert second_try.adds_to("source_location(loc)", "source_location(loc));")
    assert not second_try.adds_to("source_location(loc))", "source_location(loc)")
    assert not second_try.adds_to("f(a)", "g(a));")
    assert not second_try.adds_to("f(a)", "f(a)")


@pytest.fixture(scope="module")
def embedded():
    return load_model(None)


def constraint_for(loaded, raw: str, stop_reason: str = "eos"):
    tokenizer = loaded.tokenizer
    tokens = tokenizer.encode(raw, add_special_tokens=False)
    generation = Generation(tokens=tokens, prompt_tokens=1, stop_reason=stop_reason)
    pieces = VocabularyText(tokenizer).pieces
    allowed = second_try.closer(
        generation,
        raw,
        situation(),
        False,
        None,
        lambda ids: tokenizer.decode(list(ids)),
        "",
        lambda: pieces,
    )
    return allowed, tokens, pieces


def test_no_token_may_put_the_bracket_at_its_place_on_the_same_text(embedded):
    """At every step whose text is the cut line so far, every token whose text would put the
    stray bracket at its place is taken away, and only those: a token that closes the `(` at
    that place instead stays."""
    allowed, tokens, pieces = constraint_for(embedded, STRAY)
    assert allowed is not None
    tokenizer = embedded.tokenizer
    at = STRAY.index("}")
    restricted = 0
    for k in range(len(tokens) + 1):
        so_far = tokenizer.decode(tokens[:k])
        if not STRAY[:at].startswith(so_far):
            break
        kept = allowed(tokens[:k])
        if kept is None:
            continue
        restricted += 1
        kept = set(kept)
        for token, piece in enumerate(pieces):
            if piece is None:
                continue
            lands = len(so_far) + len(piece) > at and (so_far + piece)[at] == "}"
            assert (token in kept) is not lands, (k, piece)
    assert restricted, "no step was constrained"
    # Once the answer has gone another way nothing is taken away.
    other = tokenizer.encode("    source_file(", add_special_tokens=False)
    assert allowed(other) is None


def test_no_second_try_after_a_cancel_or_without_a_cut(embedded):
    for reason in ("cancelled", "time"):
        assert constraint_for(embedded, STRAY, reason)[0] is None
    assert constraint_for(embedded, "    source_location(loc));\n")[0] is None


@pytest.mark.slow
def test_qwen_writes_the_closing_bracket_the_line_needs():
    """Over prompt budgets that show the model more or less of parser.hpp, some make its first
    line close a `{` nobody opened; those are decoded again, and the answer is the cut line and
    more, with no stray bracket, the same with plain greedy and speculative decoding."""
    from engines import QWEN_GGUF, need

    from memosight_lsp.bench import corpora
    from memosight_lsp.pipeline.local_backend import LocalBackend
    from memosight_lsp.pipeline.request import CompletionRequest

    model = need(QWEN_GGUF, "Qwen2.5-Coder GGUF (../shared/models/fetch.sh)")
    try:
        root = corpora.fetch(next(p for p in corpora.HELD_OUT if p.name == "toml11"))
    except corpora.CorpusError as err:
        pytest.skip(f"toml11 cannot be fetched here: {err}")
    path = next(root.rglob("parser.hpp"))
    lines = path.read_text().split("\n")
    row = 1 + next(i for i, line in enumerate(lines) if "[0x00..0x10FFFF]" in line)
    column = len(lines[row]) - len(lines[row].lstrip())
    text = "\n".join([*lines[:row], lines[row][:column], *lines[row + 1 :]])

    def request(budget: int, plain: bool) -> CompletionRequest:
        return CompletionRequest(
            text=text,
            line=row,
            column=column,
            path=str(path),
            multiline="never",
            max_new_tokens=32,
            budget_tokens=budget,
            first_response_ms=0,
            max_wait_ms=60_000,
            plain=plain,
            # The model's infilling reading, where it wrote the stray bracket.
            line_start_reading="around",
            buffer_id=None if plain else path.as_uri(),
        )

    engine = LocalBackend(load_model(str(model)))
    again = []
    for budget in (512, 640, 768, 896, 1024):
        completion = engine.complete(request(budget, plain=True))
        cut = completion.stats.get("otherCloser")
        if cut is not None:
            again.append(budget)
            line = completion.text
            assert line.startswith(cut) and len(line) > len(cut), (budget, cut, line)
            below = CursorSituation(
                line_prefix="",
                line_suffix="",
                previous_line="",
                indent="",
                language="cpp",
                line_may_close=")",
            )
            assert cut_unmatched_closer(line, below) == line, (budget, line)
    assert again, "no budget made the model write a stray closing bracket"
    for budget in again:  # the buffer's decoder, its kept cache serving the second decode
        speculative = engine.complete(request(budget, plain=False))
        assert speculative.stats.get("otherCloser") is not None
        assert speculative.text == engine.complete(request(budget, plain=True)).text
