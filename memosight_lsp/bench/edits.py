"""`memosight bench edits`: next-edit prediction on seeded edits of held-out third-party code.

Cases come from the Python projects of bench/corpora.py (pinned archives, which no model here
was trained on), sampled with `--seed`, `--cases` per kind:

- rename: a local variable renamed at its definition (its first assignment in a function; its
  first use within 15 lines after it); expected: its next occurrence in the function (that use,
  or an assignment before it) renamed the same way;
- string: a string constant used exactly twice in a function changed at its first use;
  expected: the second changed the same way;
- callsite: the last parameter of a function or method removed at its definition; expected:
  the same argument removed at the nearest call below it (`callsite_cases`);
- control: a string constant used once in its file changed; no edit is expected.

Each case is the file before the edit, the edit as the buffer's recent edit (EditHistory), the
cursor at the end of the edited text; the prediction is next_edit/predict.py's, as the server
makes it: the rename follow-up first, then the string and the call-site follow-ups (no model;
`renameAnswers`, `stringAnswers` and `callsiteAnswers` count the cases each answered), else the
model (window, prompt, window draft, post-processing), each case in a buffer of its own (its
first request: the prompts' common head, prefilled after the load as the server does, is the
cache it starts from). `--model-only` skips the
follow-ups: the model alone, as before them. `--follow-ups-only` loads no model: the follow-ups
alone (a case they do not answer proposes nothing), in seconds. Exact match: the proposed edit
nearest after the cursor makes the same text as the expected one (`_new` inserted after `value`
is `value` replaced by `value_new`). False proposal: a control case with any edit proposed.

Speed: for the first `--plain-cases` cases of each kind the rewrite is decoded again with plain
greedy decoding; the tokens must be the same (`identical`; `samePrefixCutByTime`: the two were
cut by maxWaitMs at different lengths and agree up to the shorter), and tokens per second of the
rewrite (its decode, prefill apart) are reported with and without the window draft.

`--early-stop on|off|both`: rewrites end once re-converged after a change or copying past
`--copy-lines` below the cursor and the last edit (next_edit/predict.py; on, as the server
does), or not; `both` predicts each case both ways (the order turned every other case) and
reports the kinds without it under `withoutEarlyStop`, with how
many of the model's answers proposed the same edits both ways (`earlyStopCompared`).

`--pause-ms N[,M...]`: as an editor asks, after a pause: the edit made, the server's pre-warm of
the next-edit prompt started (session/next_edit_flow.py: NextEditor.prewarm on the prompt
expected with the cursor at the end of the edit), N ms waited, then the request, which cancels
the pre-warm (waiting for its chunk) and is timed from there: what the user waits after the
pause. 0: no pre-warm (the request right after the edit). The model runs on one thread, as on
the server's model worker (`after_pause`).
Default 500 (the editors' nextEdit.debounceMs). The local model only.

Several values of `--pause-ms` or `--copy-lines` (comma-separated): each case is predicted with
each combination (own buffers, the order turned every other case); the last of both is the
kinds' row, the others under `others` ("500ms,8lines"), and `variantsCompared` says how many of
the model's answers had the same tokens and the same proposals with the first and the last.

`--llama-server URL`: the model's rewrite comes from that llama.cpp server instead (as the
server's next edits with model.backend llama.cpp: next_edit/remote.py); no local
model is loaded and there are no speed rows. `--prompt-format` sets nextEdit.promptFormat.

Prints JSON: per kind, cases, exact matches (share), proposals, latency p50/p90 of the whole
prediction (prompt, prefill, rewrite, diff), tokens per pass, up to 4 missed cases (`examples`);
overall rewrite tokens/s with the draft and plain, the speed-up, and how many compared rewrites
were identical; per case (the last variant's answer), where a model answer's time went after
the request (`after_request`: the wait for the pre-warm's chunk, prefill, decode, passes).
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memosight_lsp.bench import corpora
from memosight_lsp.commands.common import EMBEDDED
from memosight_lsp.engines.llama_cpp import LlamaCppClient
from memosight_lsp.inference.loading import load_model
from memosight_lsp.inference.speculative import SpeculativeDecoder
from memosight_lsp.next_edit.edit_history import EditHistory
from memosight_lsp.next_edit.local import NextEditor
from memosight_lsp.next_edit.predict import (
    COPY_LINES,
    LINES_BEFORE,
    WINDOW_LINES,
    Hunk,
    NextEdit,
    NextEditRequest,
    call_site_follow_up_edit,
    cursor_after,
    rename_follow_up_edit,
    string_follow_up_edit,
)
from memosight_lsp.next_edit.prompt import FAMILIES
from memosight_lsp.next_edit.remote import RemoteNextEditor
from memosight_lsp.pipeline.engine_backend import EngineBackend
from memosight_lsp.session.stats import percentile

KINDS = ("rename", "string", "callsite", "control")
# As the server tries them (session/next_edit_flow.py), before the model.
FOLLOW_UPS = (rename_follow_up_edit, string_follow_up_edit, call_site_follow_up_edit)
EARLY_STOP_MODES = {"on": (True,), "off": (False,), "both": (False, True)}
MAX_FUNCTION_LINES = 60
MAX_USE_DISTANCE = 15  # lines between the edit and the expected edit: within the window
# Lines from an edited definition to a call the window still reaches (it starts 8 lines above
# the edit and holds 30: next_edit.WINDOW_LINES).
MAX_CALL_DISTANCE = 21


@dataclass(frozen=True, kw_only=True)
class EditCase:
    kind: str
    path: str
    before: str  # the file before the user's edit
    after: str  # the file after it: what the buffer holds
    cursor_line: int
    cursor: int  # offset in `after`: the end of the edited text
    expected: Hunk | None  # in `after`'s offsets; None: no edit expected


def offset_of(lines: list[str], line: int, column: int) -> int:
    """Offset of (1-based line, 0-based UTF-8 byte column) in the text of `lines`."""
    head = "".join(lines[: line - 1])
    return len(head) + len(lines[line - 1].encode()[:column].decode(errors="ignore"))


def replaced(text: str, start: int, old: str, new: str) -> str:
    assert text[start : start + len(old)] == old
    return text[:start] + new + text[start + len(old) :]


def rename_cases(path: str, text: str, tree: ast.AST) -> Iterator[EditCase]:
    lines = text.splitlines(keepends=True)
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if (func.end_lineno or func.lineno) - func.lineno > MAX_FUNCTION_LINES:
            continue
        names = [n for n in ast.walk(func) if isinstance(n, ast.Name)]
        names.sort(key=lambda n: (n.lineno, n.col_offset))
        for i, node in enumerate(names):
            if not isinstance(node.ctx, ast.Store) or len(node.id) < 3:
                continue
            if any(n.id == node.id for n in names[:i]):
                continue  # not its first assignment
            uses = [n for n in names[i + 1 :] if n.id == node.id and isinstance(n.ctx, ast.Load)]
            if not uses or uses[0].lineno - node.lineno > MAX_USE_DISTANCE:
                continue
            if uses[0].lineno == node.lineno:
                continue
            new = f"{node.id}_new"
            at = offset_of(lines, node.lineno, node.col_offset)
            after = replaced(text, at, node.id, new)
            # The next occurrence: the first use, or an assignment (`x += 1`) before it.
            following = next(n for n in names[i + 1 :] if n.id == node.id)
            use = offset_of(lines, following.lineno, following.col_offset) + len(new) - len(node.id)
            yield EditCase(
                kind="rename",
                path=path,
                before=text,
                after=after,
                cursor_line=node.lineno - 1,
                cursor=at + len(new),
                expected=Hunk(use, use + len(node.id), new),
            )
            break  # one per function


def string_cases(path: str, text: str, tree: ast.AST) -> Iterator[EditCase]:
    """string (a constant used twice in a function) and control (used once in the file)."""
    lines = text.splitlines(keepends=True)
    counts: dict[str, int] = {}
    constants = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and 3 <= len(n.value) <= 30
        and n.value.isidentifier()
        and n.lineno == n.end_lineno
    ]
    for node in constants:
        value = node.value
        assert isinstance(value, str)
        counts[value] = counts.get(value, 0) + 1
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        inside = [
            n for n in constants if func.lineno < n.lineno <= (func.end_lineno or func.lineno)
        ]
        inside.sort(key=lambda n: (n.lineno, n.col_offset))
        for i, node in enumerate(inside):
            value = node.value
            assert isinstance(value, str)
            quote = lines[node.lineno - 1].encode()[node.col_offset : node.col_offset + 1]
            if quote not in (b"'", b'"'):
                continue  # a prefixed or triple-quoted string
            at = offset_of(lines, node.lineno, node.col_offset) + 1
            new = f"{value}_new"
            if counts[value] == 1:
                yield EditCase(
                    kind="control",
                    path=path,
                    before=text,
                    after=replaced(text, at, value, new),
                    cursor_line=node.lineno - 1,
                    cursor=at + len(new),
                    expected=None,
                )
                continue
            twins = [n for n in inside[i + 1 :] if n.value == value]
            if len(twins) != 1 or any(n.value == value for n in inside[:i]):
                continue  # used exactly twice in the function: this one and its twin
            if twins[0].lineno == node.lineno:
                continue
            if twins[0].lineno - node.lineno > MAX_USE_DISTANCE:
                continue
            second = offset_of(lines, twins[0].lineno, twins[0].col_offset) + 1
            second += len(new) - len(value)
            yield EditCase(
                kind="string",
                path=path,
                before=text,
                after=replaced(text, at, value, new),
                cursor_line=node.lineno - 1,
                cursor=at + len(new),
                expected=Hunk(second, second + len(value), new),
            )


def callsite_cases(path: str, text: str, tree: ast.AST) -> Iterator[EditCase]:
    """callsite: the last parameter of a function or method removed at its definition; the
    expected edit is the same argument removed at the nearest call below it (`name(...)`, or
    `x.name(...)` for a method: self / cls not passed), positional arguments only, the last two
    on one line, within the window's reach."""
    lines = text.splitlines(keepends=True)
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name | ast.Attribute)
        and not n.keywords
        and len(n.args) >= 2
        and not any(isinstance(a, ast.Starred) for a in n.args)
        and n.args[-2].end_lineno == n.args[-1].end_lineno == n.args[-1].lineno
    ]
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = func.args
        if params.vararg or params.kwarg or params.kwonlyargs or params.defaults:
            continue
        names = params.posonlyargs + params.args
        method = bool(names) and names[0].arg in ("self", "cls")
        passed = len(names) - method
        if passed < 2 or names[-2].lineno != names[-1].lineno:
            continue
        below = [
            c
            for c in calls
            if _calls(c, func.name, method)
            and len(c.args) == passed
            and func.lineno < c.lineno <= func.lineno + MAX_CALL_DISTANCE
        ]
        if not below:
            continue
        call = min(below, key=lambda c: (c.lineno, c.col_offset))
        last, before_last = names[-1], names[-2]
        cut = offset_of(lines, before_last.lineno, before_last.end_col_offset or 0)
        cut_end = offset_of(lines, last.lineno, last.end_col_offset or 0)
        start = offset_of(lines, call.args[-2].lineno, call.args[-2].end_col_offset or 0)
        stop = offset_of(lines, call.args[-1].lineno, call.args[-1].end_col_offset or 0)
        shift = cut_end - cut  # the removed parameter comes before the call
        yield EditCase(
            kind="callsite",
            path=path,
            before=text,
            after=text[:cut] + text[cut_end:],
            cursor_line=before_last.lineno - 1,
            cursor=cut,
            expected=Hunk(start - shift, stop - shift, ""),
        )


def _calls(call: ast.Call, name: str, method: bool) -> bool:
    """Whether `call` calls the function `name` (a method: through an attribute)."""
    if method:
        return isinstance(call.func, ast.Attribute) and call.func.attr == name
    return isinstance(call.func, ast.Name) and call.func.id == name


def make_cases(
    per_kind: int, seed: int, kinds: tuple[str, ...] = KINDS
) -> dict[str, list[EditCase]]:
    found: dict[str, list[EditCase]] = {kind: [] for kind in KINDS}
    for project in corpora.projects(["python"]):
        root = corpora.fetch(project)
        for path in corpora.source_files(root, "python"):
            text = path.read_text(encoding="utf-8", errors="replace")
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            name = f"{project.key}/{path.relative_to(root)}"
            found_here = [
                *rename_cases(name, text, tree),
                *string_cases(name, text, tree),
                *callsite_cases(name, text, tree),
            ]
            for case in found_here:
                found[case.kind].append(case)
    rng = random.Random(seed)
    chosen = {kind: rng.sample(cases, min(per_kind, len(cases))) for kind, cases in found.items()}
    return {kind: cases for kind, cases in chosen.items() if kind in kinds}  # the same samples


def request_for(
    case: EditCase,
    max_wait_ms: int,
    plain: bool = False,
    prompt_format: str = "auto",
    copy_lines: int = COPY_LINES,
    lines_before: int = LINES_BEFORE,
) -> NextEditRequest:
    history = EditHistory()
    history.opened(case.path, case.before)
    history.changed(case.path, case.after)
    return NextEditRequest(
        text=case.after,
        cursor_line=case.cursor_line,
        cursor=case.cursor,
        edits=tuple(history.recent(case.path)),
        path=case.path,
        language_id="python",
        max_wait_ms=max_wait_ms,
        plain=plain,
        prompt_format=prompt_format,
        copy_lines=copy_lines,
        # Fewer lines above: the window shorter by as many, the same lines below.
        lines_before=lines_before,
        window_lines=WINDOW_LINES - (LINES_BEFORE - lines_before),
    )


def predict(
    editor: NextEditor | RemoteNextEditor | None, request: NextEditRequest, model_only: bool
) -> NextEdit:
    """As the server answers: the rename follow-up when the edit was a rename, the string
    follow-up when it changed a string constant used again in its scope, the call-site
    follow-up when it removed a parameter, else the model (an engine's failure: no edit, its
    reason; no editor: no edit)."""
    if not model_only:
        for follow_up_edit in FOLLOW_UPS:
            follow_up = follow_up_edit(request)
            if follow_up is not None:
                return follow_up
    if editor is None:
        return NextEdit(hunks=[], reason="no follow-up, and no model (--follow-ups-only)")
    started = time.perf_counter()
    result = editor.predict(request)
    if isinstance(result, str):
        return NextEdit(hunks=[], reason=result, total_ms=(time.perf_counter() - started) * 1000)
    return result


def after_pause(
    editor: NextEditor | RemoteNextEditor | None,
    request: NextEditRequest,
    model_only: bool,
    pause_ms: int,
) -> NextEdit:
    """As the server answers a request sent `pause_ms` after the edit: the pause's pre-warm
    (the local model's, when no follow-up answers) runs meanwhile; the request cancels it,
    waits for its chunk and predicts. The latency is from the request (what the user waits
    after the pause). The pre-warm and the prediction run on this thread, as on the server's
    one model worker; a timer thread makes the request (it runs no model): a second thread
    running the model would have OpenMP pools of its own beside this one's, more threads
    than cores, and libgomp then lets its idle workers sleep between operations, each pass
    of either thread slower for waking them (docs/next-edit.md)."""
    follows = not model_only and any(find(request) for find in FOLLOW_UPS)
    if pause_ms <= 0 or not isinstance(editor, NextEditor) or follows:
        time.sleep(max(0, pause_ms) / 1000)
        return predict(editor, request, model_only)
    cursor = cursor_after(request.edits)
    assert cursor is not None
    guess = replace(request, cursor=cursor, cursor_line=request.text.count("\n", 0, cursor))
    stop = threading.Event()
    asked: list[float] = []

    def ask() -> None:  # the request: it cancels the pre-warm, which ends at its next chunk
        asked.append(time.perf_counter())
        stop.set()

    timer = threading.Timer(pause_ms / 1000, ask)
    timer.start()
    report = editor.prewarm(guess, cancelled=stop.is_set)
    stop.wait()  # a pre-warm done before the pause's end: the request comes at the end
    timer.join()
    waited = time.perf_counter()
    result = predict(editor, request, model_only)
    result.total_ms = (time.perf_counter() - asked[0]) * 1000
    result.stats["prewarmWaitMs"] = round((waited - asked[0]) * 1000, 1)
    result.stats["prewarm"] = report
    return result


def after_request(result: NextEdit) -> dict[str, Any]:
    """Where a model answer's time went after the request: the prefill of what the buffer's
    cache (the pause's pre-warm) did not hold, and the rewrite's decode, pass by pass (tokens
    written per verification pass, drafted tokens per pass)."""
    if result.source != "model" or not result.forward_passes:
        return {}
    passes = max(1, result.forward_passes - 1)
    stats = result.stats
    return {
        "prefillMs": round(result.prefill_ms, 1),
        "prefilledTokens": result.prompt_tokens - stats.get("reusedPromptTokens", 0),
        "decodeMs": round(result.decode_ms, 1),
        "passes": passes,
        "tokensPerPass": round(result.new_tokens / passes, 1),
        "draftedPerPass": round(stats.get("draftedTokens", 0) / passes, 1),
        # The request waited for the pre-warm's running chunk (its tokens are reused).
        "prewarmWaitMs": stats.get("prewarmWaitMs", 0.0),
        "prewarm": stats.get("prewarm"),
    }


def applied(text: str, hunk: Hunk) -> str:
    return text[: hunk.start] + hunk.new_text + text[hunk.end :]


class KindTally:
    """One kind's results, one way of decoding: what the report says of it."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.prefills: list[float] = []
        self.prompts: list[float] = []  # prompt tokens of the model's rewrites
        self.reused: list[float] = []  # of which in the buffer's cache already
        self.prewarmed: list[float] = []  # of which the pause's pre-warm prefilled
        self.decodes: list[float] = []  # new tokens per second of the rewrites' decode
        self.passes: list[float] = []
        self.examples: list[dict[str, Any]] = []
        self.exact = self.proposed = self.by_rename = self.by_string = self.by_callsite = 0
        self.cut_by_time = self.early_stops = self.bounded = 0

    def add(self, case: EditCase, result: NextEdit) -> None:
        self.by_rename += result.source == "rename"
        self.by_string += result.source == "string"
        self.by_callsite += result.source == "callsite"
        self.latencies.append(result.total_ms)
        if result.source == "model" and result.new_tokens:
            self.prefills.append(result.prefill_ms)
            self.prompts.append(result.prompt_tokens)
            self.reused.append(result.stats.get("reusedPromptTokens", 0))
            self.prewarmed.append(result.stats.get("prewarmedTokens", 0))
            self.decodes.append(result.new_tokens / max(result.decode_ms, 1.0) * 1000)
        self.cut_by_time += result.stop_reason in ("time", "deadline")
        self.early_stops += result.stop_reason == "converged"
        self.bounded += result.stop_reason == "bounded"
        if result.new_tokens and result.forward_passes:  # an engine's are not counted
            self.passes.append(result.new_tokens / max(1, result.forward_passes - 1))
        cursor = sum(len(line) for line in case.after.splitlines(True)[: case.cursor_line])
        nearest = next((h for h in result.hunks if h.start >= cursor), None)
        self.proposed += bool(result.hunks)
        self.exact += (
            case.expected is not None
            and nearest is not None
            and applied(case.after, nearest) == applied(case.after, case.expected)
        )
        missed = (case.expected is None) == bool(result.hunks) or (
            case.expected is not None and nearest != case.expected
        )
        if len(self.examples) < 4 and missed:
            self.examples.append(
                {
                    "path": case.path,
                    "line": case.cursor_line,
                    "expected": None if case.expected is None else case.expected.new_text,
                    "proposed": [(case.after[h.start : h.end], h.new_text) for h in result.hunks],
                    "reason": result.reason,
                }
            )

    def summary(self, kind: str, cases: int) -> dict[str, Any]:
        control = kind == "control"
        return {
            "cases": cases,
            "exactMatch": None if control else self.exact,
            "exactShare": None if control or not cases else round(self.exact / cases, 3),
            "proposals": self.proposed,
            "renameAnswers": self.by_rename,
            "stringAnswers": self.by_string,
            "callsiteAnswers": self.by_callsite,
            "falseProposalShare": round(self.proposed / cases, 3) if control and cases else None,
            "latencyMsP50": percentile(self.latencies, 50),
            "latencyMsP90": percentile(self.latencies, 90),
            # The model's rewrites: prefill (an engine's: to its first token), decode rate, how
            # many maxWaitMs cut short and how many ended early, re-converged after a change.
            "prefillMsP50": percentile(self.prefills, 50),
            "promptTokensP50": percentile(self.prompts, 50),
            "reusedPromptTokensP50": percentile(self.reused, 50),
            "prewarmedTokensP50": percentile(self.prewarmed, 50),
            "decodeTokensPerSecondP50": percentile(self.decodes, 50),
            "cutByTime": self.cut_by_time,
            "earlyStops": self.early_stops,
            "boundedStops": self.bounded,
            "tokensPerPass": round(statistics.mean(self.passes), 2) if self.passes else None,
            "examples": self.examples,
        }


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    editor: NextEditor | RemoteNextEditor | None
    costs = None
    if args.follow_ups_only:
        model_name, editor = None, None
        args.plain_cases = 0  # no rewrite to time
    elif args.llama_server:
        engine = EngineBackend(LlamaCppClient(args.llama_server), timeout_s=30)
        info = engine.connect()
        if info is None:
            raise OSError(f"no llama.cpp server at {args.llama_server}: {engine.health.message}")
        model_name, costs, editor = f"{info.model} (llama.cpp)", None, RemoteNextEditor(engine)
        args.plain_cases = 0  # the speed rows are the local decoder's
    else:
        loaded = load_model(None if args.model == EMBEDDED else args.model, device="cpu")
        costs = SpeculativeDecoder().measure_costs(loaded.model, 512)
        model_name, editor = loaded.name, NextEditor(loaded, costs)
        # The prompts' common head, prefilled as the server does once the model is loaded
        # (session/next_edit_flow.py): no case pays for it.
        editor.prepare_head(
            NextEditRequest(text="", cursor_line=0, prompt_format=args.prompt_format)
        )
    # The early stop each case is predicted with; both: without it, then with it (the order
    # turned every other case, so that a machine getting busier weighs on both alike).
    modes = EARLY_STOP_MODES[args.early_stop]
    pauses = [int(p) for p in str(args.pause_ms).split(",")]
    copies = [int(c) for c in str(args.copy_lines).split(",")]
    settings = [(pause, copy) for pause in pauses for copy in copies]
    variants = [(mode, setting) for mode in modes for setting in settings]
    last_setting = settings[-1]
    by_pause: dict[str, Any] = {
        "compared": 0,
        "sameTokens": 0,
        "samePrefixCutByTime": 0,  # cut by maxWaitMs at different lengths, the same up to there
        "sameProposals": 0,
        "differ": [],
    }
    per_case: list[dict[str, Any]] = []  # the last variant's answer per case (runs compared)
    cases = make_cases(args.cases, args.seed, tuple(args.kinds.split(",")))
    kinds: dict[str, Any] = {}
    speed = {"draftTokens": 0, "draftMs": 0.0, "plainTokens": 0, "plainMs": 0.0}
    identical = compared = same_prefix = 0
    both: dict[str, Any] = {
        "compared": 0,
        "sameProposals": 0,
        "earlyStops": 0,
        "stopped": [],  # per case it ended early: tokens and latency without it, then with it
        "differ": [],  # the cases whose proposals differ (up to 4)
    }
    for kind, chosen in cases.items():
        tallies = {variant: KindTally() for variant in variants}
        for i, case in enumerate(chosen):
            request = request_for(
                case,
                args.max_wait_ms,
                prompt_format=args.prompt_format,
                copy_lines=copies[-1],
                lines_before=args.lines_before,
            )
            answers: dict[tuple[bool, tuple[int, int]], NextEdit] = {}
            for mode, (pause, copy) in variants if i % 2 == 0 else variants[::-1]:
                # A buffer of its own per case and variant, as the server keys them: the first
                # request of a buffer (its prompt's common head reused, not the case's own).
                buffer_id = f"{case.path}:{case.cursor_line}#{mode}#{pause}#{copy}"
                asked = replace(request, early_stop=mode, buffer_id=buffer_id, copy_lines=copy)
                variant = (mode, (pause, copy))
                answers[variant] = after_pause(editor, asked, args.model_only, pause)
                tallies[variant].add(case, answers[variant])
            results = {mode: answers[mode, last_setting] for mode in modes}
            answer = answers[modes[-1], last_setting]
            per_case.append(
                {
                    "kind": kind,
                    "path": case.path,
                    "line": case.cursor_line,
                    "proposed": [(case.after[h.start : h.end], h.new_text) for h in answer.hunks],
                    "stopReason": answer.stop_reason,
                    "newTokens": answer.new_tokens,
                    "latencyMs": round(answer.total_ms, 1),
                    **after_request(answer),
                }
            )
            first, last = answers[modes[-1], settings[0]], answer
            if len(settings) > 1 and last.source == "model":
                by_pause["compared"] += 1
                by_pause["sameTokens"] += first.tokens == last.tokens
                shorter = min(len(first.tokens), len(last.tokens))
                by_pause["samePrefixCutByTime"] += (
                    first.tokens != last.tokens
                    and "time" in (first.stop_reason, last.stop_reason)
                    and first.tokens[:shorter] == last.tokens[:shorter]
                )
                by_pause["sameProposals"] += first.hunks == last.hunks
                if first.hunks != last.hunks and len(by_pause["differ"]) < 4:
                    by_pause["differ"].append({"path": case.path, "line": case.cursor_line})
            if len(modes) == 2 and results[True].source == "model":
                both["compared"] += 1
                same = results[True].hunks == results[False].hunks
                both["sameProposals"] += same
                if results[True].stop_reason in ("converged", "bounded"):
                    both["earlyStops"] += 1
                    both["stopped"].append(
                        {
                            "path": case.path,
                            "line": case.cursor_line,
                            "same": same,
                            "stopReason": results[True].stop_reason,
                            "newTokens": [results[m].new_tokens for m in modes],
                            "latencyMs": [round(results[m].total_ms) for m in modes],
                        }
                    )
                if not same and len(both["differ"]) < 4:
                    both["differ"].append(
                        {
                            "path": case.path,
                            "line": case.cursor_line,
                            **{
                                ("with" if mode else "without"): {
                                    "proposed": [
                                        (case.after[h.start : h.end], h.new_text)
                                        for h in results[mode].hunks
                                    ],
                                    "reason": results[mode].reason,
                                    "stopReason": results[mode].stop_reason,
                                    "newTokens": results[mode].new_tokens,
                                }
                                for mode in modes
                            },
                        }
                    )
            request = replace(request, early_stop=modes[-1], buffer_id=None)
            result = results[modes[-1]]
            if i < args.plain_cases and isinstance(editor, NextEditor):
                if result.source != "model":  # the speed rows time the model's rewrite
                    result = editor.predict(request)
                plain = editor.predict(replace(request, plain=True))
                compared += 1
                identical += plain.tokens == result.tokens
                # Both cut by maxWaitMs at different lengths: the same greedy tokens up to the end
                # of the shorter one.
                shorter = min(len(plain.tokens), len(result.tokens))
                timed = "time" in (plain.stop_reason, result.stop_reason)
                same_prefix += timed and plain.tokens[:shorter] == result.tokens[:shorter]
                speed["draftTokens"] += result.new_tokens
                speed["draftMs"] += result.decode_ms
                speed["plainTokens"] += plain.new_tokens
                speed["plainMs"] += plain.decode_ms
        kinds[kind] = tallies[modes[-1], last_setting].summary(kind, len(chosen))
        if len(modes) == 2:
            without = tallies[False, last_setting].summary(kind, len(chosen))
            kinds[kind]["withoutEarlyStop"] = without
        if len(settings) > 1:
            kinds[kind]["others"] = {
                f"{pause}ms,{copy}lines": tallies[modes[-1], (pause, copy)].summary(
                    kind, len(chosen)
                )
                for pause, copy in settings[:-1]
            }
    draft_rate = speed["draftTokens"] / (speed["draftMs"] / 1000) if speed["draftMs"] else None
    plain_rate = speed["plainTokens"] / (speed["plainMs"] / 1000) if speed["plainMs"] else None
    return {
        "model": model_name,
        "promptFormat": args.prompt_format,
        "seed": args.seed,
        "maxWaitMs": args.max_wait_ms,
        "modelOnly": args.model_only,
        "followUpsOnly": args.follow_ups_only,
        "earlyStop": args.early_stop,
        "copyLines": copies,
        "linesBefore": args.lines_before,
        "pauseMs": pauses,
        "kinds": kinds,
        # Several pauses or copy bounds: the model's answers with the first and the last.
        "variantsCompared": by_pause if len(settings) > 1 else None,
        # --early-stop both: the model's answers with and without it, case by case.
        "earlyStopCompared": both if len(modes) == 2 else None,
        "rewrite": {
            "compared": compared,
            "identical": identical,
            "samePrefixCutByTime": same_prefix,
            "tokensPerSecondDraft": round(draft_rate, 1) if draft_rate else None,
            "tokensPerSecondPlain": round(plain_rate, 1) if plain_rate else None,
            "speedup": round(draft_rate / plain_rate, 2) if draft_rate and plain_rate else None,
        },
        "cases": per_case,
        "costModelMs": costs.costs if costs else None,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memosight bench edits", description=__doc__)
    parser.add_argument("--model", default=EMBEDDED, help="model folder, .gguf file or embedded")
    parser.add_argument("--cases", type=int, default=12, help="cases per kind")
    parser.add_argument("--plain-cases", type=int, default=3, help="per kind, also decoded plain")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-wait-ms", type=int, default=20_000, help="per rewrite")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated, of " + ", ".join(KINDS)
    )
    parser.add_argument(
        "--model-only", action="store_true", help="no follow-ups: the model answers all"
    )
    parser.add_argument(
        "--follow-ups-only", action="store_true", help="no model: the follow-ups answer alone"
    )
    parser.add_argument(
        "--llama-server", metavar="URL", help="rewrite through this llama.cpp server instead"
    )
    parser.add_argument(
        "--prompt-format", default="auto", choices=("auto", *FAMILIES), help="nextEdit.promptFormat"
    )
    parser.add_argument(
        "--early-stop",
        default="on",
        choices=tuple(EARLY_STOP_MODES),
        help="end rewrites re-converged after a change (NextEditRequest.early_stop); both: "
        "each case without it and with it, side by side",
    )
    parser.add_argument(
        "--copy-lines",
        default=str(COPY_LINES),
        help="with the early stop, end an unchanged copy this many lines below the cursor and "
        f"the last edit (NextEditRequest.copy_lines; 0: never; default {COPY_LINES}); "
        "comma-separated: each case with each",
    )
    parser.add_argument(
        "--pause-ms",
        default="500",
        help="ms between the edit and the request, the pause's pre-warm running meanwhile "
        "(0: none); comma-separated: each case after each (default 500: the editors')",
    )
    parser.add_argument(
        "--lines-before",
        type=int,
        default=LINES_BEFORE,
        help="lines of the window above the cursor and the last edit, the window shorter by as "
        f"many fewer (NextEditRequest.lines_before; default {LINES_BEFORE})",
    )
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    try:
        report = run(args)
    except (corpora.CorpusError, OSError) as err:
        sys.stderr.write(f"memosight bench edits: {err}\n")
        return 2
    text = json.dumps(report, indent=2)
    sys.stdout.write(text + "\n")
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0
