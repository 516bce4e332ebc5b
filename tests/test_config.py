from __future__ import annotations

from memosight_lsp.config import Settings, parse_settings, settings_to_wire, unwrap_settings
from memosight_lsp.pipeline.request import CompletionRequest


def test_empty_gives_defaults():
    settings, problems = parse_settings(None)
    assert settings == Settings() and problems == []


def test_camel_case_and_wrapped_section():
    raw = {"memosight": {"completion": {"maxNewTokens": 32}, "model": {"path": "/m"}}}
    settings, problems = parse_settings(raw)
    assert problems == []
    assert settings.completion.max_new_tokens == 32
    assert settings.model.path == "/m"


def test_one_unwrap_rule_a_memosight_key_wraps_the_tree_and_its_neighbours_are_not_ours():
    # A client may push every section it has (other servers' settings beside ours).
    pushed = {"memosight": {"enable": False}, "python": {"analysis": {"typeCheckingMode": "x"}}}
    assert unwrap_settings(pushed) == {"enable": False}
    settings, problems = parse_settings(pushed)
    assert settings.enable is False and problems == []
    # The tree itself (it has no "memosight" setting) and anything that is no object: as is.
    assert unwrap_settings({"enable": False}) == {"enable": False}
    assert unwrap_settings(None) is None
    assert unwrap_settings(["memosight"]) == ["memosight"]
    assert unwrap_settings({"memosight": None}) is None
    assert parse_settings({"memosight": None}) == (Settings(), [])


def test_invalid_values_fall_back_to_defaults_with_reasons():
    raw = {
        "enable": "yes",
        "completion": {"maxNewTokens": -3, "multiline": "sometimes"},
        "languages": {"python": "off"},
        "bogus": 1,
        "context": 5,
    }
    settings, problems = parse_settings(raw)
    assert settings == Settings()
    text = "\n".join(problems)
    for where in (
        "enable",
        "completion.maxNewTokens",
        "completion.multiline",
        "languages",
        "bogus",
        "context",
    ):
        assert where in text


def test_quantization_takes_gguf_and_names_an_unknown_value():
    settings, problems = parse_settings({"model": {"quantization": "gguf"}})
    assert settings.model.quantization == "gguf" and problems == []
    settings, problems = parse_settings({"model": {"quantization": "q4_k_m"}})
    assert settings.model.quantization == "auto"
    assert len(problems) == 1 and "model.quantization" in problems[0], problems


def test_language_switch():
    settings, _ = parse_settings({"languages": {"markdown": False}})
    assert not settings.language_enabled("markdown")
    assert settings.language_enabled("python")
    off, _ = parse_settings({"enable": False})
    assert not off.language_enabled("python")


def test_round_trip_through_the_wire_form():
    wire = settings_to_wire(Settings())
    assert wire["completion"]["maxNewTokens"] == 64
    assert wire["context"]["budgetTokens"] == 1024
    assert parse_settings(wire) == (Settings(), [])


def test_completion_request_defaults_are_the_settings_defaults():
    cursor = {"text": "value = 1\n", "line": 0, "column": 3}
    assert CompletionRequest(**cursor) == CompletionRequest.from_settings(Settings(), **cursor)
    assert CompletionRequest(**cursor).mid_word == "complete"  # as the settings say
    # Every request field that comes from a setting follows it.
    changed, _ = parse_settings(
        {
            "completion": {
                "maxNewTokens": 7,
                "multiline": "never",
                "midWord": "skip",
                "speculative": False,
                "firstResponseMs": 5,
            },
            "context": {"budgetTokens": 99, "crossFileShare": 40},
            "compression": {"kvCompression": "lossy-snapkv", "kvRatio": 8, "minPromptTokens": 5},
        }
    )
    request, default = (
        CompletionRequest.from_settings(changed, **cursor),
        CompletionRequest(**cursor),
    )
    mapped = (
        "max_new_tokens",
        "budget_tokens",
        "packing",
        "multiline",
        "mid_word",
        "first_response_ms",
        "plain",
        "kv_compression",
        "kv_ratio",
        "min_prompt_tokens",
    )
    assert [f for f in mapped if getattr(request, f) == getattr(default, f)] == []
