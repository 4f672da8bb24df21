"""`Agent._current` reuses the state a decision was claimed on when the thread's
latest (root) checkpoint id has not moved. A subagent advancing inside the supervisor's
interrupted superstep changes the state without a new root checkpoint."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, turn


def sub(name: str, days: list[int], purged: list[tuple[str, int]]) -> Agent:
    @create_tool(needs_approval=True, name="purge")
    def purge(days: int) -> str:
        """Purge logs."""
        purged.append((name, days))
        return f"purged {days}"

    def reply(messages: list[BaseMessage]) -> Any:
        n = sum(isinstance(m, AIMessage) for m in messages)
        if n < len(days):
            return turn(call("purge", {"days": days[n]}, f"{name}{n}"))
        return f"{name} done"

    return Agent(name=name, description=name, tools=[purge], model=ScriptedChatModel(reply))


def test_a_stale_claimed_state_neither_reruns_nor_skips(sqlite_url: str) -> None:
    purged: list[tuple[str, int]] = []

    def boss_reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("ops", {"task": "a"}, "d1"), call("dba", {"task": "b"}, "d2"))
        return "boss done"

    boss = Agent(name="boss", checkpointer=sqlite_url, model=ScriptedChatModel(boss_reply),
                 agents={"ops": sub("ops", [7, 8], purged), "dba": sub("dba", [1], purged)})
    result = boss.generate("go")
    ops1 = next(p for p in result.pending_approvals if p.agent_path[-1] == "ops")
    dba1 = next(p for p in result.pending_approvals if p.agent_path[-1] == "dba")
    cfg = {"configurable": {"thread_id": result.thread_id}}
    before = boss.graph.get_state(cfg).config["configurable"]["checkpoint_id"]
    stale = boss.approve_tool_call(run_id=result.run_id, tool_call_id=ops1.tool_call_id,
                                   decided_by="a")
    second = boss.approve_tool_call_generate(run_id=result.run_id,
                                             tool_call_id=dba1.tool_call_id, decided_by="a")
    after = boss.graph.get_state(cfg).config["configurable"]["checkpoint_id"]
    assert second.finish_reason == "suspended"
    assert sorted(purged) == [("dba", 1), ("ops", 7)]
    late = stale.result()  # prepared on the state claimed before `second` ran
    assert sorted(purged) == [("dba", 1), ("ops", 7)], "something ran twice"
    assert late.finish_reason == "suspended", (before, after, late)
    (ops2,) = [p for p in late.pending_approvals if p.status == "pending"]
    assert ops2.args == {"days": 8}
    final = boss.approve_tool_call_generate(run_id=result.run_id,
                                            tool_call_id=ops2.tool_call_id, decided_by="a")
    assert final.text == "boss done"
    assert sorted(purged) == [("dba", 1), ("ops", 7), ("ops", 8)]
    answers = [m for m in final.messages if isinstance(m, ToolMessage)]
    assert len(answers) == 2
