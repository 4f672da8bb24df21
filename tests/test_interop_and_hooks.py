"""LangChain HITL interoperability, the graph's shape, and the on_state_change stop hook."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command

from graphkit import RunState
from tests.helpers import agent_with, call, turn

PAY = {"amount": 5, "payee": {"name": "Zed"}}


def test_graph_has_model_gate_and_tools_nodes() -> None:
    agent, _ = agent_with(["hi"])
    nodes = set(agent.graph.get_graph().nodes)
    assert {"model", "approval_gate", "tools"} <= nodes
    mermaid = agent.graph.get_graph().draw_mermaid()
    assert "model" in mermaid and "approval_gate" in mermaid


def test_interrupt_carries_langchain_hitl_request_and_accepts_its_decisions() -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 6}, "c2"),
                   call("pay", {**PAY, "amount": 7}, "c3")), "done"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    config = {"configurable": {"thread_id": result.thread_id}}
    (interrupt,) = agent.graph.get_state(config).interrupts
    request = interrupt.value
    assert [a["name"] for a in request["action_requests"]] == ["pay", "pay", "pay"]
    assert request["action_requests"][0]["args"] == PAY
    assert request["action_requests"][0]["description"] == "Pay 5 to Zed?"
    assert request["review_configs"][0] == {
        "action_name": "pay", "allowed_decisions": ["approve", "edit", "reject"]}

    out = agent.graph.invoke(Command(resume={"decisions": [
        {"type": "approve"},
        {"type": "edit", "edited_action": {"name": "pay", "args": {**PAY, "amount": 60}}},
        {"type": "reject", "message": "duplicate payment"},
    ]}), config)
    assert sorted(r[1]["amount"] for r in ledger.ran) == [5, 60]  # c3 rejected, never ran
    tool_messages = {m.tool_call_id: m for m in out["messages"] if isinstance(m, ToolMessage)}
    assert "duplicate payment" in tool_messages["c3"].text
    assert tool_messages["c3"].status == "error"
    ai = next(m for m in out["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert ai.tool_calls[1]["args"]["amount"] == 60
    assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].text == "done"


def test_on_state_change_stops_at_awaiting_approval_and_resume_continues() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "done"])
    states: list[RunState] = []

    def hook(state: RunState) -> bool:
        states.append(state)
        return state.awaiting_approval

    result = agent.generate("go", on_state_change=hook, checkpoint_reason="awaiting-human-approval")
    assert result.finish_reason == "checkpoint"
    assert states[-1].awaiting_approval and not states[0].awaiting_approval
    assert [p.tool_call_id for p in result.pending_approvals] == ["c1"]
    snapshot = agent.snapshot(run_id=result.run_id)
    assert snapshot["checkpoint_reason"] == "awaiting-human-approval"
    assert ledger.ran == []

    paused = agent.resume(run_id=result.run_id)
    assert paused.finish_reason == "suspended"
    final = agent.approve_tool_call_generate(run_id=result.run_id)
    assert final.text == "done" and ledger.names() == ["pay"]


def test_hook_that_never_stops_sees_every_step() -> None:
    agent, _ = agent_with([turn(call("lookup", {"key": "k"}, "c1")), "done"])
    steps: list[int] = []
    result = agent.generate("go", on_state_change=lambda s: steps.append(s.step) and False)
    assert result.finish_reason == "stop"
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 4


@pytest.mark.parametrize("reader", ["state hook", "stream"])
def test_what_a_run_hands_its_caller_is_a_copy_nothing_changed_in_it_runs(reader: str) -> None:
    """A state hook shown the run's own messages set a call's nested argument in them: the
    reviewer was asked about that value, and the approved call never ran ("superseded by a
    new user message", which nobody sent; helper-60). A stream's chunks held the run's own
    arguments too. Both are copies now: the reviewer is asked about, and the tool runs,
    what the model wrote."""
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "done"])

    def meddle(args: dict[str, Any]) -> None:
        args["payee"]["name"] = "Mallory"
        args["amount"] = 999

    def hook(state: RunState) -> bool:
        for message in state.messages:
            for called in getattr(message, "tool_calls", None) or []:
                meddle(called["args"])
        return False

    if reader == "state hook":
        run_id = agent.generate("go", on_state_change=hook).run_id
    else:
        stream = agent.stream("go")
        for chunk in stream:
            if chunk.type == "tool-call":
                meddle(chunk.payload["args"])
        run_id = stream.run_id
    (pending,) = agent.snapshot(run_id=run_id)["pending_approvals"]
    assert pending["args"] == PAY
    assert agent.approve_tool_call_generate(run_id=run_id).text == "done"
    assert ledger.ran == [("pay", PAY)]
