"""Every Python block of the README runs, in order, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_readme_has_python_blocks() -> None:
    assert len(python_blocks()) >= 3


def test_readme_blocks_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "readme"}
    for block in python_blocks():
        exec(compile(block, str(README), "exec"), namespace)
    out = capsys.readouterr().out
    # the comments in the README say what each print shows; hold them to it
    for expected in ("Send build 1.4.2 to prod?", "Build 1.4.2 is live.", "['c2', 'c3']",
                     "Cleaned up.", "What city do you want to know the weather for?",
                     "It is sunny in San Francisco.",
                     "['supervisor', 'data_agent']", "User 12345 is John.",
                     "Run `rm -r /tmp/x`?", "Done."):
        assert expected in out
