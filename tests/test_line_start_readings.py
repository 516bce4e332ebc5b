"""How a line start is read (pipeline/readings.py): without the code below the cursor (`above`,
the default), with it (`around`), or both and the line the model is surer of (`choose`). The
decoders' token scores against the model's own log-probabilities; the rule's parts; and the
embedded model at the blank lines of a real file (CPython's string.py): `above` leaves the code
below out of the prompt, `choose` answers with one of the two readings' lines, the one with the
higher first-line score, the same with plain greedy and speculative decoding, and never with
the second past the first response's deadline."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from memosight_lsp.config import Settings
from memosight_lsp.context.types import PackedContext
from memosight_lsp.inference.decoder import Generation, StopRules
from memosight_lsp.inference.greedy import GreedyDecoder
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.pipeline import readings
from memosight_lsp.pipeline.local_backend import LocalBackend
from memosight_lsp.pipeline.policy import describe_cursor
from memosight_lsp.pipeline.prompt import build_prompt
from memosight_lsp.pipeline.request import CompletionRequest

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# From string.py (CPython's standard library): Template's methods. Each blank line made by
# emptying a code line is a line start with code below it.
CODE = '''class Template:
    """A string class for supporting $-substitutions."""

    delimiter = '$'
    idpattern = r'(?a:[_a-z][_a-z0-9]*)'
    braceidpattern = None
    flags = _re.IGNORECASE

    def __init_subclass__(cls):
        super().__init_subclass__()
        if 'pattern' in cls.__dict__:
            pattern = cls.pattern
        else:
            delim = _re.escape(cls.delimiter)
            id = cls.idpattern
            bid = cls.braceidpattern or cls.idpattern
            pattern = fr"""
            {delim}(?:
              (?P<escaped>{delim})  |   # Escape sequence of two delimiters
              (?P<named>{id})       |   # delimiter and a Python identifier
              {{(?P<braced>{bid})}} |   # delimiter and a braced identifier
              (?P<invalid>)             # Other ill-formed delimiter exprs
            )
            """
        cls.pattern = _re.compile(pattern, cls.flags | _re.VERBOSE)

    def __init__(self, template):
        self.template = template

    def _invalid(self, mo):
        i = mo.start('invalid')
        lines = self.template[:i].splitlines(keepends=True)
        if not lines:
            colno = 1
            lineno = 1
        else:
            colno = i - len(''.join(lines[:-1]))
            lineno = len(lines)
        raise ValueError('Invalid placeholder in string: line %d, col %d' %
                         (lineno, colno))

    def substitute(self, mapping=_sentinel_dict, /, **kws):
        if mapping is _sentinel_dict:
            mapping = kws
        elif kws:
            mapping = _ChainMap(kws, mapping)
        # Helper function for .sub()
        def convert(mo):
            # Check the most common path first.
            named = mo.group('named') or mo.group('braced')
            if named is not None:
                return str(mapping[named])
            if mo.group('escaped') is not None:
                return self.delimiter
            if mo.group('invalid') is not None:
                self._invalid(mo)
            raise ValueError('Unrecognized named group in pattern',
                             self.pattern)
        return self.pattern.sub(convert, self.template)
'''
LINES = CODE.split("\n")
# Code lines whose next line is code too (not the last of a block), indented, not the first of
# a block (there the body below keeps the one reading that sees it).
CUT_ROWS = [
    row
    for row, line in enumerate(LINES)
    if line.startswith("        ")
    and line.strip()
    and not line.rstrip().endswith((":", "(", "\\"))
    and not LINES[row - 1].rstrip().endswith(":")
    and row + 1 < len(LINES)
    and LINES[row + 1].strip()
][:10]
FIRST_OF_BODY = next(
    row
    for row, line in enumerate(LINES)
    if line.startswith("        ")
    and LINES[row - 1].rstrip().endswith(":")
    and LINES[row + 1].startswith(line[: len(line) - len(line.lstrip())])
    and LINES[row + 1].strip()
)


def request(
    row: int, reading: str = "choose", plain: bool = True, first_response_ms: int = 0
) -> CompletionRequest:
    line = LINES[row]
    column = len(line) - len(line.lstrip())
    text = "\n".join([*LINES[:row], line[:column], *LINES[row + 1 :]])
    return CompletionRequest(
        text=text,
        line=row,
        column=column,
        path="string.py",
        multiline="never",
        max_new_tokens=24,
        first_response_ms=first_response_ms,
        plain=plain,
        alternatives=1,
        line_start_reading=reading,
        # One buffer per row: a cache reused from another row's prompt is float32's to round
        # differently (docs/speculative.md), which this tiny model's near-ties can show.
        buffer_id=None if plain else f"string.py#{row}",
    )


@pytest.fixture(scope="module")
def loaded():
    return load_model(None)


def test_the_decoders_score_each_token_with_the_models_log_probability(loaded):
    """Generation.scores is log p(token | prompt, tokens before it), the stop token's included,
    as one teacher-forced forward pass gives it; speculative decoding scores the same tokens
    alike; without StopRules.score nothing is recorded."""
    tokenizer = loaded.tokenizer
    prompt = tokenizer.encode(CODE[:900], add_special_tokens=True)
    rules = StopRules(max_new_tokens=20, stop_token_ids=loaded.stop_token_ids, score=True)
    plain = GreedyDecoder()(loaded.model, prompt, rules)
    assert len(plain.scores) == len(plain.tokens) + (plain.stop_reason == "eos") > 0
    with torch.inference_mode():
        logits = loaded.model(input_ids=torch.tensor([prompt + plain.tokens])).logits[0].float()
    rows = torch.log_softmax(logits[len(prompt) - 1 :], dim=-1)
    stop = rows[len(plain.tokens)].argmax() if plain.stop_reason == "eos" else None
    chosen = [*plain.tokens, *([] if stop is None else [int(stop)])]
    expected = [float(rows[i, t]) for i, t in enumerate(chosen)]
    assert plain.scores == pytest.approx(expected, abs=1e-3)
    speculative = SpeculativeDecoder()(loaded.model, prompt, rules, buffer_id="x")
    assert speculative.tokens == plain.tokens
    assert speculative.scores == pytest.approx(plain.scores, abs=1e-4)
    unscored = GreedyDecoder()(loaded.model, prompt, StopRules(max_new_tokens=5))
    assert unscored.scores == []


def test_a_first_line_scores_through_its_line_break():
    pieces = ["a", "b\n", "c", None]
    line = Generation(tokens=[0, 1, 2], prompt_tokens=1, scores=[-1.0, -2.0, -4.0])
    assert readings.first_line_score(line, pieces) == -3.0
    ended = Generation(tokens=[0, 2], prompt_tokens=1, scores=[-1.0, -2.0, -0.5])
    assert readings.first_line_score(ended, pieces) == -3.5  # the stop token's counts
    # The surer line wins; an empty one never does; ties keep the first.
    assert readings.second_wins(("x", -3.0), ("y", -1.0))
    assert not readings.second_wins(("x", -1.0), ("y", -3.0))
    assert not readings.second_wins(("x", -1.0), ("y", -1.0))
    assert not readings.second_wins(("x", -9.0), ("", -0.1))
    assert readings.second_wins(("", -0.1), ("y", -9.0))


def test_the_second_reading_runs_only_when_it_can_end_before_the_deadline():
    first = Generation(tokens=[1] * 10, prompt_tokens=1, decode_ms=100.0)
    now = time.monotonic()
    assert readings.fits_before(None, first, 500, None)  # no deadline: always
    assert readings.fits_before(now + 1.0, first, 100, rate=1000.0)  # 0.1 s + 0.1 s
    assert not readings.fits_before(now + 0.15, first, 100, rate=1000.0)
    assert not readings.fits_before(now + 0.15, first, 100, rate=None)  # 100 x 10 ms to prefill
    assert readings.fits_before(now + 0.5, first, 10, rate=None)


def test_only_a_line_start_with_code_below_is_read_twice(loaded):
    context = PackedContext(
        prefix="def f():\n    ", suffix="\n    return x\n", snippets=[], prompt_tokens=9
    )
    prompt = build_prompt(context, loaded.fim)
    blank = describe_cursor("def f():\n    y = 1\n    ", "\n    return x\n", language="python")
    assert readings.applies(blank, prompt, has_fim=True)
    assert not readings.applies(blank, prompt, has_fim=False)
    typed = describe_cursor("def f():\n    ret", "\n    return x\n", language="python")
    assert not readings.applies(typed, prompt, has_fim=True)
    inside = describe_cursor("def f():\n    g(", ")\n    return x\n", language="python")
    assert not readings.applies(inside, prompt, has_fim=True)
    last = build_prompt(
        PackedContext(prefix="x = 1\n", suffix="\n\n", snippets=[], prompt_tokens=3), loaded.fim
    )
    assert not readings.applies(describe_cursor("x = 1\n", "\n\n"), last, has_fim=True)
    # The first line of a block whose body is below keeps the reading that sees that body;
    # a block with nothing below it yet (a new function's body) is read twice.
    first = describe_cursor("def f():\n    ", "\n    return x\n", language="python")
    assert not readings.applies(first, prompt, has_fim=True)
    empty = describe_cursor("def f():\n    ", "\n\ndef g():\n    pass\n", language="python")
    assert readings.applies(empty, prompt, has_fim=True)
    braces = describe_cursor("int f() {\n\t", "\n\treturn 1;\n}\n", language="c")
    assert not readings.applies(braces, prompt, has_fim=True)
    assert readings.applies(describe_cursor("int f() {\n\t", "\n}\n", language="c"), prompt, True)
    # The same prompt up to where the code below begins: the buffer's cached head serves both.
    above = readings.without_code_below(prompt, loaded.fim, None)
    head = prompt.text[: prompt.text.index(loaded.fim.suffix_token) + len(loaded.fim.suffix_token)]
    assert above.text == head + loaded.fim.middle_token
    assert "return x" in prompt.text and above.healed == prompt.healed


def test_choose_answers_with_the_reading_whose_line_the_model_is_surer_of(loaded):
    """At each blank line: `above` and `around` each decode one prompt; `choose` answers with
    one of their texts, the around one exactly when its first line scored higher, and reports
    both scores; speculative decoding chooses the same."""
    assert len(CUT_ROWS) >= 8
    engine = LocalBackend(loaded, speculative=False, time_passes=False)
    fast = LocalBackend(loaded, time_passes=False)
    won = {"above": 0, "around": 0}
    for row in CUT_ROWS:
        above = engine.complete(request(row, "above"))
        around = engine.complete(request(row, "around"))
        chosen = engine.complete(request(row))
        assert above.prompt_tokens < around.prompt_tokens, row  # the code below is left out
        if row == CUT_ROWS[0]:  # the default reading
            default = dataclasses.replace(
                request(row), line_start_reading=Settings().completion.line_start_reading
            )
            assert default.line_start_reading == "above"
            assert engine.complete(default).text == above.text
        scores = chosen.stats["readingScores"]
        winner = "around" if chosen.stats.get("reading") == "around" else "above"
        assert (winner == "around") == (scores["around"] > scores["above"]), row
        assert chosen.text == (around if winner == "around" else above).text, row
        assert chosen.prompt_tokens == (around if winner == "around" else above).prompt_tokens
        won[winner] += 1
        speculative = fast.complete(request(row, plain=False))
        assert speculative.text == chosen.text, row
        assert speculative.stats["readingScores"] == pytest.approx(scores, abs=1e-3), row
    assert all(won.values()), won  # both readings answered somewhere


def test_the_second_reading_never_runs_past_the_first_responses_deadline(loaded):
    """With a deadline already passed the first reading answers alone, with one far off both
    are read; at a body's new first
    line with the body below, and not at a line start (code after the cursor), nothing is read
    twice."""
    engine = LocalBackend(loaded, speculative=False, time_passes=False)
    shown = []
    for row in CUT_ROWS[:3]:
        late = engine.complete(
            request(row, first_response_ms=300),
            deadline=time.monotonic() - 1,
            on_partial=shown.append,
        )
        assert "readingScores" not in late.stats
        assert late.text == engine.complete(request(row, "above")).text
    roomy = engine.complete(
        request(CUT_ROWS[0], first_response_ms=300),
        deadline=time.monotonic() + 60,
        on_partial=(early := []).append,
    )
    assert "readingScores" in roomy.stats and not early  # both read, nothing shown early
    first = engine.complete(request(FIRST_OF_BODY))
    assert "readingScores" not in first.stats
    assert first.text == engine.complete(request(FIRST_OF_BODY, "around")).text
    row = CUT_ROWS[0]
    line = LINES[row]
    mid = CompletionRequest(
        text=CODE,
        line=row,
        column=len(line) - 2,
        multiline="never",
        max_new_tokens=8,
        first_response_ms=0,
        alternatives=1,
    )
    assert "readingScores" not in engine.complete(mid).stats
