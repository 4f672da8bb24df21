"""The SQLite saver, store and ledger of one file share one reentrant lock (no busy-backoff
sleeps between them). LangGraph's `SqliteSaver.list` holds it while it yields, so: the lease
keeper renews on a connection of its own (else a slow history reader would let this process's
leases and call claims lapse, and another process run a running call again), and the thread
that iterates may read the store and ledger meanwhile (no deadlock)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, turn


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


@pytest.fixture
def short_leases(monkeypatch: pytest.MonkeyPatch) -> float:
    # Leases and claims of 0.6 s renewed every 0.2 s (instead of 30 s / 10 s): the same logic,
    # a test that does not wait half a minute.
    import graphkit._ledger._keeper as keeper_module
    import graphkit._ledger._schema as schema_module

    monkeypatch.setattr(schema_module, "LEASE_SECONDS", 0.6)
    # A keeper of its own: the process's one may be asleep for an earlier test's 10 s.
    monkeypatch.setattr(keeper_module, "KEEPER", keeper_module.LeaseKeeper())
    return 0.6


def test_a_slow_history_reader_lets_another_process_rerun_a_running_call(
        sqlite_url: str, short_leases: float) -> None:
    ran: list[str] = []
    started = threading.Event()
    go = threading.Event()

    @create_tool
    def deploy(version: str) -> str:
        """Deploy (slow)."""
        ran.append(version)
        started.set()
        go.wait(20)
        return f"deployed {version}"

    def make() -> Agent:
        return Agent(name="ops", tools=[deploy], checkpointer=sqlite_url, model=ScriptedChatModel(
            [turn(call("deploy", {"version": "1.0"}, "c1")), "done"]))

    first = make()
    stream = first.stream("deploy")
    runner = threading.Thread(target=stream.result, daemon=True)
    runner.start()
    assert started.wait(10)
    thread_id, run_id = stream.thread_id, stream.run_id

    # This process lists the thread's checkpoints, one at a time (an ops script that
    # inspects each; `graph.get_state_history` itself materialises the list, the saver's
    # `list` does not). The keeper's renewals wait meanwhile.
    saver = first.graph.checkpointer
    assert saver is not None and not isinstance(saver, bool)
    history = saver.list(config(thread_id))
    next(history)
    time.sleep(short_leases * 3)

    # Another process (its own connection and lock on the same file) resumes the thread.
    other = make()
    resumer = threading.Thread(target=lambda: other.resume(run_id=run_id), daemon=True)
    resumer.start()
    time.sleep(short_leases * 3)
    twice = list(ran)
    history.close()
    go.set()
    runner.join(20)
    resumer.join(20)
    assert twice == ["1.0"], f"the running call was started again by another process: {twice}"
    assert ran == ["1.0"]


def test_reading_the_store_while_listing_checkpoints_does_not_deadlock(sqlite_url: str) -> None:
    """Same thread: list the checkpoints lazily and look each run up in the graph's store (or
    the audit log). Before the shared lock this worked; a non-reentrant lock shared by the
    saver's open cursor and the store/ledger hangs forever."""
    agent = Agent(name="ops", tools=[], checkpointer=sqlite_url,
                  model=ScriptedChatModel(["done"]))
    result = agent.generate("hi")
    saver = agent.graph.checkpointer
    store = agent.graph.store
    assert saver is not None and not isinstance(saver, bool) and store is not None
    seen: list[Any] = []

    def inspect() -> None:
        for _checkpoint in saver.list(config(result.thread_id)):
            seen.append(store.get(("graphkit", "runs"), result.run_id))
            seen.append(agent._storage.ledger.read_audit(thread_id=result.thread_id))

    worker = threading.Thread(target=inspect, daemon=True)  # left hanging if it deadlocks
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "deadlock: the saver's list cursor holds the shared lock"
    assert seen
