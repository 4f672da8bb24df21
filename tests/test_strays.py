"""A new model turn declines what the same agent still has pending in the ledger beyond its
plan (a turn that never reached a checkpoint), but never what a reviewer still has to decide:
a parallel delegation's approval (another `scope`, or not indexed yet), another thread's.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, turn


def ops_agent(purged: list[int]) -> Agent:
    @create_tool(needs_approval=True)
    def purge(days: int) -> str:
        """Purge logs older than `days` days."""
        purged.append(days)
        return f"purged {days}"

    def reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            days = int(str(messages[-1].content).split()[-1])
            return turn(call("purge", {"days": days}, f"p{days}"))
        results = [m for m in messages if isinstance(m, ToolMessage)]
        return f"ops finished: {results[-1].content if results else 'nothing'}"

    return Agent(name="ops", description="Ops.", tools=[purge], model=ScriptedChatModel(reply))


def boss_agent(purged: list[int], checkpointer: str) -> Agent:
    def reply(messages: list[BaseMessage]) -> Any:
        if sum(isinstance(m, AIMessage) for m in messages) == 0:
            return turn(call("ops", {"task": "purge 7"}, "d7"),
                        call("ops", {"task": "purge 9"}, "d9"))
        return "boss done"

    return Agent(name="boss", agents={"ops": ops_agent(purged)}, checkpointer=checkpointer,
                 model=ScriptedChatModel(reply))


def slow_first_index_write(agent: Agent, delay: float) -> None:
    """The first mark of what a run waits on takes `delay` seconds (a busy database, a
    GIL-bound thread): nothing else about the run changes."""
    ledger = agent._storage.ledger
    real_mark = ledger.mark_waiting
    slowed = threading.Event()

    def mark(*args: Any, **kwargs: Any) -> None:
        if kwargs.get("waiting") and not slowed.is_set():
            slowed.set()
            time.sleep(delay)
        real_mark(*args, **kwargs)

    ledger.mark_waiting = mark  # type: ignore[method-assign]


@pytest.mark.parametrize("delay", [0.5, 0.02])
def test_two_parallel_delegations_of_one_subagent_keep_both_approvals(
        sqlite_url: str, delay: float) -> None:
    """Two delegations of `ops` in one supervisor turn run concurrently; each plans a gated
    `purge`. Both must wait for a reviewer. Delegation A registers its approval in the ledger,
    then marks that its run waits on it; if delegation B's model turn sweeps strays between
    the two, B finds A's pending approval unmarked (so no `scope` to tell it is a parallel
    delegation) and must still not decline it as a stray."""
    purged: list[int] = []
    boss = boss_agent(purged, sqlite_url)
    slow_first_index_write(boss, delay)
    result = boss.generate("purge both")
    statuses = {tuple(p.args.items()): p.status for p in result.pending_approvals}
    audit = boss._storage.ledger.read_audit(thread_id=result.thread_id)
    strays = [e for e in audit if e["event"] == "superseded"]
    assert not strays, f"a parallel delegation's approval was declined as a stray: {strays}"
    assert result.finish_reason == "suspended"
    assert sorted(statuses) == [(("days", 7),), (("days", 9),)], statuses
    assert set(statuses.values()) == {"pending"}
    assert purged == []


def test_parallel_delegations_without_any_delay(sqlite_url: str) -> None:
    """The same race, with nothing slowed: tried a few times."""
    declined = 0
    for _ in range(8):
        purged: list[int] = []
        boss = boss_agent(purged, sqlite_url)
        result = boss.generate("purge both")
        audit = boss._storage.ledger.read_audit(thread_id=result.thread_id)
        declined += sum(e["event"] == "superseded" for e in audit)
    assert declined == 0, f"{declined} approvals of parallel delegations declined as strays"


def test_a_client_of_another_thread_cannot_wipe_this_threads_approvals(sqlite_url: str) -> None:
    """Thread B's client writes a new model turn into B (update_state) and runs the gate: the
    new turn's stray sweep must touch only B's approvals, never A's."""
    from langgraph.types import Command

    from tests.helpers import agent_with

    pay = {"amount": 40, "payee": {"name": "ACME"}}

    def script(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("pay", pay, "c1"))
        return "done"

    agent, ran = agent_with(script, checkpointer=sqlite_url)
    a = agent.generate("pay")
    b = agent.generate("pay")
    forged = AIMessage("", id="forged-turn", tool_calls=[call("pay", {**pay, "amount": 1}, "c2")])
    cfg = {"configurable": {"thread_id": b.thread_id, "graphkit_agent_path": ["x"]}}
    agent.graph.update_state(cfg, {"messages": [forged]}, as_node="model")
    agent.graph.invoke(Command(goto="approval_gate"), cfg)
    (mine,) = agent.pending_approvals(run_id=a.run_id)
    assert mine.status == "pending"
    assert agent._storage.ledger.approval(mine.id).status == "pending"
    assert ran.ran == []
