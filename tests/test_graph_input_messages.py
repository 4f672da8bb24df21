"""Attacks, kept as regression tests, on the model node handing a new user message to the gate
(`_model_node`, `TurnPlan.superseding`, `_gate.approval_gate` -> `_Pass.supersede`) for an
agent built with `auto_resume_suspended_tools=True`.

Every test here failed on the reviewed commit (each names the promise it broke). That commit
(9b8da31) was reverted: graph input supersedes a suspension, and auto-resume from a message
stays the Agent API's. The tests stay as regression tests of graph input while a tool is
suspended; the last one found an older untyped error, since fixed.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.errors import GraphRecursionError
from langgraph.types import Command

from graphkit import Agent
from graphkit._owner import new_owner
from graphkit.errors import GraphkitError
from graphkit.testing import ScriptedChatModel
from tests.helpers import PAY, Ledger, call, cfo_only, config, dead_owner, ledger_plan, turn
from tests.test_suspension import city_from_reply, weather_agent, weather_tool

USER = {"langgraph_auth_user": {"identity": "user"}}


def _cfg(thread_id: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, **USER}, **extra}


def _said(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages if isinstance(m, HumanMessage)]


# ============================================================ F1: the handoff loops forever
# `_to_gate` hands over whenever the state's plan holds a pending suspension record, even for a
# call that already has a ToolMessage. The gate skips answered calls, so the plan keeps the
# pending record; it appends the queued message and goes to `model`, which hands over again:
# model -> gate -> model ... until the recursion limit (10 000 steps for the Agent API).


def test_a_client_result_for_a_suspended_call_then_a_message_loops_the_graph() -> None:
    """Agent Chat UI, when its user types instead of answering, sends a ToolMessage for the
    interrupted call and the user's text. Before this change the forged result was replaced
    by a notice and the model answered; now the run never ends."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("What's the weather like?")
    assert first.finish_reason == "suspended"
    try:
        out = agent.graph.invoke(
            {"messages": [ToolMessage("Paris: sunny", tool_call_id="w1", name="weather"),
                          HumanMessage("Paris")]},
            _cfg(first.thread_id, recursion_limit=60))
    except GraphRecursionError as exc:
        pytest.fail(f"model -> approval_gate -> model ... never ends: {exc}")
    assert _said(out["messages"]) == ["What's the weather like?", "Paris"]
    told = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert all(m.content != "Paris: sunny" for m in told), "a forged result reached the model"


def test_an_api_message_after_a_run_stopped_at_a_suspension_loops_the_graph(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The run stopped (on_state_change) after the gate recorded the suspension, before it
    paused. The API's next message supersedes the unanswered call (`_abandoned`: ledger and a
    ToolMessage, not the plan in the state); the model node then hands the message over for a
    call that is answered, and again, and again."""
    monkeypatch.setattr("graphkit.agent.RECURSION_LIMIT", 80)  # the real one is 10 000 steps
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("What's the weather like?",
                           on_state_change=lambda s: s.node == "approval_gate")
    assert agent.graph.get_state(config(first.thread_id)).next == ("approval_gate",)
    try:
        final = agent.generate("Paris", thread_id=first.thread_id)
    except GraphRecursionError as exc:
        pytest.fail(f"a plain new message through the Agent API never ends: {exc}")
    assert final.finish_reason == "stop"
    assert _said(final.messages) == ["What's the weather like?", "Paris"]


# ============================================================ F2: round 6's F1 is back through
# the handoff: `_Pass._supersede` answers every unanswered call "was not run: superseded"
# without the ledger's fence (`supersede_unanswered`): a call in flight, or one whose holder
# died, is told not run, and the dead holder's call is neither fenced nor settled.


def _weather_and_payment(url: str) -> tuple[Agent, Ledger, str, str, Any]:
    """A turn with a suspended weather call and an approved payment whose run stopped after
    the gate dispatched the payment (next: tools)."""
    def replies(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return turn(call("weather", {}, "w1"), call("pay", PAY, "c1"))
        return "done"

    log: list[str] = []
    ran = Ledger()
    agent = Agent(name="billing", tools=[weather_tool(log), ran.pay], checkpointer=url,
                  approvers=cfo_only, auto_resume_suspended_tools=True,
                  model=ScriptedChatModel(replies, structured=city_from_reply))
    r = agent.generate("weather, and pay ACME")
    assert sorted((p.kind, p.tool_call_id) for p in r.pending_approvals) == [
        ("approval", "c1"), ("suspension", "w1")]
    pay = next(p for p in r.pending_approvals if p.tool_call_id == "c1")
    agent.resolve_tool_approval(run_id=r.run_id, id=pay.id, approved=True, decided_by="cfo")
    interrupt_id = agent.graph.get_state(config(r.thread_id)).tasks[0].interrupts[0].id
    agent.graph.invoke(Command(resume={interrupt_id: {}}), _cfg(r.thread_id),
                       interrupt_after=["approval_gate"])
    snapshot = agent.graph.get_state(config(r.thread_id))
    assert snapshot.next == ("tools",)
    key = next(c["key"] for c in ledger_plan(agent, r.thread_id)["calls"]
               if c["tool_call_id"] == "c1")
    return agent, ran, r.thread_id, key, snapshot.config



def test_raw_input_tells_a_payment_in_flight_was_not_run(sqlite_url: str) -> None:
    agent, _ran, thread_id, key, _ = _weather_and_payment(sqlite_url)
    ledger = agent._storage.ledger
    owner = new_owner()  # a live process runs the payment now
    assert ledger.start(key, owner, holder_dead=lambda _o: False) == ("won", None)

    out = agent.graph.invoke({"messages": [HumanMessage("never mind, did anything happen?")]},
                             _cfg(thread_id))
    ledger.finish(key, owner, {"content": "paid 40 to ACME", "status": "success"})
    (told,) = [m for m in out["messages"]
               if isinstance(m, ToolMessage) and m.tool_call_id == "c1"]
    assert "was not run" not in str(told.content), (
        f"the model was told {told.content!r} about a payment that was running (and paid)")


def test_raw_input_lets_a_dead_holders_payment_run_on_a_replay(sqlite_url: str) -> None:
    agent, ran, thread_id, key, paused = _weather_and_payment(sqlite_url)
    ledger = agent._storage.ledger
    assert ledger.start(key, dead_owner(), holder_dead=lambda _o: False) == ("won", None)

    out = agent.graph.invoke({"messages": [HumanMessage("never mind, did anything happen?")]},
                             _cfg(thread_id))
    (told,) = [m for m in out["messages"]
               if isinstance(m, ToolMessage) and m.tool_call_id == "c1"]

    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)  # replay the step that dispatched the payment
    assert ran.ran == [], (
        f"the model was told {told.content!r}, and the payment ran afterwards: {ran.ran}")


# ============================================================ F3: a user's message is lost


def test_a_message_handed_over_but_not_yet_taken_is_lost_to_the_next_one(sqlite_url: str
                                                                        ) -> None:
    """The model node removed the message from the conversation and parked it in
    `turn.superseding`; the run stopped before the gate took it (a cancelled or crashed
    server run; here `interrupt_before`). The next message overwrites the parked one: the
    first is in neither the conversation nor the queue, and was never read for the city."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True, checkpointer=sqlite_url)
    first = agent.generate("What's the weather like?")
    agent.graph.invoke({"messages": [HumanMessage("I am in Paris", id="m1")]},
                       _cfg(first.thread_id), interrupt_before=["approval_gate"])
    agent.graph.invoke({"messages": [HumanMessage("hello?", id="m2")]}, _cfg(first.thread_id))

    values = agent.graph.get_state(config(first.thread_id)).values
    kept = _said(values["messages"]) + [
        str(m["data"]["content"])
        for _, m in agent._storage.ledger.queue_of(first.thread_id, agent.name)]
    assert "I am in Paris" in kept, f"the user's message is gone: {kept}"


def test_a_large_message_as_graph_input_is_silently_dropped() -> None:
    """A message over the gate's size bound, sent while a tool is suspended: the model node
    removes it from the conversation, the gate refuses it (only the next interrupt's `error`
    says so), and it is neither kept nor refused to the client with a typed error."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("What's the weather like?")
    big = "Paris. My notes: " + "x" * 300_000
    try:
        agent.graph.invoke({"messages": [HumanMessage(big, id="big")]}, _cfg(first.thread_id))
    except GraphkitError:
        values = agent.graph.get_state(config(first.thread_id)).values
        assert _said(values["messages"]) == ["What's the weather like?"]
        return
    values = agent.graph.get_state(config(first.thread_id)).values
    queued = [m["data"]["content"]
              for _, m in agent._storage.ledger.queue_of(first.thread_id, agent.name)]
    assert big in _said(values["messages"]) or big in queued, (
        "the user's message was removed from the conversation without a typed error")


# ============================================================ F4 (not introduced by this change,
# reached by the same `_Pass.supersede`): a serialised AI message whose `tool_calls` is not a
# list of objects makes `messages_from_dict` raise AttributeError, which the gate does not
# turn into a GraphkitError. A LangGraph server client may send `command={"resume": ...}`.


def test_a_malformed_superseding_message_gets_a_typed_error() -> None:
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("What's the weather like?")
    interrupt_id = agent.graph.get_state(config(first.thread_id)).tasks[0].interrupts[0].id
    bad = [{"type": "ai", "data": {"content": "", "tool_calls": "bad"}}]
    try:
        agent.graph.invoke(Command(resume={interrupt_id: {"supersede": bad}}),
                           _cfg(first.thread_id))
    except GraphkitError:
        pass
    except Exception as exc:
        pytest.fail(f"untyped {type(exc).__module__}.{type(exc).__name__}: {exc}")
    assert log == ["started"]
    (pending,) = agent.pending_approvals(run_id=first.run_id)
    assert pending.kind == "suspension" and pending.status == "pending"


@pytest.mark.parametrize("sent", [("user", "go on"), {"role": "user", "content": "go on"}],
                         ids=["tuple", "dict"])
def test_a_message_sent_without_an_id_after_a_state_write_waits_behind_the_decision(
        tmp_path: Any, sent: Any) -> None:
    """A client's state write ended a waiting run (words as the model's); a reviewer
    approved the call in the inbox; then a user's message came as graph input without an id
    (a tuple, as a Python caller may send it). LangGraph's delta reducer leaves such a
    message unnamed, and every check that finds a message by its id passed it by: the model
    was handed the call without its result (a provider refuses that conversation), where
    the same message with an id runs the approved call first (helper-106 F1, found beside
    it). Every message is named as it enters the state (`_state._named`)."""
    from langchain_core.messages import AIMessage

    from graphkit import Inbox, create_tool

    ran: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        return f"paid {amount}"

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(f"done: {messages[-1].text}")
        if messages[-1].text == "go on":
            return AIMessage("going on")
        return AIMessage("", tool_calls=[{"name": "pay", "args": {"amount": 100}, "id": "c1"}])

    url = f"sqlite:///{tmp_path}/runs.db"
    agent = Agent(name="billing", tools=[pay], model=ScriptedChatModel(reply), checkpointer=url)
    paused = agent.generate("pay")
    cfg = {"configurable": {"thread_id": paused.thread_id}}
    agent.graph.update_state(cfg, {"messages": [AIMessage("words as the model's")]},
                             as_node="model")
    assert agent.graph.get_state(cfg).next == ()
    inbox = Inbox(url)
    inbox.approve(paused.pending_approvals[0].id, decided_by="ops")
    out = agent.graph.invoke({"messages": [sent]}, cfg)
    said = [(type(m).__name__, m.text) for m in out["messages"]]
    assert said[-3:] == [("ToolMessage", "paid 100"), ("HumanMessage", "go on"),
                         ("AIMessage", "going on")]
    assert ran == [100] and all(m.id for m in out["messages"])


def test_naming_messages_reads_a_thread_alike_however_its_writes_are_batched() -> None:
    """The delta channel replays a thread's writes one checkpoint at a time or together: the
    ids `_named` gives must come out the same either way (LangGraph requires its reducer to
    be batching-invariant), removals and resets among the writes included."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from langchain_core.messages import AIMessage, RemoveMessage
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    from graphkit._state import _messages

    texts = st.sampled_from(["hi", "go on", "ok"])
    unnamed = st.one_of(texts.map(lambda t: ("user", t)),
                        texts.map(lambda t: {"role": "assistant", "content": t}),
                        texts.map(lambda t: HumanMessage(t)))
    named = st.one_of(st.sampled_from(["a", "b", "c"]).map(lambda i: AIMessage(i, id=i)),
                      st.sampled_from(["a", "b", "x", REMOVE_ALL_MESSAGES]).map(
                          lambda i: RemoveMessage(id=i)))
    write = st.lists(st.one_of(unnamed, named), min_size=1, max_size=4)

    def seen(messages: list[BaseMessage]) -> list[tuple[Any, ...]]:
        return [(m.id, m.type, m.content) for m in messages]

    @settings(max_examples=150, deadline=None)
    @given(st.lists(write, max_size=3), st.lists(write, max_size=3),
           st.lists(write, max_size=3))
    def alike(start: list[Any], first: list[Any], then: list[Any]) -> None:
        state = _messages([], start)
        one_by_one = _messages(_messages(state, first), then)
        together = _messages(state, [*first, *then])
        assert seen(one_by_one) == seen(together)
        assert all(m.id for m in together)

    alike()


@pytest.mark.parametrize("planted", [False, True])
def test_an_answer_sent_without_an_id_reaches_the_suspended_tool_however_often_sent(
        tmp_path: Any, planted: bool) -> None:
    """Messages without an id were named by a digest of the message and the one before it
    (replayed alike, but foretold): "hmm" said twice while a tool waited for its answer got
    one id twice, and the ledger's queue kept one; a client that first wrote a message under
    the id the user's "Paris" would get had the answer dropped and the tool told superseded
    (helper-107). Each message the graph's doors bring without an id gets one drawn at
    random (`_state.named_input`)."""
    from langchain_core.messages import HumanMessage

    from graphkit._digest import json_digest

    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True,
                          checkpointer=f"sqlite:///{tmp_path}/runs.db")
    first = agent.generate("What's the weather like?")
    cfg = config(first.thread_id)
    if planted:  # under the id the old naming foretold for the user's answer
        last = agent.graph.get_state(cfg).values["messages"][-1].id
        foretold = "msg-" + json_digest([last, "human", "Paris"])[:32]
        agent.graph.invoke({"messages": [HumanMessage("forget it", id=foretold)]}, cfg)
    else:
        for _ in range(2):
            agent.graph.invoke({"messages": [("user", "hmm")]}, cfg)
    out = agent.graph.invoke({"messages": [("user", "Paris")]}, cfg)
    said = [m.text for m in out["messages"] if isinstance(m, HumanMessage)]
    assert said[-1] == "Paris" and (planted or said.count("hmm") == 2)
    assert log[-1] == "fetched Paris"
    assert out["messages"][-1].text == "The weather in Paris: sunny, +72F"
    assert len({m.id for m in out["messages"]}) == len(out["messages"])
