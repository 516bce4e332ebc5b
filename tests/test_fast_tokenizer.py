"""The kept tokenizer (inference/fast_tokenizer.py): read back without transformers' rebuild, it
gives the same tokens and text as the transformers tokenizer, on the tiny test model and on the
real Qwen2.5-Coder and SmolLM2 tokenizers over real source files; a damaged or mismatching
entry falls back to transformers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from engines import MODELS
from transformers import AutoTokenizer

from memosight_lsp.inference import fast_tokenizer
from memosight_lsp.inference.fast_tokenizer import FastTokenizer, backend_file, cache_file
from memosight_lsp.inference.loading import load_tokenizer

STDLIB = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"


@pytest.fixture
def cache_home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def transformers_tokenizer(folder: Path):
    return AutoTokenizer.from_pretrained(folder, local_files_only=True)


def real_texts(count: int) -> list[str]:
    """Chunks of real source files (the standard library's), whitespace and non-ASCII kept."""
    texts = []
    for file in sorted(STDLIB.glob("*.py"))[:count]:
        text = file.read_text(encoding="utf-8", errors="replace")
        texts += [text[:3000], text[len(text) // 2 : len(text) // 2 + 3000]]
    return texts


def assert_same(fast, full, texts: list[str]) -> None:
    assert isinstance(fast, FastTokenizer)
    assert len(fast) == len(full) and fast.get_vocab() == full.get_vocab()
    assert fast.eos_token_id == full.eos_token_id
    assert fast.all_special_ids == list(full.all_special_ids)
    for text in texts:
        ids = full.encode(text, add_special_tokens=False)
        assert fast.encode(text, add_special_tokens=False) == ids, text[:80]
        assert fast.decode(ids) == full.decode(ids)
        assert fast.decode(ids, skip_special_tokens=True) == full.decode(
            ids, skip_special_tokens=True
        )


def test_the_second_load_reads_the_kept_tokenizer(cache_home, tiny_model_dir):
    first = load_tokenizer(tiny_model_dir)
    assert not isinstance(first, FastTokenizer)  # built by transformers, then kept
    entry = cache_file(tiny_model_dir)
    assert entry is not None and entry.is_relative_to(cache_home)
    assert backend_file(entry).is_file()
    second = load_tokenizer(tiny_model_dir)
    assert_same(second, first, [*fast_tokenizer.SAMPLE, *real_texts(5)])
    assert second.decode(7) == first.decode(7)  # one id, as transformers takes it


def test_what_it_does_not_implement_comes_from_transformers(cache_home, tiny_model_dir):
    load_tokenizer(tiny_model_dir)
    fast = load_tokenizer(tiny_model_dir)
    assert isinstance(fast, FastTokenizer)
    full = transformers_tokenizer(tiny_model_dir)
    assert fast.convert_ids_to_tokens([5, 6]) == full.convert_ids_to_tokens([5, 6])
    batch = fast(["def f():", "x = 1"], add_special_tokens=False)["input_ids"]
    assert batch == full(["def f():", "x = 1"], add_special_tokens=False)["input_ids"]
    assert fast.padding_side == full.padding_side  # an attribute it does not define
    with pytest.raises(AttributeError):
        fast._no_such_private_name  # noqa: B018


def test_a_damaged_entry_builds_again(cache_home, tiny_model_dir):
    load_tokenizer(tiny_model_dir)
    entry = cache_file(tiny_model_dir)
    assert entry is not None
    backend_file(entry).write_text("{not json")
    rebuilt = load_tokenizer(tiny_model_dir)
    assert not isinstance(rebuilt, FastTokenizer)
    assert isinstance(load_tokenizer(tiny_model_dir), FastTokenizer)  # kept again
    entry.write_text("\x00garbage")
    assert not isinstance(load_tokenizer(tiny_model_dir), FastTokenizer)


def test_a_tokenizer_that_differs_is_never_read_back(cache_home, tiny_model_dir, monkeypatch):
    monkeypatch.setattr(fast_tokenizer, "first_difference", lambda full, fast: "it differs")
    for _ in range(2):
        assert not isinstance(load_tokenizer(tiny_model_dir), FastTokenizer)
    entry = cache_file(tiny_model_dir)
    assert entry is not None and not backend_file(entry).exists()
    assert "it differs" in entry.read_text()


def test_the_check_finds_a_difference(tiny_model_dir):
    """first_difference is not blind: a tokenizer that splits text differently is caught."""
    full = transformers_tokenizer(tiny_model_dir)
    other = FastTokenizer(full.backend_tokenizer, {"length": len(full)}, lambda: full)
    other.encode = lambda text, add_special_tokens=True, **_: [0, *full.encode(text)]  # type: ignore[method-assign]
    assert fast_tokenizer.first_difference(full, other) is not None


REAL_MODELS = ["qwen2.5-coder-0.5b-instruct", "smollm2-135m-instruct.Q4_1"]


def real_model(name: str) -> Path:
    folder = MODELS / name
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"{folder} is not here: run .ci/engines.sh")
    return folder


@pytest.mark.parametrize("name", REAL_MODELS)
def test_real_tokenizers_give_the_same_tokens(cache_home, name):
    folder = real_model(name)
    full = load_tokenizer(folder)
    assert_same(load_tokenizer(folder), full, real_texts(60))


def test_a_token_lookup_agrees_with_the_vocabulary(cache_home, tiny_model_dir):
    load_tokenizer(tiny_model_dir)
    fast = load_tokenizer(tiny_model_dir)
    assert isinstance(fast, FastTokenizer)
    vocab = fast.get_vocab()
    lookup = fast_tokenizer.token_lookup(fast)
    special = [fast.decode([i]) for i in fast.all_special_ids]
    for token in [*list(vocab)[:200], *special]:
        assert token in lookup and lookup[token] == vocab[token]
    for absent in ["no such token at all \u2603", "", 5]:
        assert absent not in lookup
    with pytest.raises(KeyError):
        lookup["no such token at all \u2603"]
    assert len(lookup) == len(vocab) and set(lookup) == set(vocab)
    full = transformers_tokenizer(tiny_model_dir)
    assert fast_tokenizer.token_lookup(full) == full.get_vocab()


def next_edit_messages(user: str) -> list[dict[str, str]]:
    from memosight_lsp.next_edit.prompt import INSTRUCTION, SYSTEM

    return [
        {"role": "system", "content": f"{SYSTEM} {INSTRUCTION}"},
        {"role": "user", "content": user},
    ]


@pytest.mark.parametrize("name", REAL_MODELS)
def test_the_next_edit_conversation_renders_without_transformers(cache_home, name):
    folder = real_model(name)
    full = load_tokenizer(folder)
    fast = load_tokenizer(folder)
    assert isinstance(fast, FastTokenizer)
    for user in [*real_texts(3), "", "```diff\n-a\n+b\n```\n\n<|im_end|> {{ x }}"]:
        messages = next_edit_messages(user)
        options = {"tokenize": False, "add_generation_prompt": True}
        assert fast.apply_chat_template(messages, **options) == full.apply_chat_template(
            messages, **options
        )
    assert fast._full is None  # no transformers tokenizer was built for it
    # Another shape goes to transformers, and gives what it gives.
    alone = [{"role": "user", "content": "hi"}]
    assert fast.apply_chat_template(alone, tokenize=False) == full.apply_chat_template(
        alone, tokenize=False
    )


def test_a_template_that_changes_the_contents_is_not_kept_in_pieces(tiny_model_dir):
    full = transformers_tokenizer(tiny_model_dir)
    full.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}>"
    assert fast_tokenizer.chat_pieces(full) == ["<system>", "<user>", ">"]
    full.chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}{% endfor %}"
    assert fast_tokenizer.chat_pieces(full) is None  # it strips: "  spaced  " would differ
    full.chat_template = "{{ raise_exception('no system turn') }}"
    assert fast_tokenizer.chat_pieces(full) is None
    full.chat_template = None
    assert fast_tokenizer.chat_pieces(full) is None
