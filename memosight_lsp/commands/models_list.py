"""`memosight models --list`: what `auto` finds on this machine (where, size, FIM or not), what
it picks and why, without loading anything; and the lines `memosight models` adds about how
its model was chosen."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from memosight_lsp.discovery import Candidate
from memosight_lsp.discovery.machine import format_parameters
from memosight_lsp.discovery.resolve import AUTO, Resolved, resolve

from .common import EMBEDDED, emit


def run_list(args: argparse.Namespace) -> int:
    resolved = resolve(AUTO, device=args.device)
    found = resolved.discovery
    assert found is not None  # resolve(AUTO) always discovers
    named = args.model not in (AUTO, None)
    if args.json:
        data = found.to_json()
        data["auto"] = resolution_json(resolved)
        data["modelSetting"] = None if args.model == EMBEDDED else args.model
        emit(data, as_json=True)
        return 0
    lines = ["looked in:"]
    home = str(Path.home())
    lines += [
        f"  {source:<10} {_short(path, home)}{'' if exists else '  (absent)'}"
        for source, path, exists in found.places
    ]
    if found.candidates:
        lines.append("found (best first):")
        for candidate in found.candidates:
            mark = "*" if candidate is found.choice else " "
            lines.append(f"{mark} {_row(candidate)}")
            lines.append(f"    {_short(candidate.path, home)}")
    else:
        lines.append("found: no model files or folders")
    if found.served:
        lines.append("served on loopback (model.backend, model.name):")
        lines += [f"{'*' if c is found.choice else ' '} {_row(c)}" for c in found.served]
    lines += [f"note: {note}" for note in found.notes]
    lines += pick_lines(resolved)
    if named:
        lines.append(f"(--model {args.model} is given: auto is not used)")
    lines.append(f"({found.seconds * 1000:.0f} ms; this machine: {found.machine.describe()})")
    emit("\n".join(lines), as_json=False)
    return 0


def pick_lines(resolved: Resolved) -> list[str]:
    """What auto picks and why, or the fallback and the one action that fixes it."""
    if resolved.notice:
        return [
            f"auto: {resolved.notice} ({resolved.reason})",
            f"next: {resolved.fix}",
        ]
    where = resolved.source or ""
    if resolved.backend != "local":
        where = f"{resolved.backend} at {resolved.url}"
    return [f"auto picks: {resolved.name} ({where}): {resolved.reason}"]


def resolution_lines(resolved: Resolved) -> list[str]:
    """For `memosight models`: how its model was chosen (nothing for a path that was named)."""
    if resolved.notice:
        return [
            f"notice:       {resolved.notice} ({resolved.reason})",
            f"next:         {resolved.fix}",
        ]
    if resolved.source:
        return [f"found by:     auto, in {resolved.source}: {resolved.reason}"]
    return []


def resolution_json(resolved: Resolved) -> dict[str, Any]:
    return {
        "path": resolved.path,
        "backend": resolved.backend,
        "url": resolved.url,
        "name": resolved.name,
        "source": resolved.source,
        "reason": resolved.reason,
        "notice": resolved.notice,
        "fix": resolved.fix,
    }


def _row(c: Candidate) -> str:
    size = format_parameters(c.parameters) if c.parameters else "?"
    disk = f"{c.size_bytes / 2**30:.2f} GiB" if c.size_bytes else ""
    fim = f"FIM {c.fim}" if c.fim else "no FIM"
    if c.usable:
        verdict = c.fit
    elif c.problem:
        verdict = c.problem
    elif not c.code:
        verdict = "not a code model"
    else:
        verdict = c.fit
    facts = f"{c.source}, {c.format}, {size} parameters, {disk or 'size ?'}, {fim}"
    return f"{c.name}  [{facts}]  {verdict}"


def _short(path: str, home: str) -> str:
    return "~" + path[len(home) :] if home and path.startswith(home + "/") else path
