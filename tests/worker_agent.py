"""An agent for the worker tests: `graphkit worker --agent tests.worker_agent:make`.

Its `transfer` tool records each real execution (tool_call_id, when, which process) in the
SQLite file named by $GRAPHKIT_TEST_EFFECTS. With $GRAPHKIT_TEST_TOOL_SECONDS it takes that
long, and records its start first (`started`). With $GRAPHKIT_TEST_CALLS its model asks for
that many transfers in one turn (they run in parallel).
"""

from __future__ import annotations

import os
import sqlite3
import time

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from graphkit import Agent, ToolContext, create_tool
from graphkit.testing import ScriptedChatModel


def effects(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS ran (tool_call_id TEXT, at REAL, pid INTEGER)")
    conn.execute("CREATE TABLE IF NOT EXISTS started (tool_call_id TEXT, at REAL, pid INTEGER)")
    return conn


def make(url: str) -> Agent:
    conn = effects(os.environ["GRAPHKIT_TEST_EFFECTS"])
    seconds = float(os.environ.get("GRAPHKIT_TEST_TOOL_SECONDS", "0"))
    calls = int(os.environ.get("GRAPHKIT_TEST_CALLS", "1"))

    @create_tool(needs_approval=True)
    def transfer(amount: int, ctx: ToolContext) -> str:
        """Move money."""
        if seconds:
            conn.execute("INSERT INTO started VALUES (?, ?, ?)",
                         (ctx.tool_call_id, time.time(), os.getpid()))
            time.sleep(seconds)
        conn.execute("INSERT INTO ran VALUES (?, ?, ?)",
                     (ctx.tool_call_id, time.time(), os.getpid()))
        return "moved"

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("done")
        return AIMessage("", tool_calls=[{"name": "transfer", "args": {"amount": 1},
                                          "id": f"call-{time.time_ns()}-{i}"}
                                         for i in range(calls)])

    return Agent(name="bank", model=ScriptedChatModel(reply), tools=[transfer], checkpointer=url)


def decide_and_exit(url: str, run_id: str, lease_seconds: str) -> None:
    """Approve the run's call through the Agent API, which resumes the run itself, and have
    this process end before the run goes on (the stream it returned is never read)."""
    from graphkit._ledger import _schema

    _schema.LEASE_SECONDS = float(lease_seconds)
    make(url).approve_tool_call(run_id=run_id, decided_by="ops")
    os._exit(0)


if __name__ == "__main__":
    import sys

    decide_and_exit(*sys.argv[1:4])
