"""How calls execute: concurrency, predicate tools alone, side effects exactly once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import agent_with, call, turn


def test_calls_needing_no_decision_run_concurrently() -> None:
    # A barrier of 8 only opens when all eight calls are running at the same time.
    barrier = threading.Barrier(8, timeout=10)

    @create_tool
    def wait(i: int) -> str:
        """Wait for the others."""
        barrier.wait()
        time.sleep(0.05)
        return str(i)

    agent = Agent(name="p", model=ScriptedChatModel(
        [turn(*[call("wait", {"i": i}, f"w{i}") for i in range(8)]), "done"]), tools=[wait])
    result = agent.generate("go")
    assert result.text == "done"
    assert not barrier.broken


async def test_async_tools_run_concurrently() -> None:
    started = 0
    all_in = asyncio.Event()

    @create_tool
    async def wait(i: int) -> str:
        """Wait for the others."""
        nonlocal started
        started += 1
        if started == 8:
            all_in.set()
        await asyncio.wait_for(all_in.wait(), timeout=10)
        return str(i)

    agent = Agent(name="p", model=ScriptedChatModel(
        [turn(*[call("wait", {"i": i}, f"w{i}") for i in range(8)]), "done"]), tools=[wait])
    assert (await agent.agenerate("go")).text == "done"


def test_predicate_tools_run_alone_and_in_order() -> None:
    active = 0
    peak_with_predicate = 0
    order: list[str] = []
    lock = threading.Lock()

    def track(name: str, predicate: bool) -> None:
        nonlocal active, peak_with_predicate
        with lock:
            active += 1
            order.append(name)
        time.sleep(0.03)
        with lock:
            if predicate:
                peak_with_predicate = max(peak_with_predicate, active)
            active -= 1

    @create_tool(needs_approval=lambda a: False)
    def guarded(n: int) -> str:
        """Decides per call."""
        track(f"g{n}", True)
        return "ok"

    @create_tool
    def free(n: int) -> str:
        """Always runs."""
        track(f"f{n}", False)
        return "ok"

    script = [turn(call("guarded", {"n": 1}, "a"), call("free", {"n": 1}, "b"),
                   call("guarded", {"n": 2}, "c"), call("free", {"n": 2}, "d")), "done"]
    agent = Agent(name="p", model=ScriptedChatModel(script), tools=[guarded, free])
    assert agent.generate("go").text == "done"
    assert peak_with_predicate == 1
    assert order.index("g1") < order.index("g2")
    assert sorted(order) == ["f1", "f2", "g1", "g2"]


def test_predicate_called_exactly_once_per_call_across_pause_and_resume() -> None:
    script = [turn(call("bash", {"command": "ls"}, "c1"),
                   call("bash", {"command": "rm -rf /tmp/x"}, "c2")), "done"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    assert result.finish_reason == "suspended"
    assert [p["command"] for p in ledger.predicate_calls] == ["ls", "rm -rf /tmp/x"]
    assert ledger.ran == [("bash", {"command": "ls"})]
    agent.approve_tool_call_generate(run_id=result.run_id)
    assert len(ledger.predicate_calls) == 2
    assert ledger.names() == ["bash", "bash"]


def test_a_predicate_that_raises_counts_as_true() -> None:
    def broken(args: dict[str, Any]) -> bool:
        raise RuntimeError("cannot decide")

    ran: list[str] = []

    @create_tool(needs_approval=broken)
    def risky(x: str) -> str:
        """Risky."""
        ran.append(x)
        return x

    agent = Agent(name="p", model=ScriptedChatModel([turn(call("risky", {"x": "1"}, "c1")),
                                                     "done"]), tools=[risky])
    result = agent.generate("go")
    assert result.finish_reason == "suspended" and ran == []
    assert result.pending_approvals[0].verdict == "conditional"


def test_siblings_that_already_ran_do_not_run_again_on_resume() -> None:
    script = [turn(call("lookup", {"key": "a"}, "c1"), call("pay", {"amount": 1,
                   "payee": {"name": "x"}}, "c2"), call("lookup", {"key": "b"}, "c3")), "done"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    assert sorted(ledger.names()) == ["lookup", "lookup"]
    agent.approve_tool_call_generate(run_id=result.run_id)
    assert sorted(ledger.names()) == ["lookup", "lookup", "pay"]


def test_tool_callback_runs_carry_approval_metadata() -> None:
    seen: dict[str, dict[str, Any]] = {}

    class Recorder(BaseCallbackHandler):
        def on_tool_start(self, serialized: dict[str, Any], input_str: str, *,
                          metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
            name = (serialized or {}).get("name") or kwargs.get("name")
            seen[str(name)] = dict(metadata or {})

    script = [turn(call("lookup", {"key": "a"}, "c1"), call("bash", {"command": "ls"}, "c2"),
                   call("pay", {"amount": 1, "payee": {"name": "x"}}, "c3")), "done"]
    agent, _ = agent_with(script)
    config_handler = Recorder()
    agent.graph.invoke({"messages": [("user", "go")]},
                       {"configurable": {"thread_id": "t"}, "callbacks": [config_handler]})
    from langgraph.types import Command
    agent.graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}),
                       {"configurable": {"thread_id": "t"}, "callbacks": [config_handler]})
    assert seen["lookup"]["approval.required"] is False
    assert seen["bash"]["approval.conditional"] is True
    assert "approval.required" not in seen["bash"]
    assert seen["pay"]["approval.required"] is True


async def test_sync_tools_in_an_async_run_run_concurrently() -> None:
    barrier = threading.Barrier(8, timeout=10)

    @create_tool
    def wait(i: int) -> str:
        """Wait for the others."""
        barrier.wait()
        return str(i)

    agent = Agent(name="p", model=ScriptedChatModel(
        [turn(*[call("wait", {"i": i}, f"w{i}") for i in range(8)]), "done"]), tools=[wait])
    assert (await agent.agenerate("go")).text == "done"
    assert not barrier.broken


def test_an_outcome_is_recorded_once_the_database_is_back(tmp_path: Any) -> None:
    """The tool ran, and recording its result met a database away for a while (locked past
    the wait here; a PostgreSQL server restarting did the same): the resume raised, the
    call's claim lapsed, and the call ran again in the same process (helper-59). The write is
    tried again, the claim still renewed, until it lands."""
    import sqlite3

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ran: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        holder = sqlite3.connect(tmp_path / "runs.db", isolation_level=None,
                                 check_same_thread=False)
        holder.execute("BEGIN EXCLUSIVE")  # the file is held as the tool returns ...
        threading.Timer(1.5, holder.rollback).start()  # ... for longer than the ledger waits
        return "paid"

    agent = Agent(name="payer", tools=[pay], checkpointer=url,
                  model=ScriptedChatModel([turn(call("pay", {"amount": 5}, "p1")), "done"]))
    agent._storage.ledger._sql.conn.execute("PRAGMA busy_timeout = 200")  # type: ignore[attr-defined]
    paused = agent.generate("pay 5")
    final = agent.approve_tool_call_generate(run_id=paused.run_id)
    assert (final.text, ran) == ("done", [5])
