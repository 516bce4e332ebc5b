"""What a decoding under way shows (postprocess.partial) and the loop cut of a finished one: a
degenerate loop is cut to its first copy, and every partial answer is a prefix of the finished
suggestion (the type-through cache replaces one with the other while the user looks)."""

from __future__ import annotations

import pytest

from memosight_lsp.pipeline import postprocess
from memosight_lsp.pipeline.policy import describe_cursor

LINE = describe_cursor("    total = ", "\n", language="python")
BLOCK = describe_cursor("def f(values):\n    ", "\n", language="python")
CALL = describe_cursor("    print(", ")\n", in_brackets=True, language="python")

# Raw model outputs, as a decoder would produce them token by token: code, then loops.
CODE = [
    (LINE, False, "sum(value for value in values if value)\n"),
    (LINE, False, "(0, 0, 0) + offset(1, 1)\n"),
    (LINE, False, "count + 1  # all small\n"),
    (
        BLOCK,
        True,
        "total = 0\n    for value in values:\n        total += value\n    return total\n",
    ),
]
LOOPS = [
    (LINE, False, "[1, 2, 3, 4, 5, 6, 6, 6, 6, 6, 6, 6, 6, 6]\n", "6, 6"),
    (LINE, False, "a or b or or or or or or or or or or", "or or"),
    (LINE, False, "<|fim_middle|><|fim_middle|><|fim_middle|><|fim_middle|>", "|><|fim_middle|><"),
    (LINE, False, "f if if if if if if if if", "if if"),
    (
        BLOCK,
        True,
        "x = 1\n    x = 1\n    x = 1\n    x = 1\n    x = 1\n",
        "x = 1\n    x = 1\n    x = 1",
    ),
    (BLOCK, True, "name = name, name, name, name, name, name, name\n", "name, name, name"),
    (CALL, False, "name, name, name, name, name, name, name)\n", "name, name"),
]


def pieces(raw: str) -> list[str]:
    """Growing prefixes, a character at a time (finer than tokens)."""
    return [raw[:end] for end in range(1, len(raw) + 1)]


def decoded(raw: str, situation, multiline: bool) -> str:
    """What the decoder hands back: the raw output up to where should_stop ends it."""
    for text in pieces(raw):
        if postprocess.should_stop(text, situation, multiline):
            return text
    return raw


@pytest.mark.parametrize(("situation", "multiline", "raw"), CODE)
def test_every_partial_answer_is_a_prefix_of_the_finished_one(situation, multiline, raw):
    raw = decoded(raw, situation, multiline)
    final = postprocess.finish(raw, situation, multiline)
    assert final
    for text in pieces(raw):
        shown = postprocess.partial(text, situation, multiline)
        assert final.startswith(shown), (text, shown, final)


@pytest.mark.parametrize(("situation", "multiline", "raw", "repeated"), LOOPS)
def test_a_loop_is_never_shown_partial_or_finished(situation, multiline, raw, repeated):
    raw = decoded(raw, situation, multiline)
    final = postprocess.finish(raw, situation, multiline)
    assert final and repeated not in final
    for text in pieces(raw):
        shown = postprocess.partial(text, situation, multiline)
        assert repeated not in shown, (text, shown)
        # On the way to a loop a partial answer may run a character or a copy past where the
        # finished one is cut, but the two never disagree: typing either keeps the other.
        common = min(len(shown), len(final))
        assert shown[:common] == final[:common], (text, shown, final)


@pytest.mark.parametrize(
    ("raw", "cut"),
    [
        ("6, 6, 6, 6, 6, 6", "6, "),
        ("x = [1, 2, 3, 4, 5, 6, 6, 6, 6, 6, 6", "x = [1, 2, 3, 4, 5, 6"),
        ("or or or or or", "or "),
        ("or or or or", "or or or or"),  # three copies of a short unit: not yet
        ("name, name, name, ", "name, "),  # the loop that stopped decoding, trailing space
        ("def f(a, b, c, d", "def f(a, b, c, d"),
        ("(0, 0, 0)", "(0, 0, 0)"),  # three short copies are code, not a loop
        ("# ----------------", "# ----------------"),  # punctuation runs are never loops
    ],
)
def test_a_degenerate_loop_is_cut_to_its_first_copy(raw, cut):
    assert postprocess.cut_loop(raw) == cut


def test_decoding_stops_once_a_loop_shows():
    assert postprocess.should_stop("x = [6, 6, 6, 6, 6", LINE, True)
    assert not postprocess.should_stop("x = [6, 6, 6, 6", LINE, True)


def test_a_statement_inside_brackets_is_dropped():
    assert postprocess.finish("def __init__(self, name, name", CALL, False) == ""
    assert postprocess.finish("x for x in y", CALL, False) == "x for x in y"


def test_partial_shows_whole_words_and_lines():
    assert postprocess.partial("value + oth", LINE, False) == "value +"
    assert postprocess.partial("value + other\nnext", LINE, False) == "value + other"
    block = "total = 0\n    for val"
    assert postprocess.partial(block, BLOCK, True) == "total = 0\n    for"


# spdlog's hourly_file_sink.h, the cursor on the empty line after a template head: Qwen2.5-Coder
# writes a line break first there (a blank line above its code), which used to end the answer.
TEMPLATE_HEAD = describe_cursor(
    "template<typename Factory = spdlog::synchronous_factory>\n", "\n", language="cpp"
)
INDENTED_BLANK = describe_cursor("def f(values):\n    total = 0\n    ", "\n", language="python")


def test_on_a_blank_line_the_models_leading_line_breaks_are_skipped() -> None:
    raw = "\n\ninline std::shared_ptr<logger> hourly_logger_mt(const std::string &name)\n"
    assert not postprocess.should_stop("\n", TEMPLATE_HEAD, False)
    assert not postprocess.should_stop("\n\ninline std::shared_ptr", TEMPLATE_HEAD, False)
    assert postprocess.should_stop(raw, TEMPLATE_HEAD, False)
    shown = "inline std::shared_ptr<logger> hourly_logger_mt(const std::string &name)"
    assert postprocess.finish(raw, TEMPLATE_HEAD, False) == shown
    # The model's indentation of the next line is the cursor's own, as for any line.
    assert postprocess.finish("\n    return total\n", INDENTED_BLANK, False) == "return total"
    assert postprocess.partial("\n    return tot", INDENTED_BLANK, False) == "return"
    assert postprocess.finish("\n\n\n", INDENTED_BLANK, False) == ""  # nothing but breaks


def test_a_line_break_after_code_on_the_line_still_ends_the_answer() -> None:
    assert postprocess.should_stop("\n", LINE, False)  # `total = |`: the line is done
    assert postprocess.finish("\nsum(values)\n", LINE, False) == ""
    # A block keeps its first line break as before: the body starts on the next line.
    assert postprocess.finish("\n    x = 1\n", INDENTED_BLANK, True) == "\n    x = 1"
