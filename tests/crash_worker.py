"""A worker that drives many threads through approval rounds and can be killed at any point.

    python -m tests.crash_worker DB EFFECTS_DB THREADS ROUNDS

Each round: a user message, a `charge` call that needs approval, a decision (every fourth
call declined), a resume, the model's answer. The worker picks up wherever the previous
(killed) worker left each thread. `charge` records every attempt, and its effect keyed by
tool_call_id (the idempotency key a tool with side effects should use).
"""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from graphkit import Agent, ApprovalAlreadyResolvedError, Inbox, ToolContext, create_tool
from graphkit.testing import ScriptedChatModel


def declined(tool_call_id: str) -> bool:
    return int(hashlib.sha256(tool_call_id.encode()).hexdigest(), 16) % 4 == 0


def effects_db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS attempts (tool_call_id TEXT NOT NULL)")
    conn.execute("CREATE TABLE IF NOT EXISTS effects (tool_call_id TEXT PRIMARY KEY)")
    return conn


def build(db: str, effects_path: str) -> Agent:
    effects = effects_db(effects_path)

    @create_tool(needs_approval=True)
    def charge(ref: str, ctx: ToolContext) -> str:
        """Charge a card (its side effect is keyed by the tool call id)."""
        effects.execute("INSERT INTO attempts VALUES (?)", (ctx.tool_call_id,))
        effects.execute("INSERT INTO effects VALUES (?) ON CONFLICT DO NOTHING",
                        (ctx.tool_call_id,))
        return f"charged {ref}"

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(f"done: {messages[-1].content}")
        thread = str(messages[0].content).split()[1]
        rounds = sum(isinstance(m, HumanMessage) for m in messages)
        return AIMessage("", tool_calls=[{"name": "charge", "args": {"ref": f"{thread}/{rounds}"},
                                          "id": f"{thread}-{rounds}"}])

    return Agent(name="billing", model=ScriptedChatModel(reply), tools=[charge],
                 checkpointer=db)


def settled(messages: list[BaseMessage]) -> bool:
    return bool(messages) and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls


def step(agent: Agent, inbox: Inbox, thread: str, rounds: int) -> bool:
    """Advance one thread by one action; False when it has finished all its rounds."""
    config: Any = {"configurable": {"thread_id": thread}}
    state = agent.graph.get_state(config)
    messages = list(state.values.get("messages") or [])
    humans = sum(isinstance(m, HumanMessage) for m in messages)
    run_id = (state.metadata or {}).get("graphkit_run_id")
    if state.interrupts:
        for interrupt in state.interrupts:
            for record in interrupt.value["approvals"]:
                try:
                    if declined(record["tool_call_id"]):
                        inbox.decline(record["id"], decided_by="worker")
                    else:
                        inbox.approve(record["id"], decided_by="worker")
                except ApprovalAlreadyResolvedError:
                    pass  # decided before the last crash
        agent.resume(run_id=str(run_id))
        return True
    if state.next or (messages and not settled(messages)):
        # Killed mid-run: continue from the last checkpoint and the writes saved after it
        # (a task that finished before the kill is not run again).
        agent.resume(run_id=str(run_id))
        return True
    if humans < rounds and (not messages or settled(messages)):
        agent.generate(f"thread {thread} round {humans}", thread_id=thread)
        return True
    return humans < rounds


def main(db: str, effects: str, threads: int, rounds: int) -> None:
    agent = build(db, effects)
    inbox = Inbox(db)
    names = [f"t{i:03d}" for i in range(threads)]
    busy = True
    while busy:
        busy = False
        for name in names:
            busy = step(agent, inbox, name, rounds) or busy


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
