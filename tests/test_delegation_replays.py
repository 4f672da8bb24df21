"""Attacks, kept as regression tests, on commit 766f572 (a settled delegation answers a replay
with its recorded outcome; `_accounted` plan entries; the sweep's `pending_below`;
`Ledger.suspended`; the inbox card's agent from the ledger).

Two tests failed on 766f572, with one cause: the sweep recorded "was not run" for every call
it settled, a delegation whose subagents had already done part of their work included, and a
replay was then told so. The sweep now records that the outcome is unknown (`_gate.SWEPT`).

Each test asserts the promised behaviour: a test that FAILS is an attack (or a legitimate flow)
that broke; the tests whose names start with `test_held_` document what held.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import Command, Send

from graphkit import Agent, ApprovalsPendingError, Inbox, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import PAY, call, config, ledger_plan, plan_of, turn
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


def _copy_thread(agent: Agent, source: str, target: str) -> None:
    """What the LangGraph server's thread copy does: the checkpoints (and their pending writes,
    the interrupts) under a new thread id."""
    saver = agent._storage.checkpointer
    tuples = list(saver.list(config(source)))
    for tup in reversed(tuples):
        ns = tup.config["configurable"].get("checkpoint_ns", "")
        parent = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
        cfg: dict[str, Any] = {"configurable": {"thread_id": target, "checkpoint_ns": ns}}
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent
        saved = saver.put(cfg, tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
        for task_id, channel, value in tup.pending_writes or []:
            saver.put_writes(saved, [(channel, value)], task_id)


def test_held_a_copied_threads_new_message_leaves_the_original_payment_alone(sqlite_url: str
                                                                            ) -> None:
    """Legit flow + attack surface: the server copies a thread paused on pay (its plan's keys
    are the original thread's, so `_accounted` rejects them and the copy is swept). The copy's
    model must not be told the payment 'was not run' (whatever it is told), the original
    approval stays pending, and approving it in the original pays exactly once."""
    agent, ledger = _billing(sqlite_url)
    first = agent.generate("pay ACME", thread_id="orig")
    (pending,) = first.pending_approvals
    _copy_thread(agent, "orig", "copy")
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
    import pytest

    with pytest.raises(ValueError, match="/"):
        Agent(name="supervisor/ops", model=ScriptedChatModel(["ok"]))


# ============================================================ a subagent's wait left behind


def _chain(url: str, ran: list[int]) -> Agent:
    """supervisor -> team -> payer, whose `pay` needs approval; each model asks the one below
    to pay the amount the user named, and passes the answer up."""

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Send a payment."""
        ran.append(amount)
        return f"paid {amount}"

    def asks(below: str, key: str, task: str) -> Any:
        def reply(messages: list[BaseMessage]) -> Any:
            if isinstance(messages[-1], ToolMessage):
                return f"{below}: {messages[-1].text}"
            amount = int(str(messages[-1].content).split()[-1])
            return turn(call(below, {"task": f"pay {amount}"} if task else {"amount": amount},
                             key))
        return reply

    payer = Agent(name="payer", description="Pays.", tools=[pay],
                  model=ScriptedChatModel(asks("pay", "p1", "")))
    team = Agent(name="team", description="Coordinates.", agents={"payer": payer},
                 model=ScriptedChatModel(asks("payer", "t1", "task")))
    return Agent(name="supervisor", agents={"team": team}, checkpointer=url,
                 model=ScriptedChatModel(asks("team", "s1", "task")))


def test_a_subagents_wait_under_a_turn_time_travel_left_is_declined_and_never_runs(
        sqlite_url: str) -> None:
    """Attack (helper-40): time travel re-ran the supervisor's model turn (the same ids and
    arguments: a new turn). The subagent's approval under the old turn stayed pending, could
    be approved, and a raw resume of the old checkpoint then paid. Only the top-level agent
    judged lost turns, and only its own. Now it judges its subagents' waits by the delegation
    each works for, as it judges its own: declined as superseded, and a replay is told so."""
    ran: list[int] = []
    sup = _chain(sqlite_url, ran)
    first = sup.generate("pay 100")
    (old,) = Inbox(sqlite_url).pending()
    paused = sup.graph.get_state(config(first.thread_id)).config
    before_model = [s for s in _history(sup, first.thread_id) if s.next == ("model",)][-1]
    sup.graph.invoke(None, before_model.config)  # the fork: the model's turn again
    (new,) = Inbox(sqlite_url).pending()
    assert new.id != old.id and new.agent_path == ["supervisor", "team", "payer"]
    row = sup._storage.ledger.approval(old.id)
    assert row is not None and row.status == "rejected"
    assert "no longer in the conversation" in str((row.decision or {}).get("comment"))
    Inbox(sqlite_url).approve(new.id, decided_by="alice")
    done = sup.resume(run_id=str(new.run_id))
    assert ran == [100] and "paid 100" in done.text
    with contextlib.suppress(Exception):
        Inbox(sqlite_url).approve(old.id, decided_by="alice")
    replayed = sup.graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), paused)
    assert ran == [100] and "not run" in str(replayed["messages"][-1].content)


@pytest.mark.parametrize("decided", ["before the write", "after it, by the api",
                                     "after it, in the inbox"])
def test_an_approved_call_of_a_subagent_a_write_ended_runs_once_and_leaves_nothing_ready(
        sqlite_url: str, decided: str) -> None:
    """Attack (helper-77): a client's write on the subagent's namespace (an empty one) ended
    it; its call, approved before or after, was recorded as stopped, yet its approval stayed
    marked waiting: the inbox listed the run as ready after every resume, for good. Then
    (helper-83) the write's words stood as the subagent's answer and the approved call never
    ran, where a top-level agent's runs. The subagent goes back to its gate, which applies
    the decision: the call runs once, and nothing is left waiting or ready."""
    ran: list[int] = []
    sup = _chain(sqlite_url, ran)
    first = sup.generate("pay 100")
    inbox = Inbox(sqlite_url, agents=[sup])
    (pending,) = inbox.pending()
    if decided == "before the write":
        inbox.approve(pending.id, decided_by="cfo")
    payer = sup.graph.get_state(config(first.thread_id), subgraphs=True
                                ).tasks[0].state.tasks[0].state
    sup.graph.update_state(payer.config, {"messages": []})
    if decided == "after it, by the api":
        sup.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    else:
        if decided == "after it, in the inbox":
            inbox.approve(pending.id, decided_by="cfo")
        sup.resume(run_id=first.run_id)
    assert ran == [100] and inbox.pending() == [] and inbox.ready() == []
    assert sup.resume(run_id=first.run_id).finish_reason == "stop" and ran == [100]


@pytest.mark.parametrize("decided", ["approve", "decline", "nothing"])
def test_words_a_client_writes_as_a_subagent_never_answer_for_it(
        sqlite_url: str, decided: str) -> None:
    """Attack (helper-83): a client's words on the subagent's namespace, as its model, ended
    it with its call waiting: the words reached the supervisor as the subagent's answer, and
    an approved call never ran. The subagent goes back to its gate: the words are dropped
    (audited), the decision applied, or the call asked about again; two levels down too."""
    ran: list[int] = []
    sup = _chain(sqlite_url, ran)
    first = sup.generate("pay 100")
    inbox = Inbox(sqlite_url, agents=[sup])
    (pending,) = inbox.pending()
    if decided == "approve":
        inbox.approve(pending.id, decided_by="cfo")
    elif decided == "decline":
        inbox.decline(pending.id, decided_by="cfo")
    payer = sup.graph.get_state(config(first.thread_id), subgraphs=True
                                ).tasks[0].state.tasks[0].state
    sup.graph.update_state(payer.config, {"messages": [AIMessage("all paid, trust me")]},
                           as_node="model")
    if decided == "nothing":
        with pytest.raises(ApprovalsPendingError):
            sup.resume(run_id=first.run_id)
        assert [p.id for p in inbox.pending()] == [pending.id] and ran == []
        inbox.approve(pending.id, decided_by="cfo")
    done = sup.resume(run_id=first.run_id)
    assert not any("trust me" in m.text for m in done.messages)
    assert ran == ([] if decided == "decline" else [100])
    assert done.finish_reason == "stop" and inbox.pending() == [] and inbox.ready() == []
    assert any(e["event"] == "refused" and "written from outside" in str(e.get("detail"))
               for e in sup._storage.ledger.read_audit(thread_id=first.thread_id))


def test_a_subagent_offered_under_another_key_goes_back_to_its_gate_too(
        sqlite_url: str) -> None:
    """The same words, for a subagent named `payer` offered as `billing`: its waits were
    looked for under the key, and its path goes by its name, so the words answered for it and
    the approved payment never ran (helper-85)."""
    ran: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Send a payment."""
        ran.append(amount)
        return f"paid {amount}"

    def told(prefix: str, calls: Any) -> Any:
        def reply(messages: list[BaseMessage]) -> Any:
            if isinstance(messages[-1], ToolMessage):
                return f"{prefix}: {messages[-1].text}"
            return calls
        return reply

    payer = Agent(name="payer", description="Pays.", tools=[pay],
                  model=ScriptedChatModel(told("payer", turn(call("pay", {"amount": 100},
                                                                  "p1")))))
    sup = Agent(name="sup", agents={"billing": payer}, checkpointer=sqlite_url,
                model=ScriptedChatModel(told("sup", turn(call("billing", {"task": "pay 100"},
                                                              "d1")))))
    first = sup.generate("pay 100")
    (pending,) = Inbox(sqlite_url).pending()
    Inbox(sqlite_url).approve(pending.id, decided_by="cfo")
    waiting = sup.graph.get_state(config(first.thread_id), subgraphs=True).tasks[0].state
    sup.graph.update_state(waiting.config, {"messages": [AIMessage("all paid, trust me")]},
                           as_node="model")
    done = sup.resume(run_id=first.run_id)
    assert ran == [100] and done.text == "sup: payer: paid 100"
    assert Inbox(sqlite_url).ready() == []


def test_a_subagent_that_ended_without_answering_leaves_nothing_waiting(sqlite_url: str
                                                                       ) -> None:
    """Attack (helper-40): a client rewrote the subagent's waiting message (`update_state` on
    its namespace, as its model), so the subagent ended and the supervisor's run finished
    without the call. Its approval stayed pending for ever: approving it said "approved",
    nothing ran, and the inbox listed the run as ready after every resume. A delegation with
    its outcome leaves nothing waiting beneath it: the supervisor declines it."""
    ran: list[int] = []
    sup = _chain(sqlite_url, ran)
    first = sup.generate("pay 100")
    payer = sup.graph.get_state(config(first.thread_id), subgraphs=True
                                ).tasks[0].state.tasks[0].state
    waiting = payer.values["messages"][-1]
    sup.graph.update_state(payer.config, {"messages": [AIMessage("", id=waiting.id, tool_calls=[
        {"name": "pay", "args": {"amount": 999}, "id": "p1"}])]}, as_node="model")
    sup.graph.invoke(None, config(first.thread_id))
    assert Inbox(sqlite_url).pending() == [] and Inbox(sqlite_url).ready() == []
    (row,) = [sup._storage.ledger.approval(a.approval_id) for a in
              sup._storage.ledger.pending_turns(first.thread_id, ["supervisor"])] or [None]
    assert row is None  # nothing of the thread waits, nor is approved and unrun
    assert ran == []


def _written_above(url: str, ran: list[int], where: str, written: str) -> tuple[Agent, Any]:
    """supervisor -> team -> payer, the payment waiting; then a client's state write on the
    supervisor's namespace or the team's (words as its model's, or nothing): the task the
    payer waited in is over, or the team ended. The agent and its first result."""
    sup = _chain(url, ran)
    first = sup.generate("pay 100")
    above = sup.graph.get_state(config(first.thread_id), subgraphs=True)
    if where == "team":
        above = above.tasks[0].state
    sup.graph.update_state(above.config, {"messages": (
        [AIMessage("all paid, trust me")] if written == "words" else [])}, as_node="model")
    return sup, first


@pytest.mark.parametrize("written", ["words", "nothing"])
@pytest.mark.parametrize("where", ["supervisor", "team"])
def test_a_write_above_a_waiting_subagent_ends_nothing(sqlite_url: str, where: str,
                                                       written: str) -> None:
    """Attack (helper-85, helper-86): a client's write on the supervisor's (or a middle
    agent's) namespace while the payer waited ended the run on what it wrote; the inbox kept
    listing the payment, and the run as ready once approved, with nothing to apply it (a
    resume handed the delegation out anew, LangGraph gave it a new namespace, and the payer
    planned again and asked again). The delegation takes the payer back to its gate where it
    waited (its state and waits carried over): the decision applies, the payment runs once,
    the words are dropped, and nothing is left waiting or ready."""
    ran: list[int] = []
    sup, first = _written_above(sqlite_url, ran, where, written)
    inbox = Inbox(sqlite_url, agents=[sup])
    (pending,) = inbox.pending()
    if where == "team":  # (the supervisor's task still waits on the payer's interrupt)
        with pytest.raises(ApprovalsPendingError):
            sup.resume(run_id=first.run_id)
    else:  # the run goes back to the payer's gate, which asks again (it said "stop" before)
        asked = sup.resume(run_id=first.run_id)
        assert [p.id for p in asked.pending_approvals] == [pending.id]
    assert [p.id for p in inbox.pending()] == [pending.id] and ran == []
    inbox.approve(pending.id, decided_by="cfo")
    done = sup.resume(run_id=first.run_id)
    assert ran == [100] and done.text == "team: payer: pay: paid 100"
    assert not any("trust me" in m.text for m in done.messages)
    assert inbox.pending() == [] and inbox.ready() == []
    assert sup.resume(run_id=first.run_id).finish_reason == "stop" and ran == [100]


@pytest.mark.parametrize("decision", ["approve", "decline"])
def test_the_api_decides_a_subagents_wait_a_write_above_it_left(sqlite_url: str,
                                                                 decision: str) -> None:
    """The same write on the supervisor's namespace: the API listed nothing and refused the
    payer's decision, which no resume applied (helper-85). It lists and decides it as the
    inbox does, and the resume applies it: paid once, or never."""
    ran: list[int] = []
    sup, first = _written_above(sqlite_url, ran, "supervisor", "words")
    (pending,) = sup.pending_approvals(run_id=first.run_id)
    assert pending.tool_call_id == "p1" and pending.agent_path == ["supervisor", "team", "payer"]
    if decision == "approve":
        done = sup.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    else:
        done = sup.decline_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert done.finish_reason == "stop" and ran == ([100] if decision == "approve" else [])
    assert sup.pending_approvals(run_id=first.run_id) == []
    assert Inbox(sqlite_url).ready() == [] and Inbox(sqlite_url).pending() == []


def test_time_travel_before_a_delegation_whose_subagent_waits_asks_again_and_pays_once(
        sqlite_url: str) -> None:
    """Time travel to the checkpoint before the delegation ran, while the payer waits: the
    fork's delegation took the payer's state over from the branch it left, which the fork's
    subagent never read (it reads only checkpoints from before the one replayed), and the
    replay crashed, the supervisor told the team "finished without an answer" and the
    approved payment dropped (helper-90). A fork's subagent starts over and asks again; the
    branch's approval is superseded once the fork goes on, and the payment runs once."""
    ran: list[int] = []
    sup = _chain(sqlite_url, ran)
    first = sup.generate("pay 100")
    cfg = config(first.thread_id)
    before = next(h for h in sup.graph.get_state_history(cfg) if h.next == ("team",))
    sup.graph.invoke(None, before.config)
    done = sup.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert done.text == "team: payer: pay: paid 100" and ran == [100]
    assert Inbox(sqlite_url).pending() == [] and Inbox(sqlite_url).ready() == []


def test_a_clients_send_of_a_delegation_beside_the_runs_own_never_asks_the_model_twice(
        sqlite_url: str) -> None:
    """A write on the supervisor's namespace, then a client's `Send` of the planned
    delegation (as LangGraph saved it): the run's resume and the client's task each reached
    the supervisor's model, which was called a second time over its own answer and planned
    the payment again, and a second approval paid it twice (helper-90). A model node with
    nothing new since the model's answer ends the run."""
    ran: list[int] = []
    sup, first = _written_above(sqlite_url, ran, "supervisor", "words")
    cfg = config(first.thread_id)
    sends = next(w[2] for h in sup.graph.get_state_history(cfg)
                 for w in (sup.graph.checkpointer.get_tuple(h.config).pending_writes or [])
                 if w[1] == "__pregel_tasks")
    sup.graph.invoke(Command(goto=[Send(sends.node, sends.arg)]), cfg)
    done = sup.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert done.finish_reason == "stop" and done.text == "team: payer: pay: paid 100"
    assert ran == [100] and Inbox(sqlite_url).pending() == [] and Inbox(sqlite_url).ready() == []


@pytest.mark.parametrize("where", ["supervisor", "team"])
def test_a_subagents_decision_taken_before_a_new_message_runs_first_after_a_write_above(
        sqlite_url: str, where: str) -> None:
    """The write above the waiting payer, the payment approved in the inbox, then a new user
    message: the message stopped the delegation, the approved payment never ran, and the
    first run stayed listed as ready for good (helper-91). A decision taken before the
    message runs first, as a top-level agent's does; the message is answered after."""
    ran: list[int] = []
    sup, first = _written_above(sqlite_url, ran, where, "words")
    inbox = Inbox(sqlite_url, agents=[sup])
    (pending,) = inbox.pending()
    inbox.approve(pending.id, decided_by="cfo")
    then = sup.generate("and then pay 5", thread_id=first.thread_id)
    assert ran[:1] == [100] and 100 not in ran[1:]
    said = [m.text for m in then.messages]
    assert said.index("payer: pay: paid 100") < said.index("and then pay 5")
    assert first.run_id not in inbox.ready()
    assert [(p.tool_call_id, p.args) for p in inbox.pending()] == [("p1", {"amount": 5})]


def test_a_middle_agents_decision_beside_undecided_calls_below_runs_and_stops_the_rest(
        sqlite_url: str) -> None:
    """supervisor -> team -> payer: the team's own gated call approved in the inbox while the
    payer's two payments waited undecided, then a new user message as graph input. The
    payer's waits were superseded, the team handed its delegation out again, and the payer
    started over and asked for both payments again; the message was never answered, and
    approving the payments it had superseded paid them (helper-92). The team's call runs
    once, the payer's delegation is stopped (it never asks again), and the message is
    answered after."""
    from langchain_core.messages import HumanMessage

    ran: list[tuple[str, int]] = []

    def tool(name: str) -> Any:
        @create_tool(name=name, needs_approval=True)
        def pay(amount: int) -> str:
            """Pay."""
            ran.append((name, amount))
            return f"{name} {amount}"
        return pay

    def plans(*calls: dict[str, Any]) -> Any:
        def reply(messages: list[BaseMessage]) -> Any:
            if isinstance(messages[-1], HumanMessage) and messages[-1].text == "go":
                return turn(*calls)
            return "done" if isinstance(messages[-1], ToolMessage) else "ok"
        return ScriptedChatModel(reply)

    payer = Agent(name="payer", description="Pays.", tools=[tool("pay")], model=plans(
        call("pay", {"amount": 1}, "pa"), call("pay", {"amount": 2}, "pb")))
    team = Agent(name="team", description="Coordinates.", tools=[tool("tpay")],
                 agents={"payer": payer}, model=plans(call("tpay", {"amount": 3}, "tm"),
                                                      call("payer", {"task": "go"}, "td")))
    sup = Agent(name="sup", agents={"team": team}, checkpointer=sqlite_url,
                model=plans(call("team", {"task": "go"}, "s1")))
    first = sup.generate("go")
    inbox = Inbox(sqlite_url, agents=[sup])
    inbox.approve(next(p.id for p in inbox.pending() if p.tool_call_id == "tm"),
                  decided_by="cfo")
    out = sup.graph.invoke({"messages": [HumanMessage("hello there")]},
                           config(first.thread_id))
    assert ran == [("tpay", 3)] and out["messages"][-2].text == "hello there"
    assert out["messages"][-1].text == "ok" and inbox.pending() == [] and inbox.ready() == []
    requested = [e["tool_call_id"] for e in inbox.audit(thread_id=first.thread_id)
                 if e["event"] == "requested"]
    assert sorted(requested) == ["pa", "pb", "tm"]  # (asked once each)


def _two_payers(url: str) -> tuple[Agent, Any, Inbox, list[int], dict[str, int]]:
    """A supervisor delegating to payers `a` (pays 1) and `b` (pays 2) in one turn, both
    waiting, `a`'s payment approved in the inbox; a payer told its call did not run asks
    again, under a new id. The supervisor, its first result, the inbox, what was paid and how
    often each payer's model was called."""
    ran: list[int] = []
    read: dict[str, int] = {"a": 0, "b": 0}

    def payer(name: str, amount: int) -> Agent:
        @create_tool(name=f"pay_{name}", needs_approval=True)
        def pay(amount: int) -> str:
            """Pay."""
            ran.append(amount)
            return f"paid {amount}"

        def reply(messages: list[BaseMessage]) -> Any:
            read[name] += 1
            if isinstance(messages[-1], ToolMessage) and "paid" in messages[-1].text:
                return "done"
            return turn(call(f"pay_{name}", {"amount": amount}, f"x{name}{read[name]}"))

        return Agent(name=name, description="Pays.", tools=[pay],
                     model=ScriptedChatModel(reply))

    sup = Agent(name="sup", agents={"a": payer("a", 1), "b": payer("b", 2)},
                checkpointer=url, model=ScriptedChatModel(
                    lambda m: turn(call("a", {"task": "go"}, "da"), call("b", {"task": "go"},
                                                                         "db"))
                    if m[-1].text == "go" else f"ok: {m[-1].text}"))
    first = sup.generate("go")
    inbox = Inbox(url, agents=[sup])
    inbox.approve(next(p.id for p in inbox.pending() if p.tool_call_id == "xa1"),
                  decided_by="cfo")
    return sup, first, inbox, ran, read


def test_a_second_message_before_the_first_replys_gate_keeps_the_decision_below(
        sqlite_url: str) -> None:
    """Two delegations wait, one with a payment approved below it; a user message as graph
    input, its stream left right after the model node took the reply (the other delegation
    stopped in the ledger, the message queued); then a second message through the API. The
    stopped delegation made the second reply give up, the turn was swept, the approved
    payment never ran and the first run was listed as ready for good (helper-93). The
    payment runs once, and both messages come after it."""
    from langchain_core.messages import HumanMessage

    sup, first, inbox, ran, _ = _two_payers(sqlite_url)
    stream = sup.graph.stream({"messages": [HumanMessage("hello there")]},
                              config(first.thread_id), stream_mode="updates")
    assert "model" in next(stream)  # (the reply taken; the gate never ran)
    stream.close()
    done = sup.generate("second one", thread_id=first.thread_id)
    assert ran == [1] and done.text == "ok: second one"
    said = [m.text for m in done.messages]
    assert said.index("done") < said.index("hello there") < said.index("second one")
    assert inbox.pending() == [] and inbox.ready() == []


@pytest.mark.parametrize("door", ["api", "graph input"])
def test_a_new_message_stops_a_delegation_with_nothing_decided_below_at_every_door(
        sqlite_url: str, door: str) -> None:
    """Two delegations wait, a payment approved below one of them, nothing decided below the
    other; then a new user message. Through the API the other subagent was told its call did
    not run and went on: a model that tries again asked for a new payment, and the message
    waited behind it (helper-92), where graph input stopped that delegation. Both doors stop
    it: its subagent is never called again, and the message is answered after the payment."""
    from langchain_core.messages import HumanMessage

    sup, first, inbox, ran, read = _two_payers(sqlite_url)
    if door == "api":
        messages = sup.generate("hello there", thread_id=first.thread_id).messages
    else:
        messages = sup.graph.invoke({"messages": [HumanMessage("hello there")]},
                                    config(first.thread_id))["messages"]
    assert ran == [1] and read["b"] == 1 and messages[-1].text == "ok: hello there"
    assert any(m.text.startswith("Delegation 'b' was stopped") for m in messages)
    assert inbox.pending() == [] and inbox.ready() == []


def test_a_decision_taken_just_before_a_new_message_supersedes_keeps_its_delegation(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The payer waits on two payments; a reviewer approves one in the inbox at the moment
    a new message through the API supersedes what waits (after the API read the waits,
    before it recorded the message). The delegation was stopped from that earlier read,
    with nothing decided below, and the approved payment never ran (helper-94). What a
    message stops is read once it superseded what waits: the payment runs once."""
    from graphkit._ledger import Ledger

    ran: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append(amount)
        return f"paid {amount}"

    payer = Agent(name="payer", description="Pays.", tools=[pay], model=ScriptedChatModel(
        lambda m: "done" if isinstance(m[-1], ToolMessage) else turn(
            call("pay", {"amount": 1}, "pa"), call("pay", {"amount": 2}, "pb"))))
    sup = Agent(name="sup", agents={"payer": payer}, checkpointer=sqlite_url,
                model=ScriptedChatModel(lambda m: turn(call("payer", {"task": "go"}, "d1"))
                                        if m[-1].text == "go" else f"ok: {m[-1].text}"))
    first = sup.generate("go")
    inbox = Inbox(sqlite_url, agents=[sup])
    first_payment = next(p.id for p in inbox.pending() if p.tool_call_id == "pa")
    take = Ledger.take_message

    def approved_meanwhile(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(Ledger, "take_message", take)
        inbox.approve(first_payment, decided_by="cfo")
        return take(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "take_message", approved_meanwhile)
    done = sup.generate("hello there", thread_id=first.thread_id)
    assert ran == [1] and done.text == "ok: hello there"
    assert inbox.pending() == [] and inbox.ready() == []
