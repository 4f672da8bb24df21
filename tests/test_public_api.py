"""The public surface is curated: internals are private (`__all__` is pinned in
test_cli_and_api.py)."""

from __future__ import annotations

from pathlib import Path

import graphkit


def test_internal_modules_are_private() -> None:
    modules = {p.stem for p in Path(graphkit.__file__).parent.glob("*.py")}
    public = {m for m in modules if not m.startswith("_")}
    assert public == {"agent", "cli", "errors", "examples", "inbox", "server_auth", "testing",
                      "tools", "types"}
