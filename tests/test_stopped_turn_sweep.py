"""Attacks, kept as regression tests, on the sweep of a stopped turn whose plan no longer accounts
for a call (`supersede_unanswered`, `Ledger.open_calls`), forged-suspension dropping
(`_Pass._drop_forged_suspension`), and the inbox card's messages (the ledger's thread).

Eleven attacks got through on the reviewed commit (43c4217), all fixed since:
- a plan entry's `key` was trusted: a rewritten or duplicated entry let a payment dispatched
  before the stop be reported "not run" and then paid on a replay (or hid one in flight). Plan
  entries now count only when the ledger knows their key as this thread's and agent's call of
  that tool, each key and tool_call_id once; anything else sends the turn through the sweep;
- a delegation dropped from the plan left its subagent's approval pending, and it ran on a
  replay once approved; and, with no forgery at all, a subagent's call a reviewer approved in
  the inbox ran on a replay after a new message had stopped the delegation. The sweep now
  declines what waits below the agent, and a delegation the ledger settled answers a replay
  with its recorded answer without running its subagents again;
- a declined suspension revived by a rewritten id ran the declined call again: a suspension
  record is dropped only when the ledger never saw the call suspend;
- a card picked the agent (so the conversation) from the index entry: it uses the ledger's.

Each test asserts the promised behaviour: a test that FAILS is an attack that got through;
the tests whose names start with `test_held_` document attacks that did not.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.types import Command

from graphkit import Agent, Inbox
from graphkit._owner import new_owner
from graphkit.errors import GraphkitError
from graphkit.testing import ScriptedChatModel
from tests.helpers import PAY, Ledger, call, config, plan_of, turn
from tests.test_replies import (
    USER,
    _approved_pay_stopped_before_tools,
    _pay_and_weather,
    _told,
)
from tests.test_supervisor import FIND, Users, supervisor
from tests.test_suspension import say, waiting_kinds, weather_agent


def _billing(url: str) -> tuple[Agent, Ledger]:
    ledger = Ledger()

    def replies(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("pay", PAY, "c1"))
        return "done"

    return Agent(name="billing", tools=ledger.tools, model=ScriptedChatModel(replies),
                 checkpointer=url), ledger


def _approved_and_dispatched(agent: Agent) -> tuple[str, Any]:
    """Pay approved by a raw Command; the run stopped after the gate dispatched it (the ledger
    says approved and cleared, not claimed)."""
    first = agent.generate("pay ACME")
    cfg = config(first.thread_id)
    (interrupt,) = agent.graph.get_state(cfg).interrupts
    agent.graph.invoke(Command(resume={interrupt.id: {"decisions": [
        {"type": "approve", "tool_call_id": "c1"}]}}), cfg, interrupt_after=["approval_gate"])
    paused = agent.graph.get_state(cfg)
    assert paused.next == ("tools",)
    return first.thread_id, paused.config


# ============================================================ the plan's keys (not its ids)


def test_a_plan_entry_with_a_rewritten_key_is_not_told_not_run_then_paid(sqlite_url: str
                                                                         ) -> None:
    """Attack: round 12's fix sweeps the ledger only when the plan does not ACCOUNT for an
    unanswered call id. A client keeps the payment's entry (so every id is accounted for) but
    rewrites its `key` to a fresh string: `supersede_unanswered` settles and fences the bogus
    key (nothing), reads no outcome for it, and answers the approved, dispatched payment
    'not run: superseded'. The real key stays approved and cleared; a replay of the paused
    checkpoint (a server client) pays."""
    agent, ledger = _billing(sqlite_url)
    thread_id, paused = _approved_and_dispatched(agent)
    plan = plan_of(agent, thread_id)
    plan["calls"][0]["key"] = f"call_{uuid.uuid4().hex[:20]}"
    agent.graph.update_state(config(thread_id), {"turn": plan})

    out = say(agent, thread_id, "never mind")
    told = _told(out["messages"], "c1")
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)
    assert not (ledger.ran and any("not run" in t for t in told)), (
        f"the model was told {told!r} about the payment, and it ran afterwards: {ledger.ran}")


def test_a_duplicated_plan_entry_is_not_told_not_run_then_paid(sqlite_url: str) -> None:
    """Attack: as above, but the client leaves the real entry in place and appends a copy for
    the same tool_call_id under a bogus key: `planned` is a dict by tool_call_id, the copy
    wins, the real key is neither settled nor fenced nor swept."""
    agent, ledger = _billing(sqlite_url)
    thread_id, paused = _approved_and_dispatched(agent)
    plan = plan_of(agent, thread_id)
    twin = copy.deepcopy(plan["calls"][0])
    twin["key"] = f"call_{uuid.uuid4().hex[:20]}"
    plan["calls"].append(twin)
    agent.graph.update_state(config(thread_id), {"turn": plan})

    out = say(agent, thread_id, "never mind")
    told = _told(out["messages"], "c1")
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)
    assert not (ledger.ran and any("not run" in t for t in told)), (
        f"the model was told {told!r} about the payment, and it ran afterwards: {ledger.ran}")


def test_a_rewritten_key_does_not_hide_a_payment_in_flight(sqlite_url: str) -> None:
    """Attack: the rewritten-key plan while the approved payment runs in a live process: the
    model must not be told it did not run (it pays a moment later)."""
    agent, _ledger = _billing(sqlite_url)
    thread_id, _paused = _approved_and_dispatched(agent)
    plan = plan_of(agent, thread_id)
    key = plan["calls"][0]["key"]
    store = agent._storage.ledger
    owner = new_owner()
    assert store.start(key, owner, holder_dead=lambda _o: False) == ("won", None)
    plan["calls"][0]["key"] = f"call_{uuid.uuid4().hex[:20]}"
    agent.graph.update_state(config(thread_id), {"turn": plan})

    out = say(agent, thread_id, "never mind")
    store.finish(key, owner, {"content": "paid 40 to ACME", "status": "success"})
    told = _told(out["messages"], "c1")
    assert told and not any("not run" in t for t in told), (
        f"the model was told {told!r} about a payment that was running (and paid)")


def test_a_rewritten_key_through_the_auto_resume_door_is_not_told_not_run_then_paid(
        sqlite_url: str) -> None:
    """Attack: round 12's first attack with the key rewritten instead of the entry dropped:
    the door now refuses (the ledger has no row for the bogus key), so `stopped_turn` runs;
    it answers the payment from the bogus key. A replay pays."""
    agent, ledger, _log = _pay_and_weather(sqlite_url)
    thread_id, _key, paused = _approved_pay_stopped_before_tools(agent)
    plan = plan_of(agent, thread_id)
    for entry in plan["calls"]:
        if entry["tool_name"] == "pay":
            entry["key"] = f"call_{uuid.uuid4().hex[:20]}"
    agent.graph.update_state(config(thread_id), {"turn": plan})

    out = say(agent, thread_id, "Paris", user=USER)
    told = _told(out["messages"], "c1")
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)
    assert not (ledger.ran and any("not run" in t for t in told)), (
        f"the model was told {told!r} about the payment, and it ran afterwards: {ledger.ran}")


# ============================================================ supervisors


def _drop_delegation(sup: Agent, thread_id: str) -> None:
    plan = plan_of(sup, thread_id)
    plan["calls"] = [c for c in plan["calls"] if c["tool_name"] != "data_agent"]
    sup.graph.update_state(config(thread_id), {"turn": plan})


def test_a_delegation_dropped_from_the_plan_leaves_no_subagent_approval_pending(
        sqlite_url: str) -> None:
    """Attack: the supervisor waits on its subagent's find-user approval. A client drops the
    delegation's entry from the supervisor's plan and sends 'never mind' as graph input. The
    sweep settles the supervisor's own open calls (`open_calls` is one agent path), and
    `pending_below` runs only for delegations the PLAN lists: the subagent's approval stays
    pending in the ledger and the inbox after the user superseded it."""
    users = Users()
    sup = supervisor(users, [FIND[0], "Okay, dropping it."], checkpointer=sqlite_url)
    first = sup.generate("Find user with ID 12345")
    (pending,) = first.pending_approvals
    _drop_delegation(sup, first.thread_id)
    say(sup, first.thread_id, "never mind")
    row = sup._storage.ledger.approval(pending.id)
    assert row is not None and row.status != "pending", (
        "the subagent's approval is still pending after the user's new message superseded "
        f"the delegation: {[p.id for p in Inbox(sup._storage).pending()]}")


def test_a_delegation_dropped_from_the_plan_never_runs_the_subagents_call_later(
        sqlite_url: str) -> None:
    """Attack: as above; then a reviewer approves the stale subagent approval in the inbox and
    a server client replays the supervisor's paused checkpoint: the delegation node runs the
    subagent (it does not ask the ledger whether its delegation call was settled), whose gate
    applies the approval, and find-user runs after the supervisor's model was told the
    delegation was stopped."""
    users = Users()
    sup = supervisor(users, [FIND[0], "Okay, dropping it."], checkpointer=sqlite_url)
    first = sup.generate("Find user with ID 12345")
    (pending,) = first.pending_approvals
    paused = sup.graph.get_state(config(first.thread_id)).config
    _drop_delegation(sup, first.thread_id)
    say(sup, first.thread_id, "never mind")
    with contextlib.suppress(Exception):
        Inbox(sup._storage, agents=[sup]).approve(pending.id, decided_by="dpo")
    with contextlib.suppress(Exception):
        (interrupt,) = sup.graph.get_state(paused).interrupts
        sup.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
    with contextlib.suppress(Exception):
        sup.graph.invoke(None, paused)
    assert users.looked_up == [], (
        f"the subagent's lookup ran after the user superseded the delegation: {users.looked_up}")


# ============================================================ forged-suspension dropping


def _rewrite_suspension_id(agent: Agent, thread_id: str) -> None:
    """A server client rewrites the suspension record's id and lets the gate run
    (`Command(update=..., goto='approval_gate')`)."""
    plan = plan_of(agent, thread_id)
    for entry in plan["calls"]:
        if entry["suspension"] is not None:
            entry["suspension"]["id"] = f"sus_{uuid.uuid4().hex[:24]}"
    with contextlib.suppress(GraphkitError):
        agent.graph.invoke(Command(update={"turn": plan}, goto="approval_gate"),
                           config(thread_id))


def test_a_suspension_declined_in_the_inbox_is_not_revived_by_a_rewritten_id() -> None:
    """Attack: a reviewer declines the suspended weather call in the inbox (the ledger says
    rejected; the run has not resumed yet). A client rewrites the suspension record's id in
    the plan: the gate finds no row for it, `ensure` refuses (the ledger knows the call), and
    `_drop_forged_suspension` drops it because the ledger holds no PENDING suspension for the
    call (it holds a declined one). The call is then ready and runs again: the declined call
    runs, and asks again, and the reviewer's decline is never applied."""
    log: list[str] = []
    agent = weather_agent(log)
    first = agent.generate("weather?")
    (pending,) = first.pending_approvals
    Inbox(agent._storage, agents=[agent]).decline(pending.id, decided_by="ops")
    _rewrite_suspension_id(agent, first.thread_id)
    assert log == ["started"], f"the declined call ran again: {log}"
    # The record under the rewritten id is no decision's: the thread waits on it (the client
    # broke its own thread) until the next message supersedes it; the call never runs.
    agent.generate("never mind", thread_id=first.thread_id)
    assert log == ["started"], f"the declined call ran again: {log}"
    assert waiting_kinds(agent, first.thread_id) == []


def test_an_approved_call_whose_suspension_was_declined_does_not_run_again(sqlite_url: str
                                                                          ) -> None:
    """Attack: as above for a tool that needs approval and suspends once it runs (approved,
    ran, asked 'Where to?'); a reviewer declines the question; the client rewrites the
    suspension's id. The approved call (approved and cleared, released when it suspended)
    runs a second time."""
    from tests.test_replies import booking_agent

    seen: list[str | None] = []
    agent = booking_agent(seen, checkpointer=sqlite_url)
    first = agent.generate("book me a flight")
    agent.approve_tool_call_generate(run_id=first.run_id)
    assert seen == [None]
    (question,) = agent.pending_approvals(run_id=first.run_id)
    assert question.kind == "suspension"
    Inbox(agent._storage, agents=[agent]).decline(question.id, decided_by="ops")
    _rewrite_suspension_id(agent, first.thread_id)
    assert seen == [None], f"the approved call ran again after its question was declined: {seen}"


# ============================================================ the inbox card


def test_a_card_does_not_show_another_agents_conversation(tmp_path: Any) -> None:
    """Attack: an inbox over agent A's storage, given agents A and B (B keeps its own
    checkpoints), would show B's conversation of a thread of the same id if the card's agent
    came from anything a store writer can write (graphkit once kept an inbox index there)."""

    url_a = f"sqlite:///{tmp_path / 'a.db'}"
    url_b = f"sqlite:///{tmp_path / 'b.db'}"
    a, _ = _billing(url_a)
    b = Agent(name="hr", model=ScriptedChatModel(["ok"]), checkpointer=url_b)
    first = a.generate("pay ACME", thread_id="t-1")
    b.generate("the secret salary list is X", thread_id="t-1")
    (pending,) = first.pending_approvals
    a._storage.store.put(("graphkit", "approvals"), pending.id,
                         {**pending.to_dict(), "agent_path": ["hr"]})
    shown = Inbox(a._storage, agents=[a, b]).messages(pending.id)
    assert not any("salary" in str(m.content) for m in shown), (
        f"the card shows another agent's conversation: {[m.content for m in shown]}")


def test_held_a_card_shows_the_ledgers_thread_not_the_entrys(sqlite_url: str) -> None:
    """Attack: a store writer writes an entry pointing A's approval at thread 't-2' (another
    user's): the card still shows the thread the ledger recorded."""

    agent, _ = _billing(sqlite_url)
    first = agent.generate("pay ACME", thread_id="t-1")
    agent.generate("my password is hunter2", thread_id="t-2")
    (pending,) = first.pending_approvals
    agent._storage.store.put(("graphkit", "approvals"), pending.id,
                             {**pending.to_dict(), "thread_id": "t-2"})
    shown = Inbox(agent._storage, agents=[agent]).messages(pending.id)
    assert shown and not any("hunter2" in str(m.content) for m in shown)


# ============================================================ held: the sweep's scope


def test_held_the_sweep_does_not_touch_another_threads_call(sqlite_url: str) -> None:
    """Attack: the sweep settles 'every call of that agent the ledger holds open in the
    thread'; another thread of the same agent has an approved, dispatched payment. A stopped
    turn swept in thread 1 leaves thread 2's payment runnable, and its replay pays once."""
    agent, ledger = _billing(sqlite_url)
    t2, paused2 = _approved_and_dispatched(agent)
    t1, _ = _approved_and_dispatched(agent)
    plan = plan_of(agent, t1)
    plan["calls"] = []
    agent.graph.update_state(config(t1), {"turn": plan})
    say(agent, t1, "never mind")
    agent.graph.invoke(None, paused2)
    assert ledger.ran == [("pay", PAY)]
    assert t2 != t1


def test_held_the_sweep_does_not_settle_the_supervisors_subagent_calls_of_another_thread(
        sqlite_url: str) -> None:
    """Attack: a supervisor's stopped turn in thread 1 with its plan emptied; thread 2 of the
    same supervisor waits on a subagent approval: it stays pending."""
    users = Users()
    sup = supervisor(users, [FIND[0], "ok", FIND[0], "ok"], checkpointer=sqlite_url)
    other = sup.generate("Find user with ID 12345")
    first = sup.generate("Find user with ID 12345")
    plan = plan_of(sup, first.thread_id)
    plan["calls"] = []
    sup.graph.update_state(config(first.thread_id), {"turn": plan})
    say(sup, first.thread_id, "never mind")
    (pending,) = other.pending_approvals
    row = sup._storage.ledger.approval(pending.id)
    assert row is not None and row.status == "pending"




@pytest.mark.parametrize("door", ["graph input", "api"])
def test_a_subagent_call_approved_in_the_inbox_before_a_new_message_runs_first_once(
        sqlite_url: str, door: str) -> None:
    """Attack (no state forgery): the supervisor waits on its subagent's find-user approval; a
    reviewer approves it in the inbox (the ledger says approved; no gate applied it yet), then
    the user sends 'never mind'. The stopped turn settled the DELEGATION's call and left the
    subagent's approved call unsettled: the model was told the delegation 'will not go on',
    and a server client replaying the supervisor's paused checkpoint then ran the lookup.
    Then the doors disagreed: through the API the decision taken before the message ran
    first, as graph input the delegation was stopped (helper-91). It runs first, once,
    whichever door brought the message; the model is told what it found, and a replay of
    the paused checkpoint never runs it again."""
    users = Users()
    sup = supervisor(users, [FIND[0], "Okay, dropping it."], checkpointer=sqlite_url)
    first = sup.generate("Find user with ID 12345")
    (pending,) = first.pending_approvals
    paused = sup.graph.get_state(config(first.thread_id)).config
    Inbox(sup._storage, agents=[sup]).approve(pending.id, decided_by="dpo")
    if door == "api":
        messages = sup.generate("never mind", thread_id=first.thread_id).messages
    else:
        messages = say(sup, first.thread_id, "never mind")["messages"]
    said = [str(m.content) for m in messages]
    assert users.looked_up == ["12345"] and said[-2:] == ["never mind", "Okay, dropping it."]
    assert said[-3].startswith("Found:")
    with contextlib.suppress(Exception):
        (interrupt,) = sup.graph.get_state(paused).interrupts
        sup.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
    assert users.looked_up == ["12345"]


async def test_a_rewritten_key_async_is_not_told_not_run_then_paid(sqlite_url: str) -> None:
    """Attack: the rewritten-key attack through `ainvoke` (the async model node offloads the
    same `stopped_turn`)."""
    agent, ledger = _billing(sqlite_url)
    # the setup is sync graphkit: off the test's event loop
    thread_id, paused = await asyncio.to_thread(_approved_and_dispatched, agent)
    plan = await asyncio.to_thread(plan_of, agent, thread_id)
    plan["calls"][0]["key"] = f"call_{uuid.uuid4().hex[:20]}"
    await agent.graph.aupdate_state(config(thread_id), {"turn": plan})
    out = await agent.graph.ainvoke({"messages": [HumanMessage("never mind")]},
                                    config(thread_id))
    told = _told(out["messages"], "c1")
    with contextlib.suppress(Exception):
        await agent.graph.ainvoke(None, paused)
    assert not (ledger.ran and any("not run" in t for t in told)), (
        f"the model was told {told!r} about the payment, and it ran afterwards: {ledger.ran}")


def test_held_a_top_level_call_approved_in_the_inbox_runs_once_and_is_told_after_a_new_message(
        sqlite_url: str) -> None:
    """Attack: the top-level analogue of the supervisor attack: pay approved in the inbox, then
    a new message as graph input, then a replay of the paused checkpoint. The approval stands,
    as it does when the message comes through the Agent API (docs/tools.md): pay runs once, in
    the message's run, the model is told its result (never "not run"), and the replay pays
    nothing more."""
    agent, ledger = _billing(sqlite_url)
    first = agent.generate("pay ACME")
    (pending,) = first.pending_approvals
    paused = agent.graph.get_state(config(first.thread_id)).config
    Inbox(agent._storage, agents=[agent]).approve(pending.id, decided_by="cfo")
    out = say(agent, first.thread_id, "never mind")
    assert len(ledger.ran) == 1
    told = _told(out["messages"], pending.tool_call_id)
    assert len(told) == 1 and "not run" not in told[0]
    with contextlib.suppress(Exception):
        (interrupt,) = agent.graph.get_state(paused).interrupts
        agent.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
    assert len(ledger.ran) == 1


def test_what_the_sweep_declines_below_a_delegation_is_audited_with_its_tool_call_id(
        sqlite_url: str) -> None:
    """A new message given as graph input stops a delegation whose subagents wait: the sweep
    declined their approvals from the approval's row alone, and audited the decline with no
    tool_call_id, so an auditor could not tie it to the model's call it declined."""
    from langchain_core.messages import HumanMessage

    from tests.test_subagent_waits import _chain

    sup = _chain(sqlite_url, [])
    first = sup.generate("pay 1")
    (asked,) = first.pending_approvals
    sup.graph.invoke({"messages": [HumanMessage("never mind, pay 2")]}, config(first.thread_id))
    declined = [e for e in sup._storage.ledger.read_audit(thread_id=first.thread_id)
                if e["event"] == "superseded"]
    assert declined and all(e["approval_id"] == asked.id for e in declined)
    assert [e["tool_call_id"] for e in declined] == [asked.tool_call_id] * len(declined)
