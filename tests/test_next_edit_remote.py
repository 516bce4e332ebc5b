"""Next edits through a serving engine, against a stand-in backend (no HTTP): the raw prompt
text, the bound and the stops sent, the answer read back into the same proposals as the local
model's, and every failure an empty answer with a reason. The real engine:
test_next_edit_llama_cpp.py."""

from __future__ import annotations

from memosight_lsp.engines import EngineError, EngineInfo, EngineResult, GenerateRequest
from memosight_lsp.engines.base import PromptPieces
from memosight_lsp.engines.llama_cpp import LlamaCppClient
from memosight_lsp.engines.ollama import OllamaClient
from memosight_lsp.engines.openai import OpenAIClient
from memosight_lsp.inference.fim import FORMATS_BY_NAME
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.predict import NextEdit, NextEditRequest, rewrite_budget
from memosight_lsp.next_edit.remote import RemoteNextEditor
from memosight_lsp.pipeline.engine_backend import EngineBackend

BEFORE = "def total(xs):\n    acc = 0\n    for x in xs:\n        acc += x\n    return acc\n"
AFTER = BEFORE.replace("    acc = 0", "    acc = 1")  # no rename: the model's to answer
NEXT = AFTER.replace("    return acc", "    return acc + 1")


class StandIn:
    """A backend that answers with a scripted text, in pieces, or fails as told."""

    engine = "llama.cpp"
    url = "http://stand-in"

    def __init__(self, text: str = "", finish: str = "stop", fail: EngineError | None = None):
        self.text, self.finish, self.fail = text, finish, fail
        self.requests: list[GenerateRequest] = []
        self.probe_fail: EngineError | None = None

    def probe(self, deadline: float) -> EngineInfo:
        if self.probe_fail is not None:
            raise self.probe_fail
        return EngineInfo(engine="llama.cpp", url=self.url, model="served.gguf", fim=None)

    def has_token(self, token: str, deadline: float) -> bool:
        return token in ("<|im_start|>", "<|im_end|>")

    def tokenize(self, text: str, deadline: float) -> list[int]:
        return list(range(len(text) // 4))

    def generate(self, request, *, on_text, cancelled) -> EngineResult:
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        for i in range(0, len(self.text), 7):
            if on_text(self.text[: i + 7]):
                return EngineResult(text=self.text[: i + 7], finish="enough")
        return EngineResult(text=self.text, finish=self.finish, completion_tokens=40)


def request() -> NextEditRequest:
    history = EditHistory()
    history.opened("u", BEFORE)
    history.changed("u", AFTER)
    return NextEditRequest(
        text=AFTER,
        cursor_line=1,
        cursor=AFTER.index("1\n") + 1,
        edits=tuple(history.recent("u")),
        path="calc.py",
        language_id="python",
        max_wait_ms=2000,
    )


def predict(backend: StandIn) -> NextEdit | str:
    return RemoteNextEditor(EngineBackend(backend)).predict(request())


def test_the_engine_gets_the_raw_prompt_bounded_and_its_answer_becomes_the_edit():
    backend = StandIn(NEXT + "```")  # ChatML in the vocabulary: the chat family
    result = predict(backend)
    assert isinstance(result, NextEdit) and result.family == "chat" and result.complete
    (sent,) = backend.requests
    assert sent.raw and sent.stop == ("```", "<|im_end|>")
    assert sent.prompt.text.startswith("<|im_start|>system\n")
    assert sent.prompt.text.endswith("<|im_start|>assistant\n```python\n")
    assert sent.max_tokens == rewrite_budget(len(AFTER + "```") // 4)
    assert [(AFTER[h.start : h.end], h.new_text) for h in result.hunks] == [("", " + 1")]
    assert result.hunks[0].start == AFTER.index("\n", AFTER.index("return acc"))
    assert result.model == "served.gguf" and result.stats["engine"]["name"] == "llama.cpp"


def test_an_engine_stopped_at_the_end_marker_completed_the_rewrite():
    # llama.cpp and the OpenAI API leave the stop string out of the text: "stop" closes it,
    # so the window's last lines left out are deleted; cut at max_tokens they are not reached.
    short = "".join(AFTER.splitlines(keepends=True)[:3])
    stopped = predict(StandIn(short, finish="stop"))
    assert isinstance(stopped, NextEdit) and stopped.complete
    assert [AFTER[h.start : h.end] for h in stopped.hunks] == [AFTER[len(short) :]]
    cut = predict(StandIn(short, finish="length"))
    assert isinstance(cut, NextEdit) and not cut.complete and cut.hunks == []
    assert cut.reason == "the rewrite was cut short unchanged"


def test_a_rewrite_cut_by_the_deadline_proposes_only_whole_lines_it_wrote():
    cut = NEXT[: NEXT.index("acc + 1") + 5]
    result = predict(StandIn(cut, finish="deadline"))
    assert isinstance(result, NextEdit) and not result.complete
    assert result.hunks == [] and result.reason == "the rewrite was cut short unchanged"


def test_engine_failures_are_empty_answers_with_a_reason():
    down = StandIn()
    down.probe_fail = EngineError("http://stand-in: connection refused", "unreachable")
    engine = EngineBackend(down)
    editor = RemoteNextEditor(engine)
    answer = editor.predict(request())
    assert answer == "engine unavailable: http://stand-in: connection refused"
    assert engine.health.up is False
    assert isinstance(editor.predict(request()), str)  # in backoff: answered at once
    slow = predict(StandIn(fail=EngineError("no answer", "timeout")))
    assert slow == "engine too slow: no answer within completion.maxWaitMs"
    garbled = predict(StandIn(fail=EngineError("stand-in: not JSON", "malformed")))
    assert isinstance(garbled, str) and "not JSON" in garbled


def test_a_raw_request_skips_engine_side_infill_and_fim_stops():
    qwen = FORMATS_BY_NAME["qwen"]
    pieces = PromptPieces(text="PROMPT", prefix="PROMPT", suffix="")
    raw = GenerateRequest(prompt=pieces, max_tokens=8, deadline=1e12, stop=("END",), raw=True)
    llama = LlamaCppClient("http://x")
    llama.info = EngineInfo(engine="llama.cpp", url="http://x", model="m", fim=qwen, infill=True)
    path, body = llama.body(raw)
    assert path == "/completion" and body["prompt"] == "PROMPT" and body["stop"] == ["END"]
    ollama = OllamaClient("http://x")
    ollama.info = EngineInfo(engine="ollama", url="http://x", model="m", fim=qwen, infill=True)
    sent = ollama.body(raw)
    assert sent["raw"] and sent["prompt"] == "PROMPT" and sent["options"]["stop"] == ["END"]
    openai = OpenAIClient("http://x")
    openai.info = EngineInfo(engine="openai", url="http://x", model="m", fim=qwen)
    assert openai.stop_strings(raw) == ["END"]
