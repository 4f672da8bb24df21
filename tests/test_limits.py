"""Bounds on values from models, reviewers and clients: deep, wide, huge, cyclic, broken."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from graphkit._limits import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_TEXT,
    check_text,
    check_value,
    human_size,
)


class Refused(Exception):
    pass


def deep(levels: int, kind: str) -> Any:
    """`levels` nested dicts or lists around 1, built without recursion."""
    value: Any = 1
    for _ in range(levels):
        value = {"k": value} if kind == "dict" else [value]
    return value


def check(value: object) -> None:
    check_value(value, what="edited arguments for tool 'pay'", error=Refused)


@pytest.mark.parametrize("kind", ["dict", "list"])
@pytest.mark.parametrize("levels", [0, 1, 10, 31, MAX_DEPTH])
def test_values_up_to_the_depth_bound_are_accepted(kind: str, levels: int) -> None:
    check(deep(levels, kind))


@pytest.mark.parametrize("kind", ["dict", "list"])
@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 1000, 100_000])
def test_deeper_values_are_refused_without_recursion(kind: str, levels: int) -> None:
    value = deep(levels, kind)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100)  # any recursion proportional to the depth would fail here
    try:
        with pytest.raises(Refused, match=r"tool 'pay': nested deeper than 32 levels"):
            check(value)
    finally:
        sys.setrecursionlimit(limit)


def test_depth_counts_containers_of_every_kind() -> None:
    value: Any = 1
    for i in range(MAX_DEPTH):
        value = ({"k": value}, [value], (value,))[i % 3]
    check(value)
    with pytest.raises(Refused, match="deeper"):
        check([value])
    # siblings do not add up: only the longest path counts
    check([deep(MAX_DEPTH - 1, "dict"), deep(MAX_DEPTH - 1, "list")])


def test_wide_values_within_the_size_bound_are_accepted() -> None:
    check({f"key{i}": i for i in range(10_000)})
    check(list(range(20_000)))
    check({"text": "x" * (MAX_BYTES - 100)})


@pytest.mark.parametrize(
    "value",
    [
        {f"key{i}": i for i in range(MAX_BYTES // 4)},
        list(range(MAX_BYTES // 2)),
        [0] * (8 * MAX_BYTES),  # refused from its length, before any item is read
        {"text": "x" * (MAX_BYTES + 1)},
        "x" * (4 * MAX_BYTES),
        {"x" * (MAX_BYTES + 1): 1},  # keys count too
        ["é" * (MAX_BYTES // 2 + 1)],  # UTF-8 bytes, not characters
        [["x" * 1000] * 100] * 100,  # shared references count each time they are written
    ],
    ids=["many-keys", "long-list", "huge-list", "huge-string", "bare-huge-string", "huge-key",
         "two-byte-chars", "shared"],
)
def test_values_over_the_size_bound_are_refused(value: object) -> None:
    with pytest.raises(Refused, match=rf"larger than {human_size(MAX_BYTES)} as JSON"):
        check(value)


def test_the_size_is_close_to_compact_json() -> None:
    value = {"a": [1, 2.5, None, True, False, "é"], "b": {"c": "d" * 1000}, "n": -12345}
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    below = {**value, "pad": "x" * (MAX_BYTES - size - 20)}
    check(below)
    with pytest.raises(Refused):
        check({**value, "pad": "x" * (MAX_BYTES - size + 20)})


def test_a_value_containing_itself_is_refused() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(Refused, match="contains itself"):
        check(loop)
    node: dict[str, Any] = {"a": {"b": []}}
    node["a"]["b"].append(node)
    with pytest.raises(Refused, match="contains itself"):
        check({"outer": node})
    # the same list twice, side by side, is no cycle
    shared = [1, 2]
    check({"a": shared, "b": shared, "c": [shared, (shared,)]})


def test_huge_integers_are_refused_without_printing_them() -> None:
    check({"n": 10**4000})
    with pytest.raises(Refused, match="too many digits"):
        check({"n": 10**5000})
    with pytest.raises(Refused, match="larger than"):
        check({"n": 1 << (8 * MAX_BYTES * 4)})


def test_lone_surrogates_are_refused() -> None:
    with pytest.raises(Refused, match="not valid Unicode"):
        check({"text": "ok \ud800"})
    with pytest.raises(Refused, match="not valid Unicode"):
        check({"\udfff": 1})
    check({"text": "emoji \U0001f600 and é"})


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_other_objects_are_measured_as_text_and_not_descended_into() -> None:
    check({"when": __import__("datetime").date(2026, 1, 1), "set": {1, 2}})
    with pytest.raises(Refused, match="larger than"):
        check({"blob": b"x" * MAX_BYTES})
    with pytest.raises(Refused, match="Unprintable value cannot be shown"):
        check({"bad": Unprintable()})
    nested: Any = frozenset()
    for _ in range(100_000):
        nested = frozenset({nested})
    with pytest.raises(Refused, match="frozenset value cannot be shown"):
        check([nested])


@pytest.mark.parametrize("error", [ValueError, TypeError, Refused])
def test_the_error_type_is_the_one_passed(error: type[Exception]) -> None:
    with pytest.raises(error) as raised:
        check_value(deep(40, "list"), what="resume data", error=error)
    assert type(raised.value) is error
    assert str(raised.value).startswith("resume data: ")
    with pytest.raises(error):
        check_text("x" * (MAX_TEXT + 1), what="comment", error=error)


def test_check_text() -> None:
    check_text(None, what="comment", error=Refused)
    check_text("", what="comment", error=Refused)
    check_text("x" * MAX_TEXT, what="comment", error=Refused)
    check_text("é\u202e\x1b" * 100, what="comment", error=Refused)  # shown escaped, not refused
    with pytest.raises(Refused, match=r"comment: 10001 characters; at most 10000"):
        check_text("x" * (MAX_TEXT + 1), what="comment", error=Refused)
    with pytest.raises(Refused, match=r"decided_by: 65 characters; at most 64"):
        check_text("y" * 65, what="decided_by", error=Refused, limit=64)
    with pytest.raises(Refused, match="not valid Unicode"):
        check_text("a\ud800", what="comment", error=Refused)
    with pytest.raises(Refused, match="must be text, got dict"):
        check_text({"a": 1}, what="comment", error=Refused)  # type: ignore[arg-type]


def test_a_one_mib_argument_is_paused_approved_and_run_once(sqlite_url: str) -> None:
    """A model that writes a file of 1 MiB through a tool: asked, approved, run once (it was
    refused above 256 KiB)."""
    from graphkit import Agent, Inbox, create_tool
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    written: list[int] = []

    @create_tool(needs_approval=True)
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        written.append(len(content))
        return f"wrote {len(content)} bytes to {path}"

    content = "x" * (1 << 20)
    agent = Agent(name="w", tools=[write_file], checkpointer=sqlite_url,
                  model=ScriptedChatModel([turn(call("write_file", {"path": "/srv/a",
                                                                    "content": content}, "c1")),
                                           "written"]))
    first = agent.generate("write it")
    (pending,) = first.pending_approvals
    assert len(pending.args["content"]) == 1 << 20
    Inbox(sqlite_url).approve(pending.id, decided_by="ops", args_digest=pending.args_digest)
    assert agent.resume(run_id=first.run_id).text == "written"
    assert written == [1 << 20]
