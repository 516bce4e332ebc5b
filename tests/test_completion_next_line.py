"""A completion on a blank line never repeats the code right below it: when the model's line is
the next line's (it skipped the one the person is about to write), the server decodes once more
with another token where that line's code began (pipeline/second_try.py `next_line`). The
embedded model on real code (CPython's string.py, Formatter.vformat) where its greedy line is
the next one; and the second decode's constraint over the embedded tokenizer's whole
vocabulary."""

from __future__ import annotations

import pytest

from memosight_lsp.inference.decoder import Generation
from memosight_lsp.inference.loading import load_model
from memosight_lsp.pipeline import second_try
from memosight_lsp.pipeline.healing import VocabularyText
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.policy import describe_cursor
from memosight_lsp.pipeline.request import CompletionRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# From string.py (CPython's standard library); the cursor goes on the blank line of
# `self.check_unused_args(...)`, above `return result`.
CODE = """
# The hard parts are reused from the C implementation.  They're exposed as "_"
# prefixed methods of str.

# The overall parser is implemented in _string.formatter_parser.
# The field name parser is implemented in _string.formatter_field_name_split

class Formatter:
    def format(self, format_string, /, *args, **kwargs):
        return self.vformat(format_string, args, kwargs)

    def vformat(self, format_string, args, kwargs):
        used_args = set()
        result, _ = self._vformat(format_string, args, kwargs, used_args, 2)
        self.check_unused_args(used_args, args, kwargs)
        return result

    def _vformat(self, format_string, args, kwargs, used_args, recursion_depth,
                 auto_arg_index=0):
        if recursion_depth < 0:
            raise ValueError('Max string recursion exceeded')
        result = []
        for literal_text, field_name, format_spec, conversion in \\
                self.parse(format_string):

            # output the literal text
            if literal_text:
                result.append(literal_text)

            # if there's a field, output it
            if field_name is not None:
                # this is some markup, find the object and do
                #  the formatting

                # handle arg indexing when empty field_names are given.
                if field_name == '':
                    if auto_arg_index is False:
                        raise ValueError('cannot switch from manual field '
                                         'specification to automatic field '
                                         'numbering')
                    field_name = str(auto_arg_index)
                    auto_arg_index += 1
                elif field_name.isdigit():
                    if auto_arg_index:
                        raise ValueError('cannot switch from manual field '
                                         'specification to automatic field '
                                         'numbering')
                    # disable auto arg incrementing, if it gets
                    # used later on, then an exception will be raised
                    auto_arg_index = False"""
CUT = "        self.check_unused_args(used_args, args, kwargs)\n"


def request(budget: int, plain: bool = True) -> CompletionRequest:
    return CompletionRequest(
        text=CODE.replace(CUT, "        \n"),
        line=CODE[: CODE.index(CUT)].count("\n"),
        column=8,
        multiline="never",
        max_new_tokens=32,
        budget_tokens=budget,
        first_response_ms=0,  # the whole budget, whatever this machine's prefill rate
        plain=plain,
        # The infilling reading, which sees the line below and can repeat it.
        line_start_reading="around",
        buffer_id=None if plain else "string.py",
    )


def test_a_line_like_the_next_one_is_decoded_again_from_another_start():
    """Over prompt budgets that show the model more or less of the file, some make its line
    `return result` (the next line's): those answer with its best other start instead, with
    plain greedy decoding and speculative decoding alike; no answer repeats the next line."""
    engine = LocalBackend(load_model(None))
    again = []
    for budget in range(160, 520, 20):
        completion = engine.complete(request(budget))
        assert completion.text.strip() != "return result", budget
        if completion.stats.get("otherLineStart"):
            again.append(budget)
            assert completion.text.strip() and not completion.text.lstrip().startswith("return")
    assert again, "no budget made the model repeat the next line"
    for budget in again:  # the buffer's decoder, its kept cache serving the second decode
        speculative = engine.complete(request(budget, plain=False))
        assert speculative.stats.get("otherLineStart") is True
        assert speculative.text == engine.complete(request(budget)).text


def test_the_second_decode_may_not_begin_with_the_same_code_however_it_is_split():
    """While the answer is only line breaks and indentation, or its code so far begins the first
    decode's opening word, every token that would make the code begin with that word is taken
    away (` return`, `return` after a token of more indentation, `urn` after `ret`), and only
    those: more indentation, and other words, stay. Once the code has gone another way, nothing
    is."""
    loaded = load_model(None)
    tokenizer = loaded.tokenizer
    above, below = CODE[: CODE.index(CUT)] + "        ", "\n" + CODE[CODE.index(CUT) + len(CUT) :]
    situation = describe_cursor(above, below, language="python")
    raw = "return result\n"
    tokens = tokenizer.encode(raw, add_special_tokens=False)
    generation = Generation(tokens=tokens, prompt_tokens=1, stop_reason="eos")
    pieces = VocabularyText(tokenizer).pieces

    def text_of(ids):
        return tokenizer.decode(list(ids))

    allowed = second_try.next_line(generation, raw, "", situation, None, text_of, lambda: pieces)
    assert allowed is not None
    checked = 0
    for head in ("", "  ", "\n        ", "ret"):
        ids = tokenizer.encode(head, add_special_tokens=False) if head else []
        assert text_of(ids) == head
        kept = set(allowed(ids))
        code = head.lstrip()
        for token, piece in enumerate(pieces):
            if piece is None:
                continue
            begins = (code + piece if code else piece.lstrip()).startswith("return")
            assert (token in kept) is not begins, (head, piece)
            checked += begins
    assert checked >= 4, "no token was taken away"
    assert allowed(tokenizer.encode("res", add_special_tokens=False)) is None
    # Nothing to retry: an answer that was kept, or one cut short.
    assert (
        second_try.next_line(generation, raw, "x", situation, None, text_of, lambda: pieces) is None
    )
    cut = Generation(tokens=tokens, prompt_tokens=1, stop_reason="time")
    assert second_try.next_line(cut, raw, "", situation, None, text_of, lambda: pieces) is None
