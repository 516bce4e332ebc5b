"""Settings from initializationOptions, didChangeConfiguration and workspace/configuration;
a missing or broken model is reported once and answered with empty results."""

from __future__ import annotations

import asyncio

import pytest
from lsp_session import (
    context,
    inline,
    open_doc,
    start,
    stats,
    stop,
    tiny_options,
    wait_for_state,
    wait_until,
)
from lsprotocol import types

pytestmark = pytest.mark.slow

DOC = "def add(a, b):\n    "


def change_settings(client, settings: dict) -> None:
    client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"memosight": settings})
    )


def error_messages(client) -> list[str]:
    return [m.message for m in client.messages if m.type == types.MessageType.Error]


async def test_missing_then_broken_then_good_model(tiny_model_dir, tmp_path):
    missing = tmp_path / "no-such-model"
    client = await start(
        "neovim", {"completion": {"maxNewTokens": 8}, "model": {"path": str(missing)}}
    )
    try:
        uri = "file:///s/model.py"
        open_doc(client, uri, DOC)
        status = await wait_for_state(client, "error")
        assert "model folder not found" in status["message"]
        assert await inline(client, uri, 1, 4) is None
        assert await inline(client, uri, 1, 4) is None
        assert "model error" in (await context(client, uri, 1, 4))["reason"]
        await wait_until(lambda: len(error_messages(client)) >= 1)
        await asyncio.sleep(0.2)
        assert len(error_messages(client)) == 1  # once, not per request
        assert (await stats(client))["modelCalls"] == 0

        broken = tmp_path / "broken"
        broken.mkdir()
        (broken / "config.json").write_text("{not json")
        (broken / "model.safetensors").write_bytes(b"garbage")
        (broken / "tokenizer.json").write_text("{}")
        client.statuses.clear()
        change_settings(client, {"model": {"path": str(broken)}})
        await wait_for_state(client, "error")
        assert await inline(client, uri, 1, 4) is None
        await wait_until(lambda: len(error_messages(client)) == 2)

        change_settings(client, {"model": {"path": str(tiny_model_dir)}})
        await wait_for_state(client, "ready")
        assert await inline(client, uri, 1, 4)
    finally:
        await stop(client)


async def test_invalid_settings_are_shown_once_and_defaults_used(tiny_model_dir):
    options = tiny_options(tiny_model_dir)
    options["completion"]["multiline"] = "sometimes"
    options["bogus"] = 1
    client = await start("visual_studio_code", options)
    try:
        await wait_until(lambda: client.messages)
        text = client.messages[0].message
        assert "completion.multiline" in text and "bogus" in text
        change_settings(client, options)  # the same problems again: no second popup
        uri = "file:///s/invalid.py"
        open_doc(client, uri, DOC)
        assert await inline(client, uri, 1, 4)  # still serving, with the default
        assert len(client.messages) == 1
    finally:
        await stop(client)


async def test_disable_language_and_globally(tiny_model_dir):
    client = await start("neovim", tiny_options(tiny_model_dir))
    try:
        uri = "file:///s/lang.py"
        open_doc(client, uri, DOC)
        assert await inline(client, uri, 1, 4)
        change_settings(client, {"languages": {"python": False}})
        assert await inline(client, uri, 1, 4) is None
        assert "language 'python'" in (await context(client, uri, 1, 4))["reason"]
        change_settings(client, {"languages": {"python": True}, "enable": False})
        await wait_for_state(client, "disabled")
        assert await inline(client, uri, 1, 4) is None
        change_settings(client, {"enable": True})
        assert await inline(client, uri, 1, 4)
    finally:
        await stop(client)


async def test_settings_pulled_with_workspace_configuration_and_load_progress(tiny_model_dir):
    configuration = {"memosight": tiny_options(tiny_model_dir)}
    client = await start("neovim", None, configuration=configuration)
    try:
        status = await wait_for_state(client, "ready")
        assert status["model"] == tiny_model_dir.name

        def model_progress() -> list:  # the workspace index reports under its own tokens
            reports = client.progress_reports.items()
            return [v for token, v in reports if str(token).startswith("memosight-load")]

        await wait_until(
            lambda: any(
                any(isinstance(v, types.WorkDoneProgressEnd) for v in values)
                for values in model_progress()
            )
        )
        (values,) = model_progress()
        assert isinstance(values[0], types.WorkDoneProgressBegin)
    finally:
        await stop(client)


async def test_client_that_never_sends_initialized_still_gets_completions(tiny_model_dir):
    client = await start("neovim", tiny_options(tiny_model_dir), initialized=False)
    try:
        uri = "file:///s/no-initialized.py"
        open_doc(client, uri, DOC)
        assert await inline(client, uri, 1, 4)  # the model loads lazily on first use
    finally:
        await stop(client)
