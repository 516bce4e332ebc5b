"""The type-through cache: typing, backspacing and accepting within a suggestion."""

from __future__ import annotations

from memosight_lsp.session.type_through import TypeThroughCache, TypeThroughEntry

BEFORE = "def add(a, b):\n    "
AFTER = "\n\nprint(add(1, 2))\n"
GHOST = "return a + b"


def cache_with(ghost: str = GHOST, **kw) -> TypeThroughCache:
    cache = TypeThroughCache()
    cache.put("u", TypeThroughEntry(before=BEFORE, after=AFTER, ghost=ghost, **kw))
    return cache


def doc(typed: str) -> tuple[str, int]:
    return BEFORE + typed + AFTER, len(BEFORE) + len(typed)


def test_typing_matching_characters_serves_the_rest():
    cache = cache_with()
    for k in range(len(GHOST)):
        text, offset = doc(GHOST[:k])
        hit = cache.lookup("u", text, offset)
        assert hit is not None and hit.text == GHOST[k:]


def test_fully_typed_suggestion_is_a_miss():
    text, offset = doc(GHOST)
    assert cache_with().lookup("u", text, offset) is None


def test_backspace_within_the_suggestion_serves_more():
    cache = cache_with()
    text, offset = doc("return a")
    assert cache.lookup("u", text, offset).text == " + b"
    text, offset = doc("retu")
    assert cache.lookup("u", text, offset).text == "rn a + b"


def test_typing_a_different_character_misses_and_prune_drops_it():
    cache = cache_with()
    text, offset = doc("returX")
    assert cache.lookup("u", text, offset) is None
    cache.prune("u", text)
    assert cache.entries("u") == []


def test_edit_elsewhere_invalidates():
    cache = cache_with()
    text, offset = doc("ret")
    edited = "# note\n" + text
    assert cache.lookup("u", edited, offset + 7) is None
    cache.prune("u", edited)
    assert cache.entries("u") == []


def test_prune_keeps_entries_the_document_still_agrees_with():
    cache = cache_with()
    text, _ = doc("return")
    cache.prune("u", text)
    assert len(cache.entries("u")) == 1


def test_cursor_elsewhere_misses():
    cache = cache_with()
    text, offset = doc("ret")
    assert cache.lookup("u", text, offset - 1) is None  # the cursor moved, the text did not
    assert cache.lookup("u", text, 0) is None


def test_partial_acceptance_of_a_line_keeps_the_rest():
    ghost = "if a:\n        return b\n    return a"
    cache = cache_with(ghost)
    text, offset = doc("if a:\n")
    assert cache.lookup("u", text, offset).text == "        return b\n    return a"


def test_min_typed_serves_only_after_acceptance():
    cache = cache_with("return a + b\n    # done", min_typed=len(GHOST), source="precompute")
    text, offset = doc("ret")
    assert cache.lookup("u", text, offset) is None
    text, offset = doc(GHOST)
    hit = cache.lookup("u", text, offset)
    assert hit.text == "\n    # done" and hit.entry.source == "precompute"


def test_buffers_are_separate_and_forget_clears():
    cache = cache_with()
    text, offset = doc("r")
    assert cache.lookup("other", text, offset) is None
    cache.forget("u")
    assert cache.lookup("u", text, offset) is None


def test_entries_per_buffer_are_bounded_and_newest_first():
    cache = TypeThroughCache(max_entries=2)
    for ghost in ("a1", "b2", "c3"):
        cache.put("u", TypeThroughEntry(before="x", after="", ghost=ghost))
    assert [e.ghost for e in cache.entries("u")] == ["c3", "b2"]


def test_empty_ghost_is_not_stored():
    cache = cache_with("")
    assert cache.entries("u") == []


def test_a_suggestion_that_replaces_the_code_after_the_cursor_is_typed_through_and_over_it():
    # `func f(|)`: the suggestion `t *testing.T) {` holds the editor's `)` and replaces it.
    before, after, ghost = "func f(", ")\n", "t *testing.T) {"
    cache = TypeThroughCache()
    kept_at = ghost.rfind(")")
    entry = TypeThroughEntry(before=before, after=after, ghost=ghost, kept_at=kept_at, kept=1)
    cache.put("u", entry)
    for k in range(kept_at + 1):  # typed up to the `)`: the rest still holds it
        hit = cache.lookup("u", before + ghost[:k] + after, len(before) + k)
        assert hit is not None and hit.text == ghost[k:] and hit.replaces_rest
    # The editor stepped over its `)`: the document as it was, the cursor after the `)`.
    stepped = before + ghost[:kept_at] + after
    assert entry.typed(stepped) == kept_at
    hit = cache.lookup("u", stepped, len(before) + kept_at + 1)
    assert hit is not None and hit.text == " {" and not hit.replaces_rest
    typed_on = before + ghost[: kept_at + 2] + after[1:]  # then a space
    assert cache.lookup("u", typed_on, len(typed_on) - len(after) + 1).text == "{"
    assert entry.typed(typed_on) == kept_at + 2
    # A second `)` typed (an editor that does not step over): not the document it describes.
    doubled = before + ghost[: kept_at + 1] + after
    assert cache.lookup("u", doubled, len(before) + kept_at + 1) is None
    cache.prune("u", doubled)
    assert cache.entries("u") == []
