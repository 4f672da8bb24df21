"""Attacks, kept as regression tests, on the model node superseding a stopped turn's unanswered
calls when a new user message comes from any door (`_client_writes.stopped_turn`,
`_gate.supersede_unanswered`, shared with the API's `_control._abandoned`).

The tests without `held_` in their name failed on the reviewed code (each names the promise it
broke) and pass since the fixes; the `held_` tests document attacks that did not get through.
Plain graph input supersedes a subagent's suspended tool rather than resuming it, by design
(`test_raw_input_supersedes_a_subagents_suspended_tool_and_loses_nothing` says why).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.types import Command

from graphkit import Agent, Inbox, create_tool
from graphkit._owner import new_owner
from graphkit.errors import GraphkitError
from graphkit.testing import ScriptedChatModel
from tests.helpers import (
    PAY,
    agent_with,
    call,
    cfo_only,
    config,
    dead_owner,
    ledger_plan,
    pay_call,
    pay_then_done,
    plan_of,
    turn,
)
from tests.test_supervisor import FIND, Users, supervisor

USER = {"langgraph_auth_user": {"identity": "user"}}


def _raw_input(agent: Agent, thread_id: str, text: str) -> dict[str, Any]:
    """A LangGraph server client's new message: plain graph input."""
    out: dict[str, Any] = agent.graph.invoke(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread_id, **USER}})
    return out


def _told(messages: list[BaseMessage], tool_call_id: str) -> ToolMessage:
    (told,) = [m for m in messages
               if isinstance(m, ToolMessage) and m.tool_call_id == tool_call_id]
    return told


def _approved_and_stopped_before_the_tool(url: str) -> tuple[Agent, Any, Any, str, Any]:
    """An approved payment whose run stopped after the gate dispatched it (next: tools)."""
    agent, ran = agent_with(pay_then_done, checkpointer=url, approvers=cfo_only,
                            name="billing")
    r = agent.generate("pay")
    agent.resolve_tool_approval(run_id=r.run_id, id=r.pending_approvals[0].id, approved=True,
                                decided_by="cfo")
    agent.resume(run_id=r.run_id, on_state_change=lambda s: s.node == "approval_gate")
    snapshot = agent.graph.get_state(config(r.thread_id))
    assert snapshot.next == ("tools",)
    key = ledger_plan(agent, r.thread_id)["calls"][0]["key"]
    return agent, ran, r, key, snapshot.config



# ============================================================ F1: a call whose execution was
# claimed (in flight, or its process died mid-call) is told "was not run" and is not fenced:
# `settle` skips it (executed IS NULL only) and `outcomes` has no outcome for it


def test_a_superseded_call_whose_holder_died_never_runs_on_a_replay(sqlite_url: str) -> None:
    """The process running the approved payment died mid-call (its claim is in the ledger).
    A new user message supersedes the turn: the model is told the payment 'was not run:
    superseded'. The call is not settled, so a replay of the paused checkpoint (a LangGraph
    server client running from a checkpoint id) takes over the dead claim and pays."""
    agent, ran, r, key, paused = _approved_and_stopped_before_the_tool(sqlite_url)
    ledger = agent._storage.ledger
    assert ledger.start(key, dead_owner(), holder_dead=lambda _o: False) == ("won", None)

    out = _raw_input(agent, r.thread_id, "never mind, did anything happen?")
    told = _told(out["messages"], "c1")
    assert "whether it took effect is unknown" in str(told.content) and ran.ran == []

    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)  # replay the step that dispatched the payment
    assert ran.ran == [], (
        "the model was told the payment would not run again, and it ran afterwards: "
        f"{ran.ran}")


def test_a_call_in_flight_is_not_reported_as_not_run(sqlite_url: str) -> None:
    """The run was cancelled while the payment ran (a server's `interrupt` multitask strategy:
    a sync tool goes on in its thread) and a new message came: the model is told the payment
    'was not run', and then it completes."""
    agent, _ran, r, key, _ = _approved_and_stopped_before_the_tool(sqlite_url)
    ledger = agent._storage.ledger
    owner = new_owner()  # this live process holds the call: it is running
    assert ledger.start(key, owner, holder_dead=lambda _o: False) == ("won", None)

    out = _raw_input(agent, r.thread_id, "while that runs: what's the weather?")
    ledger.finish(key, owner, {"content": "paid 40 to ACME", "status": "success"})

    told = _told(out["messages"], "c1")
    assert "was not run" not in str(told.content), (
        f"the model was told {told.content!r} about a payment that was running (and paid)")
    # a live holder is left alone: its result is recorded when it finishes, and the call
    # does not start again
    assert "still running" in str(told.content)
    assert ledger.outcomes([key])[key] == {"content": "paid 40 to ACME", "status": "success"}
    assert ledger.start(key, new_owner(), holder_dead=lambda _o: True)[0] == "done"


def test_a_delegation_whose_subagent_acted_is_not_reported_as_not_run(sqlite_url: str
                                                                      ) -> None:
    """The subagent moved the money, then its model failed (the run crashed inside the
    delegation). A new message tells the supervisor's model the delegation 'was not run':
    the outcome lookup covers the delegation's key only, not what ran inside it."""
    moved: list[int] = []

    @create_tool
    def transfer(amount: int) -> str:
        """Move money between the company's own accounts."""
        moved.append(amount)
        return f"moved {amount}"

    def sub(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            raise RuntimeError("provider down")
        return turn(call("transfer", {"amount": 40}, "t1"))

    def top(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("ops", {"task": "move 40"}, "d1"))
        return "ok"

    ops = Agent(name="ops", description="ops", tools=[transfer], model=ScriptedChatModel(sub))
    boss = Agent(name="boss", agents={"ops": ops}, model=ScriptedChatModel(top),
                 checkpointer=sqlite_url)
    with pytest.raises(RuntimeError, match="provider down"):
        boss.generate("move 40", thread_id="t")
    assert moved == [40]

    out = _raw_input(boss, "t", "did it go through?")
    told = _told(out["messages"], "d1")
    assert "was not run" not in str(told.content), (
        f"the supervisor's model was told {told.content!r}; the subagent moved {moved}")


# ============================================================ F2: raw input supersedes only the
# top agent's calls: a subagent's pending approval stays in the inbox (the API's new message
# declines it), can still be approved, and runs on a replay although the supervisor's model
# was told the delegation was superseded


def test_raw_input_supersedes_a_subagents_pending_approval(sqlite_url: str) -> None:
    users = Users()
    sup = supervisor(users, [FIND[0], "Okay, dropping it."], checkpointer=sqlite_url)
    r = sup.generate("Find user with ID 12345")
    (pending,) = r.pending_approvals
    assert pending.agent_path == ["supervisor", "data_agent"]
    snapshot = sup.graph.get_state(config(r.thread_id))
    paused, interrupt_id = snapshot.config, snapshot.tasks[0].interrupts[0].id

    out = _raw_input(sup, r.thread_id, "never mind")
    assert "stopped by a new user message" in str(_told(out["messages"], "d1").content)

    inbox = Inbox(sqlite_url)
    still = [p.id for p in inbox.pending()]
    with contextlib.suppress(GraphkitError):
        inbox.approve(pending.id, decided_by="alice")  # the reviewer sees it waiting
    with contextlib.suppress(Exception):
        sup.graph.invoke(Command(resume={interrupt_id: {}}), paused)
    assert users.looked_up == [], (
        "the delegation was superseded, yet its subagent's lookup ran after an approval "
        f"the inbox still offered (pending after the new message: {still})")
    assert still == [], f"a superseded subagent approval stays in the inbox: {still}"


def test_raw_input_auto_resumes_like_the_api_when_the_agent_enables_it() -> None:
    """An agent built with auto_resume_suspended_tools=True resumes a suspended tool from the
    user's reply through its API; the same reply as graph input (a server client) does the
    same, and the conversation ends up as the API leaves it (the reply after the tool's
    result)."""
    from tests.test_suspension import weather_agent

    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("What's the weather like?")
    assert first.finish_reason == "suspended"
    out = _raw_input(agent, first.thread_id, "San Francisco")
    assert log == ["started", "started", "fetched San Francisco"], log
    assert [type(m).__name__ for m in out["messages"]] == [
        "HumanMessage", "AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
    assert out["messages"][-1].text == "The weather in San Francisco: sunny, +72F"


# ============================================================ F3: malformed client-written plan
# fields the model node never read before now crash it with untyped errors, after it has
# already declined the waiting approval


@pytest.mark.parametrize("field", ["key", "tool_call_id", "tool_name", "approval_id",
                                   "suspension"])
def test_a_malformed_plan_gets_a_typed_error_and_changes_nothing(sqlite_url: str,
                                                                 field: str) -> None:
    agent, ran = agent_with(pay_then_done, name="billing", checkpointer=sqlite_url)
    r = agent.generate("pay")
    plan = plan_of(agent, r.thread_id)
    planned = pay_call(plan)
    if field == "key":
        planned["key"] = {"k": 1}
    elif field == "tool_call_id":
        planned["tool_call_id"] = None
    elif field == "tool_name":
        planned["tool_name"] = 7
    elif field == "approval_id":
        planned["approval"]["id"] = {"x": 1}
    else:
        del planned["suspension"]
    agent.graph.update_state(config(r.thread_id), {"turn": plan})
    approval_id = r.pending_approvals[0].id

    try:
        _raw_input(agent, r.thread_id, "hello")
    except GraphkitError:
        row = agent._storage.ledger.approval(approval_id)
        assert row is not None and row.status == "pending", (
            "a refused input changed the ledger")
    except Exception as exc:
        row = agent._storage.ledger.approval(approval_id)
        pytest.fail(f"untyped {type(exc).__module__}.{type(exc).__name__}: {exc} "
                    f"(approval now {row.status if row else None!r})")
    assert ran.ran == []


# ============================================================ held


def test_held_a_plan_naming_another_threads_call_touches_nothing_there(sqlite_url: str
                                                                      ) -> None:
    """A forged plan with another thread's approval id and (ran) call key: that approval stays
    pending, and this thread's model is not told the other thread's outcome."""
    agent, ran = agent_with(pay_then_done, name="billing", checkpointer=sqlite_url,
                            approvers=cfo_only)
    victim = agent.generate("pay")
    victim_plan = plan_of(agent, victim.thread_id)
    done = agent.generate("pay")
    ran_key = pay_call(plan_of(agent, done.thread_id))["key"]
    agent.approve_tool_call_generate(run_id=done.run_id, decided_by="cfo")
    assert ran.ran and agent._storage.ledger.outcomes([ran_key])[ran_key] is not None

    attacker = agent.generate("pay")
    plan = plan_of(agent, attacker.thread_id)
    forged = pay_call(plan)
    forged["key"] = ran_key
    forged["approval"] = pay_call(victim_plan)["approval"]
    agent.graph.update_state(config(attacker.thread_id), {"turn": plan})
    out = _raw_input(agent, attacker.thread_id, "hi")

    assert "paid" not in str(_told(out["messages"], "c1").content)
    row = agent._storage.ledger.approval(victim.pending_approvals[0].id)
    assert row is not None and row.status == "pending"


def test_held_a_superseded_call_never_runs_on_a_replay(sqlite_url: str) -> None:
    agent, ran, r, key, paused = _approved_and_stopped_before_the_tool(sqlite_url)
    _raw_input(agent, r.thread_id, "never mind")
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)
    assert ran.ran == []
    outcome = agent._storage.ledger.outcomes([key])[key]
    assert outcome is not None and "superseded" in outcome["content"]


def test_held_normal_flows_never_supersede(sqlite_url: str) -> None:
    """Approve, decline, parallel calls: the model node adds no answer of its own."""
    agent, ran = agent_with(
        lambda m: ("done" if any(isinstance(x, AIMessage) for x in m) else
                   turn(call("pay", PAY, "c1"), call("lookup", {"key": "k"}, "c2"))),
        name="billing", checkpointer=sqlite_url, approvers=cfo_only)
    r = agent.generate("pay")
    final = agent.approve_tool_call_generate(run_id=r.run_id, decided_by="cfo")
    again = agent.generate("and again", thread_id=r.thread_id)
    assert [type(m).__name__ for m in final.messages] == [
        "HumanMessage", "AIMessage", "ToolMessage", "ToolMessage", "AIMessage"]
    assert not any("superseded" in str(m.content) for m in again.messages)
    assert ran.names().count("pay") == 1


def test_raw_input_supersedes_a_subagents_suspended_tool_and_loses_nothing() -> None:
    """By design, plain graph input does not resume a subagent's suspended tool; it
    supersedes it. The subagent paused inside the supervisor's delegation task, and LangGraph
    continues a subgraph where it paused only when that task is resumed (`Command(resume=...)`,
    which the Agent API sends for a message on the thread: test_supervisor's
    `test_auto_resume_reaches_a_suspended_tool_in_a_subagent`); new input starts a new step, in
    which that task no longer exists. So the message is the supervisor's: the suspension is
    declined as superseded (nothing stays decidable that no run waits on), the tool never runs
    with the message's data, the message reaches the conversation after the delegation's
    answer, and the thread goes on."""
    from tests.test_supervisor import forecaster_supervisor

    log: list[str] = []
    sup = forecaster_supervisor(log, auto_resume_suspended_tools=True)
    first = sup.generate("What's the weather like?")
    (asked,) = first.pending_approvals
    out = _raw_input(sup, first.thread_id, "Paris")
    assert log == ["started"], log
    row = sup._storage.ledger.approval(asked.id)
    assert row is not None and row.status == "rejected"
    assert not [w for w in sup._storage.ledger.waiting_rows(thread_id=first.thread_id)
                if w.waiting]
    kinds = [type(m).__name__ for m in out["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
    assert "stopped by a new user message" in out["messages"][2].text
    assert out["messages"][3].text == "Paris"
    again = sup.generate("and now?", thread_id=first.thread_id)
    assert again.finish_reason in ("stop", "suspended")
