"""Bounds on values from models, reviewers and clients: deep, wide, huge, cyclic, broken."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
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
from tests.helpers import agent_with, call, turn


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


def test_integers_a_checkpoint_cannot_hold_are_refused_without_printing_them() -> None:
    """A checkpoint (msgpack) holds integers of 64 bits; a model's call with a larger one
    crashed the run with LangGraph's own TypeError (helper-66)."""
    check({"n": [2**64 - 1, -(2**63)]})
    for n in (2**64, -(2**63) - 1, 10**5000, 1 << (8 * MAX_BYTES * 4)):
        with pytest.raises(Refused, match="beyond 64 bits"):
            check({"n": n})


def test_a_call_with_an_integer_beyond_64_bits_is_answered_and_the_run_goes_on(
        sqlite_url: str) -> None:
    """The model's reply is checkpointed with the call's arguments left out, and the gate
    tells the model why; the run ended with a TypeError from the checkpointer before."""
    agent, ran = agent_with([turn(call("pay", {"amount": 2**70, "payee": {"name": "ACME"}},
                                       "c1")), "done"], checkpointer=sqlite_url)
    result = agent.generate("pay")
    told = [m for m in result.messages if m.type == "tool"]
    assert result.finish_reason == "stop" and ran.ran == []
    assert told and "beyond 64 bits" in str(told[0].content)


def test_numbers_json_cannot_hold_are_refused() -> None:
    """`nan`, `inf` and `1e400` typed into an edit were approved: the tool ran with NaN or
    infinity, and one inside a JSON field was approved as null, not as typed (helper-78)."""
    check({"amount": [0.5, -1e308, 5e-324]})
    for number in (float("nan"), float("inf"), float("-inf"), float("1e400")):
        with pytest.raises(Refused, match="not a number JSON can hold"):
            check({"amount": [number]})


def test_an_edit_to_a_number_json_cannot_hold_is_refused_and_decides_nothing(
        sqlite_url: str) -> None:
    """As given, and as text the tool's schema reads as such a number: the model's "nan" was
    planned and shown as NaN (`graphkit inbox --json` printed no JSON) and run (helper-79)."""
    from graphkit import Agent, Inbox, InvalidApprovedArgsError, create_tool
    from graphkit.testing import ScriptedChatModel

    ran: list[float] = []

    @create_tool(needs_approval=True)
    def move(amount: float, to: str) -> str:
        """Move money."""
        ran.append(amount)
        return "moved"

    agent = Agent(name="bank", tools=[move], checkpointer=sqlite_url, model=ScriptedChatModel([
        turn(call("move", {"amount": "nan", "to": "acme"}, "m0")),
        turn(call("move", {"amount": 5.5, "to": "acme"}, "m1")), "done"]))
    paused = agent.generate("move")
    told = [m for m in paused.messages if m.type == "tool"]
    assert told and "JSON can hold" in str(told[0].content)
    (pending,) = paused.pending_approvals
    for typed in (float("nan"), float("inf"), "nan", "-Infinity", "1e400"):
        with pytest.raises(InvalidApprovedArgsError, match="JSON can hold"):
            agent.approve_tool_call(run_id=paused.run_id, decided_by="cfo",
                                    args={**pending.args, "amount": typed})
        with pytest.raises(InvalidApprovedArgsError, match="JSON can hold"):
            Inbox(sqlite_url).approve(pending.id, decided_by="cfo",
                                      args=json.loads('{"amount": NaN, "to": "x"}'))
    assert Inbox(sqlite_url).get(pending.id).status == "pending" and ran == []
    assert [e["event"] for e in Inbox(sqlite_url).audit(id=pending.id)].count("edited") == 0


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


@pytest.mark.parametrize("field", ["decided_by", "comment"])
def test_a_nul_in_a_reviewers_text_is_refused_at_every_storage(durable_url: str, field: str
                                                               ) -> None:
    """PostgreSQL's text holds no NUL: a remembered approval by "a\x00b" failed with
    psycopg's `DataError`, untyped (helper-142 L3); SQLite kept it. Refused alike, as bad
    input, at every storage: nothing is decided."""
    from graphkit import GraphkitError, Inbox
    from tests.helpers import PAY, pay_then_done

    agent, ran = agent_with(pay_then_done, checkpointer=durable_url)
    result = agent.generate("pay")
    inbox = Inbox(durable_url)  # (one: a pool collected mid-test joins its threads there)
    (waiting,) = inbox.pending()
    given = {"decided_by": "cfo", "comment": None, field: "a\x00b"}
    with pytest.raises(GraphkitError, match=f"{field}: holds a NUL"):
        inbox.approve(waiting.id, remember="thread", **given)
    assert [p.status for p in agent.pending_approvals(run_id=result.run_id)] == ["pending"]
    assert ran.ran == [] and PAY


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


def _file_bytes(path: Any) -> int:
    import os
    return sum(os.path.getsize(p) for p in (str(path), f"{path}-wal") if os.path.exists(p))


def _checkpointed(path: Any) -> None:
    import sqlite3
    with sqlite3.connect(str(path)) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def test_a_paused_one_mib_call_grows_the_file_by_at_most_three_times_its_size(
        tmp_path: Any) -> None:
    """Stored once: the model's message (LangGraph's own copy), and one row of the ledger
    that the plan, the approval record, the call and the audit all refer to. The interrupt
    shows the text's length, digest and start; the tools node reads the arguments from the
    ledger, so no `Send` carries them."""
    from graphkit import Agent, Inbox, create_tool
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    written: list[int] = []

    @create_tool(needs_approval=True)
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        written.append(len(content))
        return f"wrote {len(content)}"

    db = tmp_path / "graphkit.db"
    url = f"sqlite:///{db}"

    def agent_for(content: str) -> Agent:
        return Agent(name="w", tools=[write_file], checkpointer=url, model=ScriptedChatModel(
            [turn(call("write_file", {"path": "/a", "content": content}, "c1")), "written"]))

    warm = agent_for("small")  # tables made, first pages written
    first = warm.generate("write it")
    Inbox(url).approve(first.pending_approvals[0].id, decided_by="ops")
    warm.resume(run_id=first.run_id)
    _checkpointed(db)
    before = _file_bytes(db)
    size = 1 << 20
    agent = agent_for("x" * size)
    paused = agent.generate("write it")
    (pending,) = paused.pending_approvals
    assert len(pending.args["content"]) == size  # the API shows it whole (from the ledger)
    Inbox(url).approve(pending.id, decided_by="ops", args_digest=pending.args_digest)
    assert agent.resume(run_id=paused.run_id).text == "written"
    assert written == [5, size]
    _checkpointed(db)
    growth = (_file_bytes(db) - before) / size
    assert growth <= 3.0, f"the file grew by {growth:.2f}x the argument's size"


def test_the_interrupt_withholds_long_text_and_an_edit_that_keeps_it_keeps_the_text(
        sqlite_url: str) -> None:
    """A raw `Command(resume=...)` edit (Agent Chat UI's shape) that changes the path and
    leaves the withheld content as the interrupt showed it writes the real content."""
    from langgraph.types import Command

    from graphkit import Agent, create_tool
    from graphkit._secrets import WITHHELD_CHARS
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, config, turn

    written: list[tuple[str, str]] = []

    @create_tool(needs_approval=True)
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        written.append((path, content))
        return "ok"

    content = "".join(chr(97 + i % 26) for i in range(WITHHELD_CHARS + 10))
    agent = Agent(name="w", tools=[write_file], checkpointer=sqlite_url,
                  model=ScriptedChatModel([turn(call("write_file", {"path": "/a",
                                                                    "content": content}, "c1")),
                                           "done"]))
    paused = agent.generate("write")
    cfg = config(paused.thread_id)
    (interrupt,) = agent.graph.get_state(cfg).interrupts
    shown = interrupt.value["action_requests"][0]["args"]
    assert shown["path"] == "/a" and shown["content"] != content
    assert f"{len(content)} characters" in shown["content"] and content[:50] in shown["content"]
    assert content not in json.dumps(interrupt.value)
    agent.graph.invoke(Command(resume={interrupt.id: {"decisions": [
        {"type": "edit", "edited_action": {"name": "write_file",
                                           "args": {**shown, "path": "/b"}}}]}}), cfg)
    assert written == [("/b", content)]


def test_arguments_that_look_like_a_stored_reference_are_data(sqlite_url: str) -> None:
    """A model writes, inside its arguments, the shape the ledger uses to refer to a stored
    value, naming another call's stored text: the tool gets what the model wrote."""
    from graphkit import Agent, Inbox, create_tool
    from graphkit._ledger._values import REF
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    got: list[Any] = []

    @create_tool(needs_approval=True)
    def store(run_args: list[str], approved_args: dict[str, Any] | None = None) -> str:
        """Store."""
        got.append((run_args, approved_args))
        return "ok"

    import hashlib

    from graphkit._ledger._sql import dumps

    secret = {"run_args": ["s" * 40_000], "approved_args": None}
    stored = hashlib.sha256(dumps(secret).encode()).hexdigest()  # the ledger's own reference
    forged = {"run_args": [REF, stored], "approved_args": {REF: stored}}
    agent = Agent(name="s", tools=[store], checkpointer=sqlite_url, model=ScriptedChatModel([
        turn(call("store", secret, "c0")), "one", turn(call("store", forged, "c1")), "two"]))
    first = agent.generate("a")
    Inbox(sqlite_url).approve(first.pending_approvals[0].id, decided_by="ops")
    agent.resume(run_id=first.run_id)
    second = agent.generate("b", thread_id=first.thread_id)
    (pending,) = second.pending_approvals
    assert agent._storage.ledger._sql.query(
        "SELECT 1 FROM graphkit_values WHERE digest = ?", (stored,))
    assert pending.args == forged
    Inbox(sqlite_url).approve(pending.id, decided_by="ops")
    agent.resume(run_id=second.run_id)
    assert got[1] == (forged["run_args"], forged["approved_args"])
    audit = agent._storage.ledger.read_audit(thread_id=second.thread_id)
    assert all("s" * 100 not in json.dumps(e) for e in audit if e.get("approval_id") == pending.id)


@pytest.mark.parametrize("given", [5, "1h", timedelta.max])
@pytest.mark.parametrize("where", ["approval_ttl", "grant_ttl", "a tool's approval_ttl"])
def test_a_lifetime_that_is_not_one_is_refused_when_given(given: Any, where: str) -> None:
    """`approval_ttl=5` (an int), or `timedelta.max` (past the calendar's end), was taken as
    given and failed the first run that asked, or the first grant, with Python's own
    error (helper-113). Refused, typed, as the agent or the tool is made."""
    from graphkit import Agent, create_tool
    from graphkit.errors import GraphkitError
    from graphkit.testing import ScriptedChatModel

    with pytest.raises(GraphkitError, match="timedelta"):
        if where == "a tool's approval_ttl":
            create_tool(lambda x: x, name="t", description="T.", approval_ttl=given)
        else:
            Agent(name="a", tools=[], model=ScriptedChatModel(["ok"]), **{where: given})
