"""A model's tokenizer read straight into the `tokenizers` library, without transformers.

Building a Hugging Face tokenizer is most of a cached model's load: transformers' Qwen2Tokenizer
parses tokenizer.json in Python and rebuilds the byte-level BPE. What that build ends with (its
`backend_tokenizer`, a `tokenizers.Tokenizer`) is kept here once, serialized, with the few
attributes the server reads (special token ids, the chat template); the next load reads it back
in Rust. The file itself is not a shortcut: `tokenizers` reading tokenizer.json directly gives
other tokens than transformers' rebuild for some texts.

A kept tokenizer is only used after it tokenized and decoded a fixed sample exactly as the
transformers tokenizer did (`SAMPLE`, and runs of token ids across the vocabulary); otherwise an
entry saying why is kept and every load builds the transformers tokenizer as before. Whatever
`FastTokenizer` does not implement (batch calls, saving, most chat templates) is answered by the
transformers tokenizer, built on first use: about a second that a first request would wait. So
the one conversation the server renders, a system turn and a user turn with the generation
prompt (the next-edit prompt), is kept as the texts the template puts around the two contents
(`chat_pieces`), where the template only places them, checked on TEMPLATE_SAMPLES.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from . import atomic_file

log = logging.getLogger(__name__)

# Bump when the entry's layout or the check changes: older entries are then built again.
FORMAT = 2
# The files a tokenizer is built from: what the cache key digests.
SOURCE_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
# Texts both tokenizers must agree on: code in several languages, indentation and tab runs,
# non-ASCII letters and symbols, CRLF, an emoji, and the FIM/special markers of the families.
SAMPLE = (
    "def area(width, height):\n    return width * height  # m²\n\n\nclass Box:\n\tpass\n",
    "function f(a: number): string {\r\n  return `${a}`;\r\n}\r\n",
    'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("héllo, wörld")\n}\n',
    'fn main() { let v: Vec<u8> = vec![0xff; 4]; println!("{:?}", v); } // 中文 🚀\n',
    "    \n        \n\t\t\t\n  x  =  1\n\n\n\n",
    "x = f(a , b) . c ; it 's don 't ? ! -- (see: [1] , {2})\n",
    "<|fim_prefix|>a = <|fim_suffix|>\n<|fim_middle|><|endoftext|><|file_sep|>",
    "<fim_prefix>x<fim_suffix>y<fim_middle><|fim▁begin|>z<|fim▁hole|><|fim▁end|><PRE> <SUF> <MID>",
    "",
)
# Contents no template could produce itself: where a template puts a system and a user turn.
PROBE = ("\x00system content\x00", "\x00user content\x00")
# (system, user) pairs the kept pieces must render exactly as the template does: code, a
# template's own syntax, special tokens, whitespace at the ends, an empty system turn.
TEMPLATE_SAMPLES = (
    ("You are a code editor.", "def f(x):\n    return {x: [1, 2]}\n```\n"),
    ("  spaced  \n", "{{ not a tag }} {% raw %} <|im_start|>user é 🚀\n\n"),
    ("", "x"),
)
# Token id runs decoded both ways: how many, and how long each.
DECODE_RUNS = 400
DECODE_RUN_LENGTH = 6


class FastTokenizer:
    """The tokenizer calls the server makes (encode, decode, the vocabulary, special ids) on a
    `tokenizers.Tokenizer`; anything else on the transformers tokenizer, built when first asked
    for by `build_full`."""

    def __init__(self, backend: Any, meta: dict[str, Any], build_full: Callable[[], Any]) -> None:
        self._backend = backend
        self._build_full = build_full
        self._full: Any = None
        self._full_lock = threading.Lock()
        self._vocab: dict[str, int] | None = None
        self.eos_token_id: int | None = meta.get("eos_token_id")
        self.bos_token_id: int | None = meta.get("bos_token_id")
        self.pad_token_id: int | None = meta.get("pad_token_id")
        self.all_special_ids: list[int] = list(meta.get("all_special_ids", []))
        self.chat_template: str | None = meta.get("chat_template")
        pieces = meta.get("chat_pieces")
        self._chat_pieces: list[str] | None = None
        if (
            isinstance(pieces, list)
            and len(pieces) == 3
            and all(isinstance(p, str) for p in pieces)
        ):
            self._chat_pieces = pieces
        self._length = int(meta["length"])

    def encode(self, text: str, add_special_tokens: bool = True, **options: Any) -> list[int]:
        if options:
            return self.full.encode(text, add_special_tokens=add_special_tokens, **options)
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False, **options) -> str:
        if options:
            return self.full.decode(token_ids, skip_special_tokens=skip_special_tokens, **options)
        if hasattr(token_ids, "tolist"):  # a tensor
            token_ids = token_ids.tolist()
        ids = [token_ids] if isinstance(token_ids, int) else list(token_ids)
        return self._backend.decode(ids, skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences: Sequence[Sequence[int]], **options: Any) -> list[str]:
        return [self.decode(ids, **options) for ids in sequences]

    def token_id(self, token: str) -> int | None:
        """One token's id (added tokens too), without building the whole vocabulary."""
        found = self._backend.token_to_id(token)
        return None if found is None else int(found)

    def apply_chat_template(self, conversation: Any, **options: Any) -> Any:
        """A system and a user turn rendered as text with the generation prompt, from the kept
        pieces; any other conversation or option from the transformers tokenizer."""
        pieces = self._chat_pieces
        wanted = {"tokenize": False, "add_generation_prompt": True}
        if pieces is not None and options == wanted and system_and_user(conversation):
            system, user = (message["content"] for message in conversation)
            return f"{pieces[0]}{system}{pieces[1]}{user}{pieces[2]}"
        return self.full.apply_chat_template(conversation, **options)

    def get_vocab(self) -> dict[str, int]:
        if self._vocab is None:
            self._vocab = self._backend.get_vocab(with_added_tokens=True)
        return dict(self._vocab)

    def __len__(self) -> int:
        return self._length

    @property
    def full(self) -> Any:
        """The transformers tokenizer, built once when something needs it."""
        with self._full_lock:
            if self._full is None:
                self._full = self._build_full()
            return self._full

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.full(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not found among this object's own: no full build for it
            raise AttributeError(name)
        return getattr(self.full, name)


class TokenLookup(Mapping[str, int]):
    """A FastTokenizer's vocabulary for `token in it` and `it[token]`: each lookup asks the
    backend, where `get_vocab()` would build a dict of the whole vocabulary first (a sizeable
    share of a cached load for a 150k-token vocabulary)."""

    def __init__(self, tokenizer: FastTokenizer) -> None:
        self._tokenizer = tokenizer

    def __getitem__(self, token: str) -> int:
        found = self._tokenizer.token_id(token) if isinstance(token, str) else None
        if found is None:
            raise KeyError(token)
        return found

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and self._tokenizer.token_id(token) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tokenizer.get_vocab())

    def __len__(self) -> int:
        return len(self._tokenizer.get_vocab())


def system_and_user(conversation: Any) -> bool:
    """A list of a system message and a user message, each with its text content alone."""
    return (
        isinstance(conversation, list)
        and [m.get("role") if isinstance(m, dict) else None for m in conversation]
        == ["system", "user"]
        and all(
            set(m) == {"role", "content"} and isinstance(m["content"], str) for m in conversation
        )
    )


def chat_pieces(full: Any) -> list[str] | None:
    """The texts the transformers tokenizer's chat template puts before, between and after a
    system and a user content (the generation prompt last), when the template places them
    unchanged: the pieces must render TEMPLATE_SAMPLES exactly as the template does. None
    otherwise, or without a template."""
    if not getattr(full, "chat_template", None):
        return None

    def render(system: str, user: str) -> str:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        text = full.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not isinstance(text, str):
            raise TypeError("the template did not render text")
        return text

    try:
        probe = render(*PROBE)
        if probe.count(PROBE[0]) != 1 or probe.count(PROBE[1]) != 1:
            return None
        before, rest = probe.split(PROBE[0])
        if PROBE[1] not in rest:  # the user turn before the system's: not the expected shape
            return None
        between, after = rest.split(PROBE[1])
        for system, user in TEMPLATE_SAMPLES:
            if render(system, user) != f"{before}{system}{between}{user}{after}":
                return None
    except Exception:  # a template that raises for this shape: rendered by transformers
        return None
    return [before, between, after]


def token_lookup(tokenizer: Any) -> Mapping[str, int]:
    """The vocabulary to look a few tokens up in: a TokenLookup for a FastTokenizer, else the
    tokenizer's own `get_vocab()`."""
    if isinstance(tokenizer, FastTokenizer):
        return TokenLookup(tokenizer)
    return tokenizer.get_vocab()


def load(folder: Path, build_full: Callable[[], Any]) -> Any:
    """The tokenizer of the model in `folder`: a FastTokenizer when one was kept and checked,
    else the transformers tokenizer `build_full` makes (kept for next time when it checks)."""
    entry_file = cache_file(folder)
    entry = _read(entry_file) if entry_file is not None else None
    if entry_file is not None and entry is not None and entry.get("meta") is not None:
        try:
            from tokenizers import Tokenizer

            backend = Tokenizer.from_file(str(backend_file(entry_file)))
            return FastTokenizer(backend, entry["meta"], build_full)
        except Exception as err:  # a damaged entry: build as before, and write it again
            log.info("kept tokenizer %s unreadable (%s): building it again", entry_file, err)
            entry = None
    full = build_full()
    if entry is None and entry_file is not None:
        _keep(entry_file, full)
    return full


def cache_file(folder: Path) -> Path | None:
    """Where the tokenizer of `folder` is kept: keyed by its files' bytes and the library
    versions. None when the files cannot be read."""
    digest = hashlib.sha256(f"format {FORMAT}".encode())
    try:
        versions = f"{metadata.version('transformers')} {metadata.version('tokenizers')}"
        digest.update(versions.encode())
        for name in SOURCE_FILES:
            file = folder / name
            if file.is_file():
                digest.update(name.encode() + b"\0" + file.read_bytes())
    except (OSError, metadata.PackageNotFoundError):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "memosight" / "tokenizers" / f"{digest.hexdigest()[:24]}.json"


def backend_file(entry_file: Path) -> Path:
    """The serialized `tokenizers.Tokenizer` beside its entry (read by Rust, not json)."""
    return entry_file.with_suffix(".tokenizer.json")


def _keep(entry_file: Path, full: Any) -> None:
    """Keep the transformers tokenizer `full`'s backend and attributes when a FastTokenizer
    built from them agrees with it on the sample, else a record of why not."""
    backend = getattr(full, "backend_tokenizer", None)
    if backend is None:  # a slow (Python) tokenizer: nothing to read back faster
        _write(entry_file, {"format": FORMAT, "meta": None, "why": "no tokenizers backend"})
        return
    meta = {
        "eos_token_id": full.eos_token_id,
        "bos_token_id": full.bos_token_id,
        "pad_token_id": full.pad_token_id,
        "all_special_ids": list(full.all_special_ids),
        "chat_template": getattr(full, "chat_template", None),
        "chat_pieces": chat_pieces(full),
        "length": len(full),
    }
    from tokenizers import Tokenizer

    serialized = backend.to_str()
    fast = FastTokenizer(Tokenizer.from_str(serialized), meta, lambda: full)
    difference = first_difference(full, fast)
    if difference is not None:
        log.info("tokenizer kept as transformers builds it: %s", difference)
        _write(entry_file, {"format": FORMAT, "meta": None, "why": difference})
        return
    # The backend first: an entry is only ever read beside a whole backend file.
    if _write(backend_file(entry_file), serialized):
        _write(entry_file, {"format": FORMAT, "meta": meta})


def first_difference(full: Any, fast: FastTokenizer) -> str | None:
    """Where `fast` and the transformers tokenizer `full` disagree on the sample (None: they
    do not)."""
    if len(fast) != len(full) or fast.get_vocab() != full.get_vocab():
        return "the vocabulary differs"
    for text in SAMPLE:
        for special in (False, True):
            ids = full.encode(text, add_special_tokens=special)
            if fast.encode(text, add_special_tokens=special) != ids:
                return f"encode({text[:20]!r}, add_special_tokens={special}) differs"
            for skip in (False, True):
                if fast.decode(ids, skip_special_tokens=skip) != full.decode(
                    ids, skip_special_tokens=skip
                ):
                    return f"decode of {text[:20]!r} differs"
    pick = random.Random(0)
    for _ in range(DECODE_RUNS):
        ids = [pick.randrange(len(full)) for _ in range(DECODE_RUN_LENGTH)]
        if fast.decode(ids) != full.decode(ids):
            return f"decode({ids}) differs"
    return None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        return None
    if entry.get("meta") is not None and not isinstance(entry["meta"], dict):
        return None
    return entry


def _write(path: Path, content: dict[str, Any] | str) -> bool:
    """Atomically (a reader sees the old file or the new one), and never fatal."""
    text = content if isinstance(content, str) else json.dumps(content)
    try:
        atomic_file.write_text(path, text)
    except OSError as err:
        log.info("cannot keep the tokenizer at %s: %s", path, err)
        return False
    return True
