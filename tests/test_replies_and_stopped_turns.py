"""Attacks, kept as regression tests, on auto-resume from graph input, as reworked after round 11
(4a4d488, `graphkit/_reply.py`).

The door attacked: the model node takes a resume decision in the ledger (and declines the
rest as superseded) when the ledger says that no call of the paused turn was claimed or ran
and each waits on a pending record. "The calls of the paused turn" were read from the plan,
and "the reply" was every message after the turn's results. Six tests failed. Since then the
door opens only when the plan accounts for every unanswered call of the turn's AI message and
the reply is one user message and nothing else; and a stopped turn whose plan no longer
accounts for a call (any door, auto-resume or not) settles or fences every call of the agent
the ledger holds open in the thread, and tells the model the call's outcome is unknown. A run
continued without input no longer reads the reply a stopped run left as the continuing
sender's: only what the running invocation's own input brought is a reply.

Each test asserts the promised behaviour: a test that FAILS is an attack that got through;
the tests whose names start with `test_held_` document attacks that did not.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
)
from langgraph.types import Command

from graphkit import Agent
from graphkit._owner import new_owner
from graphkit.errors import GraphkitError
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, config, plan_of, turn
from tests.test_replies import (
    MALLORY,
    USER,
    _approved_pay_stopped_before_tools,
    _pay_and_weather,
    _said,
    _state,
    _told,
)
from tests.test_replies_in_the_ledger import _any_city, _weather_replies
from tests.test_suspension import say, waiting_kinds, weather_agent, weather_tool


def _drop_pay_from_plan(agent: Agent, thread_id: str) -> None:
    """A client removes the payment's entry from the plan (client-writable state): the door
    then sees only the suspended weather call, which the ledger says waits on a pending
    record."""
    plan = plan_of(agent, thread_id)
    plan["calls"] = [c for c in plan["calls"] if c["tool_name"] != "pay"]
    agent.graph.update_state(config(thread_id), {"turn": plan})


# ============================================================ the plan's list of calls


def test_a_call_dropped_from_the_plan_is_not_reported_not_run_then_paid(sqlite_url: str
                                                                        ) -> None:
    """Attack: the payment was approved and dispatched (the run stopped before the tools
    node ran it: ledger approved and cleared, not claimed); the weather call beside it is
    suspended. The door checks the ledger only for the calls the PLAN lists: a client drops
    the payment's entry from the plan and sends 'Paris' as graph input. The door is taken,
    the weather call resumes, and when the turn settles `stopped_turn` answers the payment
    (a call no longer planned) 'not run: superseded' without settling or fencing it in the
    ledger. A replay of the paused checkpoint (a server client) then pays."""
    agent, ledger, log = _pay_and_weather(sqlite_url)
    thread_id, _key, paused = _approved_pay_stopped_before_tools(agent)
    _drop_pay_from_plan(agent, thread_id)

    out = say(agent, thread_id, "Paris", user=USER)
    told = _told(out["messages"], "c1")
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)  # a server client runs from the old checkpoint
    assert not (ledger.ran and any("not run" in t for t in told)), (
        f"the model was told {told!r} about the payment, and it ran afterwards: {ledger.ran}"
        f" (weather: {log})")


def test_a_call_dropped_from_the_plan_is_not_hidden_while_in_flight(sqlite_url: str) -> None:
    """Attack: as above, with the approved payment running in a live process when the reply
    comes as graph input: the model must not be told it did not run (it pays a moment
    later)."""
    agent, _ledger, _log = _pay_and_weather(sqlite_url)
    thread_id, key, _paused = _approved_pay_stopped_before_tools(agent)
    store = agent._storage.ledger
    owner = new_owner()
    assert store.start(key, owner, holder_dead=lambda _o: False) == ("won", None)
    _drop_pay_from_plan(agent, thread_id)

    out = say(agent, thread_id, "Paris", user=USER)
    store.finish(key, owner, {"content": "paid 40 to ACME", "status": "success"})
    told = _told(out["messages"], "c1")
    assert told and not any("not run" in t for t in told), (
        f"the model was told {told!r} about a payment that was running (and paid)")


def test_a_call_dropped_from_the_plan_without_auto_resume_is_not_told_not_run_then_paid(
        sqlite_url: str) -> None:
    """Attack (the same root without the new door, auto-resume off): the approved payment's
    run stopped before the tools node; a client empties the plan's calls and sends a message
    as graph input. `stopped_turn` -> `supersede_unanswered` answers every call the plan does
    not list 'not run: superseded' with no ledger settle or fence (it finds calls by the
    plan only); a replay of the paused checkpoint pays."""
    from tests.helpers import Ledger

    ledger = Ledger()

    def replies(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("pay", {"amount": 40, "payee": {"name": "ACME"}}, "c1"))
        return "done"

    agent = Agent(name="billing", tools=ledger.tools, model=ScriptedChatModel(replies),
                  checkpointer=sqlite_url)
    first = agent.generate("pay ACME")
    cfg = config(first.thread_id)
    (interrupt,) = agent.graph.get_state(cfg).interrupts
    agent.graph.invoke(Command(resume={interrupt.id: {"decisions": [
        {"type": "approve", "tool_call_id": "c1"}]}}), cfg, interrupt_after=["approval_gate"])
    paused = agent.graph.get_state(cfg)
    assert paused.next == ("tools",)
    plan = plan_of(agent, first.thread_id)
    plan["calls"] = []
    agent.graph.update_state(cfg, {"turn": plan})
    out = say(agent, first.thread_id, "never mind")
    told = _told(out["messages"], "c1")
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused.config)
    assert not (ledger.ran and any("not run" in t for t in told)), (
        f"the model was told {told!r} about the payment, and it ran afterwards: {ledger.ran}")


# ============================================================ "from that input alone"


def _user_only_weather(log: list[str]) -> Agent:
    return Agent(name="wx", tools=[weather_tool(log)], auto_resume_suspended_tools=True,
                 approvers=lambda who, pending: who == "user",
                 model=ScriptedChatModel(_weather_replies, structured=_any_city))


@pytest.mark.parametrize("how", ["interrupt_before_model", "update_state"])
def test_a_refused_senders_words_left_in_messages_do_not_resume_as_the_users(how: str
                                                                            ) -> None:
    """Attack: only 'user' may answer the suspended weather tool. 'mallory' puts 'Tokyo' in
    the conversation without the model node running on it: her run stops before the model
    node (`interrupt_before=['model']`, as a server run can; or a cancelled run), or she
    writes it with `update_state`. The user then says 'yes, go ahead' as graph input. The
    door reads `messages[later:]` (every message after the turn's results), not the new
    input alone: the extractor is handed mallory's 'Tokyo' with the user's words, and the
    decision is taken in the USER's name."""
    log: list[str] = []
    agent = _user_only_weather(log)
    first = agent.generate("weather?")
    cfg = {"configurable": {"thread_id": first.thread_id, **MALLORY}}
    if how == "interrupt_before_model":
        agent.graph.invoke({"messages": [HumanMessage("Tokyo")]}, cfg,
                           interrupt_before=["model"])
    else:
        agent.graph.update_state(cfg, {"messages": [HumanMessage("Tokyo")]})
    assert log == ["started"]
    with contextlib.suppress(GraphkitError):
        say(agent, first.thread_id, "yes, go ahead", user=USER)
    assert "fetched Tokyo" not in log, (
        f"the tool resumed with the city a refused sender gave, in the user's name: {log}")


@pytest.mark.parametrize("continued_with", [None, {"messages": []}],
                         ids=["no_input", "input_without_a_message"])
@pytest.mark.parametrize("left_by", ["interrupt_before_model", "update_state"])
def test_a_reply_left_by_a_stopped_run_is_not_answered_by_whoever_continues_it(
        left_by: str, continued_with: Any) -> None:
    """'mallory' leaves 'Tokyo' in the thread (a run stopped before the model node, or a
    state write); 'user' then continues the thread without a message of their own: the reply
    is not the user's answer (the model node reads only what the running invocation's input
    brought: `graphkit._input`)."""
    log: list[str] = []
    agent = _user_only_weather(log)
    first = agent.generate("weather?")
    cfg = {"configurable": {"thread_id": first.thread_id, **MALLORY}}
    if left_by == "update_state":
        agent.graph.update_state(cfg, {"messages": [HumanMessage("Tokyo")]})
    else:
        agent.graph.invoke({"messages": [HumanMessage("Tokyo")]}, cfg,
                           interrupt_before=["model"])
    with contextlib.suppress(GraphkitError):
        agent.graph.invoke(continued_with,
                           {"configurable": {"thread_id": first.thread_id, **USER}})
    assert "fetched Tokyo" not in log, log



async def test_a_call_dropped_from_the_plan_async_is_not_hidden_while_in_flight(
        sqlite_url: str) -> None:
    """Attack: the dropped-call attack through `ainvoke` (the async model node offloads the
    same door)."""
    agent, _ledger, _log = _pay_and_weather(sqlite_url)
    # the setup is sync graphkit: off the test's event loop
    thread_id, key, _paused = await asyncio.to_thread(_approved_pay_stopped_before_tools, agent)
    store = agent._storage.ledger
    owner = new_owner()
    assert await asyncio.to_thread(store.start, key, owner, holder_dead=lambda _o: False) == (
        "won", None)
    await asyncio.to_thread(_drop_pay_from_plan, agent, thread_id)
    out = await agent.graph.ainvoke({"messages": [HumanMessage("Paris")]},
                                    {"configurable": {"thread_id": thread_id, **USER}})
    await asyncio.to_thread(store.finish, key, owner,
                            {"content": "paid 40 to ACME", "status": "success"})
    told = _told(out["messages"], "c1")
    assert told and not any("not run" in t for t in told), (
        f"the model was told {told!r} about a payment that was running (and paid)")


# ============================================================ held


def test_held_an_approvers_policy_that_raises_allows_nothing_through_the_door() -> None:
    """Attack: the approvers policy raises for the door's decision (a bug, a backend down):
    the reply as graph input from 'user' does not resume the tool; nothing is lost."""
    log: list[str] = []

    def policy(who: str | None, pending: Any) -> bool:
        raise RuntimeError("directory down")

    agent = weather_agent(log, auto_resume_suspended_tools=True, approvers=policy)
    first = agent.generate("weather?")
    with contextlib.suppress(GraphkitError):
        say(agent, first.thread_id, "Paris", user=USER)
    assert log == ["started"]
    assert waiting_kinds(agent, first.thread_id) == ["suspension"]
    values = _state(agent, first.thread_id)
    kept = [*_said(values["messages"]),
            *(str(m["data"]["content"])
              for _, m in agent._storage.ledger.queue_of(first.thread_id, agent.name))]
    assert "Paris" in kept


def test_held_anonymous_graph_input_with_a_policy_does_not_resume() -> None:
    """Attack: the agent has an approvers policy; plain graph input without an authenticated
    identity (and then as a refused reviewer) does not resume the tool; 'user' does, once."""
    log: list[str] = []
    agent = _user_only_weather(log)
    first = agent.generate("weather?")
    say(agent, first.thread_id, "Paris")
    say(agent, first.thread_id, "Paris", user=MALLORY)
    assert log == ["started"]
    say(agent, first.thread_id, "Paris", user=USER)
    assert log == ["started", "started", "fetched Paris"]


def test_held_a_plan_naming_an_earlier_ai_message_takes_no_decision() -> None:
    """Attack: a client points the plan at an AI message other than the last (it appends an
    AI message without tool calls after the suspended turn): the door refuses (an AI message
    follows the plan's turn), and the suspended call never resumes from the reply."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    agent.graph.update_state(config(first.thread_id), {"messages": [
        AIMessage("Which city?", id=f"ai-{uuid.uuid4()}")]})
    with contextlib.suppress(GraphkitError):
        say(agent, first.thread_id, "Paris", user=USER)
    assert [e for e in log if e.startswith("fetched")] in ([], ["fetched Paris"])
    assert log.count("fetched Paris") <= 1


def test_an_input_that_says_the_same_as_a_left_reply_does_not_make_it_the_senders() -> None:
    """'mallory' leaves 'Tokyo' (a run stopped before the model node); 'user' sends, as input,
    the thread's first message rewritten under its own id to say 'Tokyo' too: that input
    brought a message, but not the reply the model node would read, so it is not the user's
    answer."""
    log: list[str] = []
    agent = _user_only_weather(log)
    first = agent.generate("weather?")
    agent.graph.invoke({"messages": [HumanMessage("Tokyo")]},
                       {"configurable": {"thread_id": first.thread_id, **MALLORY}},
                       interrupt_before=["model"])
    opening = agent.graph.get_state(config(first.thread_id)).values["messages"][0]
    with contextlib.suppress(GraphkitError):
        agent.graph.invoke({"messages": [HumanMessage("Tokyo", id=opening.id)]},
                           {"configurable": {"thread_id": first.thread_id, **USER}})
    assert "fetched Tokyo" not in log, log


def test_what_an_input_brought_is_noted_by_digest_and_bounded() -> None:
    """The entry edge's note of each input (`graphkit._input`) keeps digests, not the text, and
    at most `_KEPT` inputs that no model node took: a server's many inputs, most of which
    never answer a suspension, cost a few bytes each."""
    from graphkit import _input

    log: list[str] = []
    agent = _user_only_weather(log)
    first = agent.generate("weather?")
    big = "x" * 200_000
    agent.graph.invoke({"messages": [HumanMessage(big)]},
                       {"configurable": {"thread_id": first.thread_id, **MALLORY}},
                       interrupt_before=["model"])
    noted = [entry for entries in _input._noted.values() for entry in entries]
    assert noted and all(len(digest) == 64 for _, _, digest in noted)
    assert not any(big in str(entry) for entry in noted)
    assert len(_input._noted) <= _input._KEPT
