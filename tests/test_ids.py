"""The ids a caller gives to name what it decides or reads (`graphkit._ids`): an id names one
thing or nothing, at every door; one that is not a non-empty string is refused with a typed
error before anything is read or changed, never read as "no filter"."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from graphkit import Agent, ApprovalNotFoundError, Inbox, SnapshotNotFoundError, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import agent_with, call, turn
from tests.test_inbox import PAY, pay_calls


@pytest.mark.parametrize("bad", [None, "", "apr_\x00x", "apr_\ud800"])
def test_an_id_that_names_nothing_decides_nothing_at_any_door(durable_url: str,
                                                              bad: Any) -> None:
    """An approval id left out (None) read as no filter at all: `Inbox.approve(None)`
    decided whichever approval of any agent or thread waited first, and its payment ran
    (helper-104); `resolve_tool_approval(id=None)` recorded a decision on the run's one
    approval, then raised. An id names one approval or none (`graphkit._ids`): every door
    refuses one that is not a non-empty string, before it reads or writes anything. One
    no database stores (a NUL: PostgreSQL; a lone surrogate: SQLite) raised the driver's
    error (helper-109)."""
    billing, ledger = agent_with(pay_calls(1), checkpointer=durable_url, name="billing")
    ops, _ = agent_with([turn(call("bash", {"command": "rm -r /x"}, "b1")), "ok"],
                        checkpointer=durable_url, name="ops")
    paused = billing.generate("pay")
    ops.generate("clean")
    inbox = Inbox(durable_url)
    doors = {
        "get": lambda: inbox.get(bad),
        "get as a viewer": lambda: inbox.get(bad, viewer="ops"),
        "schema": lambda: inbox.schema(bad),
        "messages": lambda: inbox.messages(bad),
        "approve": lambda: inbox.approve(bad, decided_by="ops"),
        "aapprove": lambda: asyncio.run(inbox.aapprove(bad, decided_by="ops")),
        "decline": lambda: inbox.decline(bad, decided_by="ops"),
        "respond": lambda: inbox.respond(bad, decided_by="ops", message="no"),
        "resume": lambda: inbox.resume(bad, {"answer": 1}, decided_by="ops"),
        "resolve_tool_approval": lambda: billing.resolve_tool_approval(
            run_id=paused.run_id, id=bad, approved=True, decided_by="ops"),
        "aresolve_tool_approval": lambda: asyncio.run(billing.aresolve_tool_approval(
            run_id=paused.run_id, id=bad, approved=False, decided_by="ops")),
    }
    for door, attempt in doors.items():
        # (a viewer is told the same of any id it may not see: "no approval ... may see")
        with pytest.raises(ApprovalNotFoundError,
                           match=r"non-empty string|may see|holds no NUL"):
            attempt()
        waiting = inbox.pending()
        assert len(waiting) == 2 and {p.status for p in waiting} == {"pending"}, door
    assert inbox.ready() == [] and ledger.ran == []
    assert {e["event"] for e in inbox.audit()} == {"requested"}


@pytest.mark.parametrize("bad", [None, "", ["r"], {"run": "r"}])
def test_a_run_id_that_names_nothing_acts_on_no_thread(durable_url: str, bad: Any) -> None:
    """`approve_tool_call_generate(run_id=None)` found no run in the ledger and looked for
    checkpoints whose run metadata is None: every thread a graph was driven on directly
    (`agent.graph.invoke`, as the docs show) matched, and the first one's 9000 payment ran
    on a decision taken for nobody's run; `snapshot` and `pending_approvals` read that thread
    (helper-105). A list or dict raised a builtin TypeError. Every Agent door taking a run id
    refuses one that names nothing: `SnapshotNotFoundError`, nothing read or changed."""
    ran: list[tuple[int, str]] = []

    @create_tool(needs_approval=True)
    def pay(amount: int, to: str) -> str:
        """Send a payment."""
        ran.append((amount, to))
        return f"paid {amount} to {to}"

    def reply(messages: list[Any]) -> AIMessage:
        if isinstance(messages[-1], HumanMessage):
            return AIMessage("", tool_calls=[{"name": "pay", "args": {"amount": 9000,
                                                                      "to": "mallory"},
                                              "id": "p1"}])
        return AIMessage("done")

    agent = Agent(name="billing", tools=[pay], model=ScriptedChatModel(reply),
                  checkpointer=durable_url, approvers=lambda who, _: who == "alice")
    theirs = {"configurable": {"thread_id": "someone-elses-thread"}}
    agent.graph.invoke({"messages": [("user", "pay mallory 9000")]}, theirs)
    mine = agent.generate("my own payment")
    doors = {
        "approve_tool_call_generate": lambda: agent.approve_tool_call_generate(
            run_id=bad, decided_by="alice"),
        "aapprove_tool_call_generate": lambda: asyncio.run(agent.aapprove_tool_call_generate(
            run_id=bad, decided_by="alice")),
        "decline_tool_call_generate": lambda: agent.decline_tool_call_generate(
            run_id=bad, decided_by="alice"),
        "respond_tool_call_generate": lambda: agent.respond_tool_call_generate(
            run_id=bad, message="no", decided_by="alice"),
        "resume_generate": lambda: agent.resume_generate({"x": 1}, run_id=bad),
        "resume": lambda: agent.resume(run_id=bad),
        "snapshot": lambda: agent.snapshot(run_id=bad),
        "pending_approvals": lambda: agent.pending_approvals(run_id=bad),
        "resolve_tool_approval": lambda: agent.resolve_tool_approval(
            run_id=bad, id=mine.pending_approvals[0].id, approved=True, decided_by="alice"),
    }
    for door, attempt in doors.items():
        with pytest.raises(SnapshotNotFoundError, match="run id must be a non-empty string"):
            attempt()
        assert ran == [], door
        assert agent.graph.get_state(theirs).interrupts, door  # still waits for its review
        assert [p.status for p in agent.pending_approvals(run_id=mine.run_id)] == ["pending"]


@pytest.mark.parametrize("bad", ["", 1, ["x"], {"a": 1}])
def test_a_thread_grant_or_filter_id_that_names_nothing_is_refused(sqlite_url: str,
                                                                    bad: Any) -> None:
    """`generate(thread_id=1)` ran in thread "1", and a list reached the storage, which
    raised its own error; `Inbox.revoke` and `Inbox.audit(id=...)` given a list did too, and
    `pending(limit=True)` listed one (helper-107). Each is a typed error, nothing changed."""
    from graphkit import GraphkitError

    agent, ledger = agent_with(pay_calls(1), checkpointer=sqlite_url, name="billing")
    paused = agent.generate("pay")
    inbox = Inbox(sqlite_url)
    with pytest.raises(GraphkitError, match="thread id must be a non-empty string"):
        agent.generate("pay", thread_id=bad)
    with pytest.raises(GraphkitError, match="thread id must be a non-empty string"):
        asyncio.run(agent.agenerate("pay", thread_id=bad))
    with pytest.raises(ApprovalNotFoundError, match="grant id must be a non-empty string"):
        inbox.revoke(bad, decided_by="ops")
    with pytest.raises(ApprovalNotFoundError, match="approval id must be a non-empty string"):
        inbox.audit(id=bad)
    with pytest.raises(GraphkitError, match="thread id must be a non-empty string"):
        inbox.audit(thread_id=bad)
    for limit in (True, "x", -1, 1.5):
        with pytest.raises(GraphkitError, match="limit must be a whole number"):
            inbox.pending(limit=limit)  # type: ignore[arg-type]
    assert [p.id for p in inbox.pending()] == [paused.pending_approvals[0].id]
    assert ledger.ran == [] and agent.pending_approvals(run_id=paused.run_id)


@pytest.mark.parametrize("bad", ["t\x00", "t\ud800"])
def test_a_thread_or_message_id_no_database_stores_gets_a_typed_error_at_the_graphs_doors(
        durable_url: str, bad: str) -> None:
    """The graph's own doors and a new message's id reached the driver (psycopg's DataError,
    SQLite's UnicodeEncodeError: helper-110); refused as graphkit's errors, nothing changed."""
    from graphkit import GraphkitError

    agent, ledger = agent_with(pay_calls(1), checkpointer=durable_url)
    paused = agent.generate("pay")
    with pytest.raises(GraphkitError, match="NUL"):
        agent.graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": bad}})
    with pytest.raises(GraphkitError, match="NUL"):
        agent.generate(HumanMessage("stop", id=bad), thread_id=paused.thread_id)
    assert [p.status for p in agent.pending_approvals(run_id=paused.run_id)] == ["pending"]
    assert agent.approve_tool_call_generate(run_id=paused.run_id).text == "done"
    assert ledger.ran == [("pay", {**PAY, "amount": 1})]
