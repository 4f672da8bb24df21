"""Replays of delegations: a replay of a supervisor's turn (a crash, time travel, a copied
thread) never runs a subagent's call twice, and a settled delegation answers it with its
recorded outcome, never "was not run" for one whose subagents did part of their work (the
sweep records the outcome unknown, `_gate.SWEPT`).

What waits beneath a delegation when a client writes above it or a new message comes is in
`tests/test_subagent_waits.py`. The tests whose names start with `test_held_` are flows
that attacks tried and that held.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import Command

from graphkit import Agent, Inbox, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import PAY, call, config, copy_thread, ledger_plan, plan_of, turn
from tests.test_replies import _told
from tests.test_stopped_turn_sweep import _approved_and_dispatched, _billing
from tests.test_supervisor import Users
from tests.test_suspension import say

# ============================================================ fixtures


def _sup_reply(tasks: list[tuple[str, str, str]]) -> Any:
    """A supervisor model (replay-safe): the delegations first, then a summary of answers."""

    def reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(*[call(k, {"task": t}, i) for k, t, i in tasks])
        results = [m for m in messages if isinstance(m, ToolMessage)]
        return "summary: " + " | ".join(str(m.content) for m in results)

    return reply


def _sup(users: Users, url: str | None, tasks: list[tuple[str, str, str]] | None = None
         ) -> Agent:
    tasks = tasks or [("data_agent", "find user 12345", "d1")]
    kwargs = {"checkpointer": url} if url else {}
    return Agent(name="supervisor", model=ScriptedChatModel(_sup_reply(tasks)),
                 agents={"data_agent": users.data_agent()}, **kwargs)


def _history(agent: Agent, thread_id: str) -> list[Any]:
    return list(agent.graph.get_state_history(config(thread_id)))


def _before_delegation(agent: Agent, thread_id: str) -> Any:
    """The oldest checkpoint whose next step dispatches the delegation (Studio time travel)."""
    snaps = [s for s in _history(agent, thread_id)
             if s.next and any(n in ("approval_gate", "data_agent") for n in s.next)]
    return snaps[-1].config


# ============================================================ legitimate flows


def test_held_replay_before_the_delegation_ran_does_not_run_the_subagent_call_twice(
        sqlite_url: str) -> None:
    """Legit flow (Studio time travel): the subagent's find-user was approved and ran; the user
    replays the supervisor from the checkpoint before the delegation first ran. The settled
    delegation answers with its recorded result; find-user runs exactly once."""
    users = Users()
    sup = _sup(users, sqlite_url)
    first = sup.generate("Find user with ID 12345")
    final = sup.approve_tool_call_generate(run_id=first.run_id)
    assert users.looked_up == ["12345"] and "Found" in final.text
    out = sup.graph.invoke(None, _before_delegation(sup, first.thread_id))
    assert users.looked_up == ["12345"], f"the approved lookup ran twice: {users.looked_up}"
    told = _told(out["messages"], "d1")
    assert told and "Found" in told[-1], f"the replay was told {told!r}"


async def test_held_async_sqlite_pause_approve_resume_and_replay(sqlite_url: str) -> None:
    """Legit flow: async, SQLite: pause in the subagent, approve, resume; then an async replay
    from before the delegation: one lookup, the answer reaches the supervisor."""
    users = Users()
    sup = _sup(users, sqlite_url)
    first = await sup.agenerate("Find user with ID 12345")
    assert [p.tool_call_id for p in first.pending_approvals] == ["fu-12345"]
    final = await sup.aapprove_tool_call_generate(run_id=first.run_id)
    assert users.looked_up == ["12345"] and "Found" in final.text
    out = await sup.graph.ainvoke(None, _before_delegation(sup, first.thread_id))
    assert users.looked_up == ["12345"]
    assert "Found" in _told(out["messages"], "d1")[-1]


def test_held_two_delegations_one_answered_one_paused_then_decided_and_replayed(
        sqlite_url: str) -> None:
    """Legit flow: two delegations in one turn; fu-2 approved (d2 answers), d1 still paused;
    then fu-1 declined. Each decision is applied once; a replay of the turn's first
    checkpoint answers both from the ledger and looks nobody up again."""
    users = Users()
    sup = _sup(users, sqlite_url, [("data_agent", "find user 1", "d1"),
                                   ("data_agent", "find user 2", "d2")])
    first = sup.generate("find 1 and 2")
    assert sorted(p.tool_call_id for p in first.pending_approvals) == ["fu-1", "fu-2"]
    second = sup.approve_tool_call_generate(run_id=first.run_id, tool_call_id="fu-2")
    assert users.looked_up == ["2"] and second.finish_reason == "suspended"
    final = sup.decline_tool_call_generate(run_id=first.run_id, tool_call_id="fu-1")
    assert users.looked_up == ["2"]
    answers = {m.tool_call_id: m.text for m in final.messages if isinstance(m, ToolMessage)}
    assert "Found" in answers["d2"] and "declined" in answers["d1"]
    out = sup.graph.invoke(None, _before_delegation(sup, first.thread_id))
    assert users.looked_up == ["2"], f"a replay looked users up again: {users.looked_up}"
    replayed = {m.tool_call_id: m.text for m in out["messages"] if isinstance(m, ToolMessage)}
    assert "Found" in replayed["d2"] and "declined" in replayed["d1"]


def test_held_nested_supervisors_on_sqlite_resume_and_replay(sqlite_url: str) -> None:
    """Legit flow: supervisor -> team (A) -> data_agent on SQLite: the approval surfaces at the
    top, the decision reaches the tool once, and a time-travel replay runs nothing again."""
    users = Users()
    b = users.data_agent()
    a = Agent(name="A", description="Coordinates record work", model=ScriptedChatModel(
        lambda ms: turn(call("records", {"task": "find user 42"}, "a1"))
        if not any(isinstance(m, ToolMessage) for m in ms)
        else f"A relays: {[m for m in ms if isinstance(m, ToolMessage)][-1].text}"),
        agents={"records": b})
    sup = Agent(name="supervisor", model=ScriptedChatModel(
        _sup_reply([("team", "get user 42", "s1")])), agents={"team": a},
        checkpointer=sqlite_url)
    first = sup.generate("user 42 please")
    (pending,) = first.pending_approvals
    assert pending.agent_path == ["supervisor", "A", "data_agent"]
    final = sup.approve_tool_call_generate(run_id=first.run_id, tool_call_id="fu-42")
    assert users.looked_up == ["42"] and "A relays: Found" in final.text
    snaps = [s for s in _history(sup, first.thread_id) if s.next]
    for snap in snaps:
        with contextlib.suppress(Exception):
            sup.graph.invoke(None, snap.config)
    assert users.looked_up == ["42"], f"a replay ran the approved lookup again: {users.looked_up}"


def test_held_edited_args_approval_stopped_before_tools_then_new_message(sqlite_url: str
                                                                         ) -> None:
    """Legit flow: pay approved with edited arguments (an honest plan whose args changed), the
    run stops after the gate; a new message comes. The plan still accounts for the call (it
    is told 'not run', truthfully) and a replay of the paused checkpoint pays nothing."""
    agent, ledger = _billing(sqlite_url)
    first = agent.generate("pay ACME")
    cfg = config(first.thread_id)
    (interrupt,) = agent.graph.get_state(cfg).interrupts
    edited = {"amount": 7, "payee": {"name": "ACME"}}
    agent.graph.invoke(Command(resume={interrupt.id: {"decisions": [
        {"type": "edit", "tool_call_id": "c1", "args": edited}]}}), cfg,
        interrupt_after=["approval_gate"])
    paused = agent.graph.get_state(cfg)
    assert paused.next == ("tools",)
    out = say(agent, first.thread_id, "never mind")
    told = _told(out["messages"], "c1")
    assert told and "not run" in told[0] and "unknown" not in told[0], told
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused.config)
    assert ledger.ran == [], f"paid after the model was told 'not run': {ledger.ran}"


# ============================================================ copied thread (server's copy)


def test_held_a_copied_threads_new_message_leaves_the_original_payment_alone(sqlite_url: str
                                                                            ) -> None:
    """Legit flow + attack surface: the server copies a thread paused on pay (its plan's keys
    are the original thread's, so `_accounted` rejects them and the copy is swept). The copy's
    model must not be told the payment 'was not run' (whatever it is told), the original
    approval stays pending, and approving it in the original pays exactly once."""
    agent, ledger = _billing(sqlite_url)
    first = agent.generate("pay ACME", thread_id="orig")
    (pending,) = first.pending_approvals
    copy_thread(agent, "orig", "copy")
    # the ledger keeps plans per thread: the copy has none of the original's
    assert ledger_plan(agent, "copy") is None and ledger_plan(agent, "orig")
    out = say(agent, "copy", "never mind")
    told = _told(out["messages"], "c1")
    assert told, "the copied turn's call was left without an answer"
    row = agent._storage.ledger.approval(pending.id)
    assert row is not None and row.status == "pending", "the copy declined the original's call"
    agent.approve_tool_call_generate(run_id=first.run_id)
    assert ledger.ran == [("pay", PAY)]
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, _before_gate(agent, "copy"))
    assert ledger.ran == [("pay", PAY)], f"the copy paid the original's call: {ledger.ran}"


def _before_gate(agent: Agent, thread_id: str) -> Any:
    return next(s for s in reversed(_history(agent, thread_id)) if s.next).config


# ============================================================ the sweep and `settled`


class _Notes:
    """A subagent that writes a note (no approval) and then looks a user up (approval)."""

    def __init__(self) -> None:
        self.noted: list[str] = []
        self.users = Users()
        notes = self

        @create_tool
        def note(text: str) -> str:
            """Write a note (harmless)."""
            notes.noted.append(text)
            return "noted"

        def reply(messages: list[BaseMessage]) -> Any:
            results = [m for m in messages if isinstance(m, ToolMessage)]
            if not results:
                return turn(call("note", {"text": "started"}, "n1"))
            if len(results) == 1:
                return turn(call("find-user", {"userId": "12345"}, "fu-12345"))
            return f"sub: {results[-1].text}"

        self.agent = Agent(name="data_agent", description="Users",
                           model=ScriptedChatModel(reply), tools=[note, self.users.tool])


def test_a_swept_delegation_that_did_work_is_not_told_not_run_on_a_replay(sqlite_url: str
                                                                          ) -> None:
    """Attack: the subagent already wrote a note, then waits on find-user. A client drops the
    delegation from the supervisor's plan and sends 'never mind': the sweep settles the
    delegation's key with NOT_RUN ('This tool call was not run') instead of
    DELEGATION_STOPPED. A replay of the paused checkpoint then hits `settled`, which answers
    the delegation 'was not run' although its subagent did work (the note was written)."""
    notes = _Notes()
    sup = Agent(name="supervisor", model=ScriptedChatModel(_sup_reply(
        [("data_agent", "find user 12345", "d1")])), agents={"data_agent": notes.agent},
        checkpointer=sqlite_url)
    first = sup.generate("Find user with ID 12345")
    assert notes.noted == ["started"] and first.pending_approvals
    paused = sup.graph.get_state(config(first.thread_id)).config
    plan = plan_of(sup, first.thread_id)
    plan["calls"] = []
    sup.graph.update_state(config(first.thread_id), {"turn": plan})
    say(sup, first.thread_id, "never mind")
    out: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        (interrupt,) = sup.graph.get_state(paused).interrupts
        out = sup.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
    told = _told(out.get("messages") or [], "d1")
    assert notes.users.looked_up == []
    assert not any("not run" in t for t in told), (
        f"the replayed delegation was told {told!r}, but its subagent wrote {notes.noted}")


def test_held_an_honestly_stopped_delegation_that_did_work_is_told_so_on_a_replay(
        sqlite_url: str) -> None:
    """Control for the attack above (no forgery): the delegation is settled
    DELEGATION_STOPPED ('may have done part of its work'), and a replay is told that."""
    notes = _Notes()
    sup = Agent(name="supervisor", model=ScriptedChatModel(_sup_reply(
        [("data_agent", "find user 12345", "d1")])), agents={"data_agent": notes.agent},
        checkpointer=sqlite_url)
    first = sup.generate("Find user with ID 12345")
    paused = sup.graph.get_state(config(first.thread_id)).config
    say(sup, first.thread_id, "never mind")
    (interrupt,) = sup.graph.get_state(paused).interrupts
    out = sup.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
    told = _told(out["messages"], "d1")
    assert notes.users.looked_up == []
    assert told and "part of its work" in told[-1], told


def test_a_stopped_turn_never_tells_a_delegation_that_did_work_it_was_not_run(sqlite_url: str
                                                                             ) -> None:
    """Attack: as above, but the client leaves the plan alone and duplicates the delegation's
    entry (same key, another tool_call_id): `_accounted` rejects both (the key twice), so the
    turn goes through the sweep. Whatever the model is told on this branch or a replay, it
    must not be 'not run' for a delegation whose subagent did work."""
    import copy as _copy

    notes = _Notes()
    sup = Agent(name="supervisor", model=ScriptedChatModel(_sup_reply(
        [("data_agent", "find user 12345", "d1")])), agents={"data_agent": notes.agent},
        checkpointer=sqlite_url)
    first = sup.generate("Find user with ID 12345")
    paused = sup.graph.get_state(config(first.thread_id)).config
    plan = plan_of(sup, first.thread_id)
    twin = _copy.deepcopy(plan["calls"][0])
    twin["tool_call_id"] = "ghost"
    plan["calls"].append(twin)
    sup.graph.update_state(config(first.thread_id), {"turn": plan})
    out = say(sup, first.thread_id, "never mind")
    told = _told(out["messages"], "d1")
    with contextlib.suppress(Exception):
        (interrupt,) = sup.graph.get_state(paused).interrupts
        replay = sup.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
        told += _told(replay["messages"], "d1")
    assert notes.users.looked_up == []
    assert not any("not run" in t for t in told), (
        f"the model was told {told!r}, but the delegation's subagent wrote {notes.noted}")


def test_held_settled_does_not_answer_a_delegation_with_another_threads_outcome(
        sqlite_url: str) -> None:
    """Attack: thread 1's delegation answered (its key DONE with 'Found ...'); in thread 2 a
    client rewrites its paused delegation's key to thread 1's key and lets the gate run:
    `settled` checks the row's thread, so thread 2's delegation does not take thread 1's
    answer (the lookup result of another conversation)."""
    users = Users()
    sup = _sup(users, sqlite_url, [("data_agent", "find user 12345", "d1")])
    one = sup.generate("Find user with ID 12345", thread_id="t-1")
    sup.approve_tool_call_generate(run_id=one.run_id)
    key1 = next(s.values["turn"]["keys"][0] for s in _history(sup, "t-1")
                if (s.values.get("turn") or {}).get("keys"))
    two = sup.generate("Find user with ID 12345", thread_id="t-2")
    assert two.pending_approvals
    plan = plan_of(sup, "t-2")
    plan["calls"][0]["key"] = key1
    out: dict[str, Any] = {}
    with contextlib.suppress(Exception):
        out = sup.graph.invoke(Command(update={"turn": plan}, goto="approval_gate"),
                               config("t-2"))
    told = _told(out.get("messages") or [], "d1")
    assert not any("Found" in t for t in told), f"thread 2 was told thread 1's answer: {told}"


def test_held_an_inbox_approval_applies_once_after_the_supervisor_replays(sqlite_url: str
                                                                         ) -> None:
    """Legit flow: the subagent's approval decided in the inbox (not via the Agent API), then
    the supervisor's paused run is resumed by a raw Command; a second resume of the same paused
    checkpoint (a double-click in Studio) runs nothing again."""
    users = Users()
    sup = _sup(users, sqlite_url)
    first = sup.generate("Find user with ID 12345")
    (pending,) = first.pending_approvals
    paused = sup.graph.get_state(config(first.thread_id)).config
    Inbox(sup._storage, agents=[sup]).approve(pending.id, decided_by="dpo")
    (interrupt,) = sup.graph.get_state(paused).interrupts
    out = sup.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
    assert users.looked_up == ["12345"] and "Found" in _told(out["messages"], "d1")[-1]
    again = sup.graph.invoke(Command(resume={interrupt.id: {"apply": True}}), paused)
    assert users.looked_up == ["12345"], f"the lookup ran twice: {users.looked_up}"
    assert "Found" in _told(again["messages"], "d1")[-1]


def test_held_the_dispatched_payment_of_a_stopped_turn_runs_never_after_a_rewrite(
        sqlite_url: str) -> None:
    """Attack: the plan entry's tool_name rewritten (key kept): `_accounted` rejects it, the
    sweep settles the real key; a replay pays nothing and the model is not told 'not run'
    for a call that then paid."""
    agent, ledger = _billing(sqlite_url)
    thread_id, paused = _approved_and_dispatched(agent)
    plan = plan_of(agent, thread_id)
    plan["calls"][0]["tool_name"] = "lookup"
    agent.graph.update_state(config(thread_id), {"turn": plan})
    out = say(agent, thread_id, "never mind")
    told = _told(out["messages"], "c1")
    with contextlib.suppress(Exception):
        agent.graph.invoke(None, paused)
    assert not (ledger.ran and any("not run" in t for t in told)), (told, ledger.ran)
    assert ledger.ran == []


def test_held_no_agent_name_can_fall_under_another_agents_path_prefix() -> None:
    """Attack: `pending_below` matches agent paths by string prefix ('supervisor/'); a
    top-level agent named 'supervisor/ops' sharing the storage and thread id would have its
    approvals declined by the supervisor's sweep. Held: names with '/' are refused."""

    with pytest.raises(ValueError, match="/"):
        Agent(name="supervisor/ops", model=ScriptedChatModel(["ok"]))
