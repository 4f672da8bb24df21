"""A run stopped mid-turn (`on_state_change`, a crash), then continued by a new user message
from a client that is not graphkit's API (a LangGraph server client, Studio, Agent Chat UI:
plain graph input). The model node supersedes what the stopped turn left without a result, so
the model reads a result right after each of its calls (providers refuse a conversation with a
tool call left unanswered), nothing superseded runs, and a call that did run is reported as it
ran."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from graphkit import Agent, Inbox
from graphkit._owner import new_owner
from tests.helpers import PAY, Ledger, agent_with, call, cfo_only, config, ledger_plan, turn

USER = {"langgraph_auth_user": {"identity": "user"}}


def _pay_then_done(seen: list[list[BaseMessage]]) -> Any:
    def reply(messages: list[BaseMessage]) -> Any:
        seen.append(list(messages))
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("pay", PAY, "c1"))
        return "done"

    return reply


def _raw_input(agent: Agent, thread_id: str, text: str) -> dict[str, Any]:
    """What a LangGraph server client sends: graph input, no graphkit API in between."""
    out: dict[str, Any] = agent.graph.invoke(
        {"messages": [HumanMessage(text)]},
        {"configurable": {"thread_id": thread_id, **USER}})
    return out


def _answered_right_after(messages: list[BaseMessage]) -> bool:
    """Every AI tool call is followed, before any other kind of message, by its result."""
    for index, message in enumerate(messages):
        if not isinstance(message, AIMessage) or not message.tool_calls:
            continue
        results = set()
        for later in messages[index + 1:]:
            if not isinstance(later, ToolMessage):
                break
            results.add(later.tool_call_id)
        if {c["id"] for c in message.tool_calls} - results:
            return False
    return True


def test_an_approved_call_stopped_before_it_ran_is_superseded_by_raw_input(
        sqlite_url: str) -> None:
    seen: list[list[BaseMessage]] = []
    agent, ran = agent_with(_pay_then_done(seen), checkpointer=sqlite_url,
                            approvers=cfo_only, name="billing")
    r = agent.generate("pay")
    approval = r.pending_approvals[0]
    agent.resolve_tool_approval(run_id=r.run_id, id=approval.id, approved=True,
                                decided_by="cfo")
    agent.resume(run_id=r.run_id, on_state_change=lambda s: s.node == "approval_gate")
    assert agent.graph.get_state(config(r.thread_id)).next == ("tools",)
    key = ledger_plan(agent, r.thread_id)["calls"][0]["key"]

    out = _raw_input(agent, r.thread_id, "also, what's the weather?")

    assert ran.ran == []
    assert _answered_right_after(seen[-1]), [type(m).__name__ for m in seen[-1]]
    assert _answered_right_after(out["messages"])
    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "superseded by a new user message" in str(told.content)
    assert [type(m).__name__ for m in out["messages"]] == [
        "HumanMessage", "AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
    # the approval stands as given; the call is recorded as answered without running, so no
    # later task (a replayed or forged Send of it) can run it
    outcome = agent._storage.ledger.outcomes([key])[key]
    assert outcome is not None and "superseded" in outcome["content"]


def test_a_pending_approval_of_a_stopped_turn_is_superseded_by_raw_input(
        sqlite_url: str) -> None:
    seen: list[list[BaseMessage]] = []
    agent, ran = agent_with(_pay_then_done(seen), checkpointer=sqlite_url,
                            approvers=cfo_only, name="billing")
    r = agent.generate("pay", on_state_change=lambda s: s.node == "model")
    assert [p.status for p in r.pending_approvals] == ["pending"]
    assert [p.tool_call_id for p in Inbox(sqlite_url).pending()] == ["c1"]

    out = _raw_input(agent, r.thread_id, "never mind")

    assert _answered_right_after(out["messages"]) and _answered_right_after(seen[-1])
    assert Inbox(sqlite_url).pending() == []
    row = agent._storage.ledger.approval(r.pending_approvals[0].id)
    assert row is not None and row.status == "rejected"
    # the superseded approval cannot be approved afterwards, and nothing ran
    assert ran.ran == []


def test_a_call_that_ran_before_the_stop_is_reported_as_it_ran(sqlite_url: str) -> None:
    """The process ran the tool and died before LangGraph saved its result: the ledger holds
    the outcome. The model is told that outcome, not that the call did not run."""
    seen: list[list[BaseMessage]] = []
    agent, _ = agent_with(_pay_then_done(seen), checkpointer=sqlite_url, approvers=cfo_only,
                          name="billing")
    r = agent.generate("pay")
    agent.resolve_tool_approval(run_id=r.run_id, id=r.pending_approvals[0].id, approved=True,
                                decided_by="cfo")
    agent.resume(run_id=r.run_id, on_state_change=lambda s: s.node == "approval_gate")
    key = ledger_plan(agent, r.thread_id)["calls"][0]["key"]
    ledger = agent._storage.ledger
    owner = new_owner()
    outcome, _held = ledger.start(key, owner, holder_dead=lambda _owner: False)
    assert outcome == "won"
    ledger.finish(key, owner, {"content": "paid 40 (receipt 7)", "status": "success"})

    out = _raw_input(agent, r.thread_id, "did it go through?")

    (told,) = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert told.content == "paid 40 (receipt 7)" and told.status == "success"
    assert _answered_right_after(seen[-1])


def test_raw_async_input_on_a_stopped_turn_in_memory() -> None:
    seen: list[list[BaseMessage]] = []
    money = Ledger()
    agent = Agent(name="billing", tools=money.tools, model=_model(seen))
    r = agent.generate("pay", on_state_change=lambda s: s.node == "model")

    async def main() -> dict[str, Any]:
        out: dict[str, Any] = await agent.graph.ainvoke(
            {"messages": [HumanMessage("never mind")]},
            {"configurable": {"thread_id": r.thread_id, **USER}})
        return out

    out = asyncio.run(main())
    assert _answered_right_after(out["messages"]) and _answered_right_after(seen[-1])
    assert money.ran == []


def test_the_api_path_still_answers_once() -> None:
    """Through the API the answers are in the input already: the model node adds none."""
    seen: list[list[BaseMessage]] = []
    money = Ledger()
    agent = Agent(name="billing", tools=money.tools, model=_model(seen))
    r = agent.generate("pay", on_state_change=lambda s: s.node == "model")
    after = agent.generate("never mind", thread_id=r.thread_id)
    results = [m for m in after.messages if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in results] == ["c1"]
    assert _answered_right_after(after.messages) and money.ran == []


def _model(seen: list[list[BaseMessage]]) -> Any:
    from graphkit.testing import ScriptedChatModel

    return ScriptedChatModel(_pay_then_done(seen))


def test_an_approval_taken_after_a_new_message_was_read_is_recorded_superseded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Graph input's message over a supervisor's turn whose subagent waits: a reviewer
    approved the subagent's payment after the model node read that nothing was decided, and
    before the wait was declined (the decline then changed nothing); the delegation was
    stopped all the same, and the approval stood "approved" for a payment that never ran
    (helper-134 F2). It is recorded superseded, like any approved call that will not run."""
    import graphkit._model_node as model_node
    from tests.test_replies import _boss

    url = f"sqlite:///{tmp_path}/x.db"
    ran: list[tuple[str, Any]] = []
    agent = _boss(url, ran, beside="wire")
    first = agent.generate("go")
    inbox = Inbox(url, approvers=lambda who, pending: True)
    (pay,) = [p for p in inbox.pending() if p.tool_name == "pay"]
    read = model_node.reply_to_suspension

    def approved_meanwhile(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        monkeypatch.setattr(model_node, "reply_to_suspension", read)
        inbox.approve(pay.id, decided_by="alice")
        return found

    monkeypatch.setattr(model_node, "reply_to_suspension", approved_meanwhile)
    agent.graph.invoke({"messages": [HumanMessage("never mind")]},
                       {"configurable": {"thread_id": first.thread_id}})
    assert ran == []
    row = agent._storage.ledger.approval(pay.id)
    assert row is not None and (row.status, (row.decision or {}).get("event")) == (
        "rejected", "superseded")
    assert inbox.pending() == [] and inbox.ready() == []
