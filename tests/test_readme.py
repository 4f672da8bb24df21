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
    for expected in ("Send build 1.4.2 to prod?", "Build 1.4.2 is live.", "['c2']",
                     "Cleaned up.", "What city do you want to know the weather for?",
                     "It is sunny in San Francisco.",
                     "['supervisor', 'ops'] Run `rm -r /tmp/x`?", "Done."):
        assert expected in out


def test_readme_keeps_two_setup_commands_and_a_short_quick_start() -> None:
    text = README.read_text()
    setup = text.split("## Set up", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in setup.strip().splitlines()] == [
        "make demo", "make test"]
    quick = text.split("## Quick start", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    assert len(quick.strip().splitlines()) < 20
