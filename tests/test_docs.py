"""Every Python block of each docs/ page runs, in order, offline, in a fresh working
directory; the README links to every page, and every relative link of the README and of the
pages points at a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
TOPICS = ("tools", "suspension", "supervisors", "reviewing", "langgraph-server", "workers",
          "trust", "storage")

# what each page's comments say its blocks print; hold them to it
PRINTS = {
    "tools.md": ("'prompt': 'Deploy 2.0 to prod?'", "['c2', 'c3']", "Cleaned up.",
                 "The reviewer 'bo' answered in its place",
                 "Savings is frozen; use the desk."),
    "suspension.md": ("What city do you want to know the weather for?",
                      "It is sunny in San Francisco.", "Subject?", "Sent. ['bo']"),
    "supervisors.md": ("['supervisor', 'data_agent']", "User 12345 is John.", "True"),
    "reviewing.md": ("Pay 500 to acme?", "refused: 'bob' may not approve", "Paid.",
                     "['requested', 'refused', 'approved']", "ArgsDigestMismatchError",
                     "pending", "303 /login"),
    "langgraph-server.md": ("Run `rm -r /tmp/x`?", "Done.", "Auth"),
    "workers.md": ("Restarted web.",),
    "trust.md": ("[] True",),
    "storage.md": ("refund", "Refunded A-17."),
}


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.DOTALL)


def links(path: Path) -> list[str]:
    """The relative targets of a page's Markdown links and images, without their #anchor."""
    found = re.findall(r"\]\(([^)\s]+)\)", path.read_text())
    return [t.split("#", 1)[0] for t in found
            if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_every_topic_has_a_page() -> None:
    assert [p.stem for p in DOCS] == sorted(TOPICS)


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_page_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GRAPHKIT_DB", raising=False)
    blocks = python_blocks(page)
    assert blocks, f"{page.name} has no Python block"
    namespace: dict[str, object] = {"__name__": page.stem}
    for block in blocks:
        exec(compile(block, str(page), "exec"), namespace)
    out = capsys.readouterr().out
    for expected in PRINTS[page.name]:
        assert expected in out, f"{page.name} does not print {expected!r}"


def test_readme_links_every_page() -> None:
    targets = set(links(ROOT / "README.md"))
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in targets]
    assert not missing, f"the README does not link to {missing}"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_links_point_at_files(page: Path) -> None:
    broken = [t for t in links(page) if t and not (page.parent / t).exists()]
    assert not broken, f"{page.name} links to missing {broken}"
