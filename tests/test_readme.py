"""The README's settings table and quick start must match the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

from memosight_lsp.config import Settings, settings_to_wire

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def readme_settings() -> dict[str, str]:
    table = README.split("<!-- settings-table")[1].split("<!-- /settings-table -->")[0]
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|", table, flags=re.MULTILINE)
    return dict(rows)


def test_every_setting_is_documented_with_its_default():
    documented = readme_settings()
    actual = flatten(settings_to_wire(Settings()))
    assert set(documented) == set(actual)
    for name, value in actual.items():
        assert json.loads(documented[name]) == value, name


def test_quick_start_commands_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert f"make {target}" in README
        assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE)
    assert "make test" in (ROOT / ".ci" / "run").read_text()
