"""One fully defaulted settings tree. camelCase on the wire (LSP settings), snake_case in Python.

`parse_settings` never raises: unknown keys and invalid values are reported and replaced by the
defaults, so a bad setting can never stop the server from serving.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin, get_type_hints

Device = Literal["auto", "cpu", "cuda"]
Dtype = Literal["auto", "float32", "bfloat16", "float16"]
Quantization = Literal["auto", "none", "int8", "int4", "gguf"]
# Where completions are computed: in this process, or by a serving engine over HTTP.
BackendName = Literal["local", "vllm", "llama.cpp", "ollama", "openai"]
MultilinePolicy = Literal["auto", "always", "never"]
MidWordPolicy = Literal["complete", "skip"]
LineStartReading = Literal["choose", "above", "around"]
# "lossless-draft": a compressed KV cache only drafts, output stays identical to greedy.
# "lossy-snapkv": decoding runs on the compressed cache, output may change (hence the name).
KvCompression = Literal["off", "lossless-draft", "lossy-snapkv"]

SECTION = "memosight"  # the settings section (workspace/configuration, the wrapper key)


@dataclass(kw_only=True)
class ModelSettings:
    # "auto": the best code model found on this machine (discovery/: Ollama, LM Studio,
    # llama.cpp's and the Hugging Face caches), else the embedded one; None: the embedded model.
    path: str | None = "auto"
    device: Device = "auto"  # auto: CUDA when available, else CPU
    # auto: bfloat16 on CUDA; on a CPU the fastest of float32 / bfloat16 / int8 for this model,
    # measured once per machine (inference/precision.py).
    dtype: Dtype = "auto"
    # Weight-only int8 / int4 of the linear layers (CPU). gguf: a .gguf file's own mix (each
    # weight int8 or int4 as the file stores it: what auto measures for one); on a model that is
    # not a GGUF file it means auto, with a warning (inference/loading.py).
    quantization: Quantization = "auto"
    fim_format: str = "auto"  # auto, none, qwen, starcoder, deepseek, codellama, codegemma
    # A serving engine instead of the in-process model (engines/): its base URL (None: the
    # engine's default port on 127.0.0.1), the model it serves (None: the one it serves),
    # the environment variable holding its API key (the key itself is never a setting) and
    # the deadline of one remote completion.
    backend: BackendName = "local"
    url: str | None = None
    name: str | None = None
    api_key_env: str | None = None
    timeout_ms: int = 5000
    # Load pickle weights (*.bin, *.pt: unpickling can run code). A user-only setting: honoured
    # from initializationOptions alone (see USER_ONLY), so a repository cannot turn it on.
    allow_pickle: bool = False


@dataclass(kw_only=True)
class CompletionSettings:
    max_new_tokens: int = 64
    multiline: MultilinePolicy = "auto"
    mid_word: MidWordPolicy = "complete"
    debounce_ms: int = 0  # server-side debounce; editors usually debounce themselves
    speculative: bool = True  # draft + verify; output is identical either way
    type_through: bool = True
    precompute_next: bool = True
    # Answer by then with what is verified so far (decoding goes on, for the next keystroke),
    # and size a cold prompt to the model's measured prefill rate (pipeline/latency.py);
    # 0: wait for the whole completion and pack the whole budget.
    first_response_ms: int = 300
    # No completion takes longer: past it decoding ends with what is verified, and a model job
    # that does not end (a stuck worker) is abandoned a little later (session/scheduler.py).
    max_wait_ms: int = 10_000
    # Items of an inline completion: the greedy suggestion first, then up to this many minus one
    # other likely beginnings the model nearly chose, a few tokens each (inference/branches.py);
    # 1: the greedy suggestion alone.
    alternatives: int = 3
    # At a line start (pipeline/readings.py): the prompt without the code below the cursor
    # (`above`: measured best with Qwen2.5-Coder-0.5B, docs/context.md), the fill-in-the-middle
    # prompt with it (`around`), or both and the line the model is surer of (`choose`).
    line_start_reading: LineStartReading = "above"


@dataclass(kw_only=True)
class ContextSettings:
    budget_tokens: int = 1024
    cross_file: bool = True
    # The most of the budget other files' code takes, in percent; the current file is packed
    # in the rest as it is alone (measured with `memosight bench quality`, docs/context.md).
    cross_file_share: int = 35
    # Windows of other files most like the lines above the cursor, with the lines that followed
    # them, first in that share (context/similar.py); 0: definitions only.
    similar_snippets: int = 4
    # Other files' code only where it is likely to pay, by each language's rule (context/pack.py,
    # GATE_RULES): a window of another file nearly like the code above the cursor, in Python
    # also a name near the cursor that another file defines; elsewhere the current file alone
    # (bench quality, docs/context.md).
    cross_file_gate: bool = True


@dataclass(kw_only=True)
class CompressionSettings:
    # Applied only where inference/compression_policy.py says it pays (long prompts, supported
    # architectures; lossless-draft not on CPU, where it measured slower).
    kv_compression: KvCompression = "off"
    kv_ratio: int = 4  # prompt positions per kept KV position
    min_prompt_tokens: int = 2048  # shorter prompts are never compressed (measured break-even)


# The next-edit prompt's format (next_edit/prompt.py); auto: by the model's name and
# vocabulary. Spelled here: config imports nothing else of the package.
NextEditFormat = Literal["auto", "chat", "plain", "zeta", "sweep"]


@dataclass(kw_only=True)
class NextEditSettings:
    # memosight/nextEdit's prompt family: zeta (Zed's Zeta), sweep (Sweep's next-edit models),
    # chat (instruction-tuned), plain (base models), or auto: picked by the model's name and
    # vocabulary, the local model's and a serving engine's alike.
    prompt_format: NextEditFormat = "auto"
    # Prefill the next-edit prompt of the buffer edited last while the user pauses, when the
    # model worker has nothing else to do (session/next_edit_flow.py); the answers are the same.
    prewarm: bool = True


@dataclass(kw_only=True)
class Settings:
    enable: bool = True
    # languageId -> enabled; languages not named are enabled.
    languages: dict[str, bool] = field(default_factory=dict)
    model: ModelSettings = field(default_factory=ModelSettings)
    completion: CompletionSettings = field(default_factory=CompletionSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    compression: CompressionSettings = field(default_factory=CompressionSettings)
    next_edit: NextEditSettings = field(default_factory=NextEditSettings)

    def language_enabled(self, language_id: str) -> bool:
        return self.enable and self.languages.get(language_id, True)


# Bounds of numeric settings: (minimum, maximum).
NUMERIC_BOUNDS: dict[str, tuple[int, int]] = {
    "max_new_tokens": (1, 1024),
    "debounce_ms": (0, 5000),
    "first_response_ms": (0, 60000),
    "max_wait_ms": (1000, 600_000),
    "alternatives": (1, 5),
    "budget_tokens": (0, 131072),
    "cross_file_share": (0, 100),
    "similar_snippets": (0, 16),
    "kv_ratio": (2, 16),
    "min_prompt_tokens": (0, 131072),
    "timeout_ms": (100, 120_000),
}


def camel_to_snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def snake_to_camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _check_value(name: str, hint: Any, value: Any) -> Any:
    """The value if it fits the type hint; raises ValueError with a readable reason otherwise."""
    origin = get_origin(hint)
    if origin is Literal:
        if value not in get_args(hint):
            choices = ", ".join(repr(c) for c in get_args(hint))
            raise ValueError(f"must be one of {choices}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be a whole number")
        low, high = NUMERIC_BOUNDS.get(name, (-(2**31), 2**31))
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise ValueError("must be a string")
        return value
    if origin is dict:
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, bool) for k, v in value.items()
        ):
            raise ValueError("must map language ids to true/false")
        return dict(value)
    # str | None
    if value is None or isinstance(value, str):
        return value or None
    raise ValueError("must be a string or null")


def _parse_into(cls: type, raw: Any, path: str, problems: list[str]) -> Any:
    if raw is None:
        return cls()
    if not isinstance(raw, dict):
        problems.append(f"{path or 'settings'}: must be an object")
        return cls()
    hints = get_type_hints(cls)
    fields_by_wire = {snake_to_camel(f.name): f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        f = fields_by_wire.get(key) or fields_by_wire.get(snake_to_camel(camel_to_snake(key)))
        where = f"{path}.{key}" if path else key
        if f is None:
            problems.append(f"{where}: unknown setting")
            continue
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[f.name] = _parse_into(hint, value, where, problems)
            continue
        try:
            values[f.name] = _check_value(f.name, hint, value)
        except ValueError as err:
            problems.append(f"{where}: {err}; using the default")
    return cls(**values)


def unwrap_settings(raw: Any) -> Any:
    """The settings tree out of what a client sends: {"memosight": {...}} or the tree itself.

    An object with a "memosight" key is a wrapper (the tree has no such setting): its value is
    the tree and the sections beside it (other servers' settings, as a client may push them
    all) are not ours. Anything else is taken as the tree.
    """
    if isinstance(raw, dict) and SECTION in raw:
        return raw[SECTION]
    return raw


# Settings a workspace must not choose (a repository can ship editor settings): honoured only
# from initializationOptions, which editors fill from the user's own configuration (VS Code:
# application-scoped settings, which workspace settings cannot set; Neovim: setup()).
USER_ONLY: tuple[tuple[str, str], ...] = (("model", "allowPickle"),)


def without_user_only(raw: Any, current: Settings) -> tuple[Any, list[str]]:
    """`raw` (a settings update from anywhere but initializationOptions) without the user-only
    settings, and the dotted names of those it tried to change (the same value is no attempt)."""
    if not isinstance(raw, dict):
        return raw, []
    refused: list[str] = []
    out = dict(raw)

    def spelled(name: Any, wire: str) -> bool:  # every spelling parse_settings accepts
        return name == wire or snake_to_camel(camel_to_snake(str(name))) == wire

    for section, key in USER_ONLY:
        for outer in [k for k in out if spelled(k, section) and isinstance(out[k], dict)]:
            part = dict(out[outer])
            for name in [k for k in part if spelled(k, key)]:
                value = part.pop(name)
                if value != getattr(getattr(current, section), camel_to_snake(key)):
                    refused.append(f"{section}.{key}")
            out[outer] = part
    if isinstance(out.get("memosight"), dict):  # a tree wrapped once more
        out["memosight"], more = without_user_only(out["memosight"], current)
        refused += more
    return out, refused


def parse_settings(raw: Any) -> tuple[Settings, list[str]]:
    """Settings from a camelCase JSON object, plus a list of problems (empty when all was valid).

    Accepts the object itself or one wrapped as {"memosight": {...}} (see unwrap_settings).
    """
    problems: list[str] = []
    settings = _parse_into(Settings, unwrap_settings(raw), "", problems)
    return settings, problems


def settings_to_wire(settings: Any) -> Any:
    """The camelCase JSON form (for documentation and the editors' defaults)."""
    if dataclasses.is_dataclass(settings) and not isinstance(settings, type):
        return {
            snake_to_camel(f.name): settings_to_wire(getattr(settings, f.name))
            for f in dataclasses.fields(settings)
        }
    if isinstance(settings, dict):
        return {k: settings_to_wire(v) for k, v in settings.items()}
    return settings
