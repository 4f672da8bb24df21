"""What waits beneath a delegation stays one decision, applied once, whatever a client does
above it: a state write on a supervisor's (or a middle agent's) namespace, time travel to
before the delegation, a client's `Send` of the delegation beside the run's own, or a new
user message (which runs what was decided below first, and stops the delegations that only
undecided calls work for), at every door (the API, graph input, the inbox, workers).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langgraph.types import Command, Send

from graphkit import Agent, ApprovalsPendingError, Inbox, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, config, turn
from tests.test_delegation_replays import _history


def _pay(ran: list[int]) -> Any:
    """A `pay` tool that needs approval and records each amount it really paid in `ran`."""

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Send a payment."""
        ran.append(amount)
        return f"paid {amount}"

    return pay


def _payer(pay: Any) -> Agent:
    """A subagent `payer` whose model pays 1 with `pay` (call "p1") and answers with what
    that gave ("payer: <result>")."""

    def reply(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return f"payer: {messages[-1].text}"
        return turn(call("pay", {"amount": 1}, "p1"))

    return Agent(name="payer", description="Pays.", tools=[pay],
                 model=ScriptedChatModel(reply))


def _asking(asked: list[str]) -> Any:
    """An `ask` tool that suspends for an answer (noting "asked" in `asked`), then says it."""
    from graphkit import ToolContext

    @create_tool
    def ask(ctx: ToolContext) -> str:
        """Ask the user something."""
        if ctx.resume_data is None:
            asked.append("asked")
            return ctx.suspend({"message": "which one?"})
        return f"answer {ctx.resume_data}"

    return ask


def _chain(url: str, ran: list[int]) -> Agent:
    """supervisor -> team -> payer, whose `pay` needs approval; each model asks the one below
    to pay the amount the user named, and passes the answer up."""
    pay = _pay(ran)

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

    pay = _pay(ran)

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


def test_a_reply_auto_resume_reads_for_a_subagent_stops_the_sibling_it_supersedes(
        sqlite_url: str) -> None:
    """Through the API, a reply auto-resume reads for one subagent's suspended tool also
    superseded the undecided payment a sibling subagent waited on, but left that delegation
    running: the payer was told its payment "was not run", planned it again, and the run
    paused on a second payment, the message unanswered (helper-92 F3, helper-94 F2). Graph
    input stops such a delegation. The API now stops it too: the payer never asks again."""
    from tests.test_suspension import city_from_reply, weather_tool

    ran: list[int] = []
    asked: list[int] = []
    log: list[str] = []

    pay = _pay(ran)

    def payer_reply(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            asked.append(0)  # told its payment did not run: it asks again
            return turn(call("pay", {"amount": 2}, f"p{len(asked) + 1}"))
        asked.append(1)
        return turn(call("pay", {"amount": 1}, "p1"))

    def forecaster_reply(messages: list[BaseMessage]) -> Any:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        return turn(call("weather", {}, "w1")) if not results else f"sub: {results[-1].text}"

    def top_reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("payer", {"task": "pay"}, "d1"),
                        call("forecaster", {"task": "weather"}, "d2"))
        return f"top: {messages[-1].text}"

    payer = Agent(name="payer", description="Pays.", tools=[pay],
                  model=ScriptedChatModel(payer_reply))
    forecaster = Agent(name="forecaster", description="Weather", tools=[weather_tool(log)],
                       model=ScriptedChatModel(forecaster_reply, structured=city_from_reply))
    sup = Agent(name="supervisor", agents={"payer": payer, "forecaster": forecaster},
                checkpointer=sqlite_url, auto_resume_suspended_tools=True,
                model=ScriptedChatModel(top_reply))
    first = sup.generate("pay and tell me the weather")
    assert sorted(p.tool_call_id for p in first.pending_approvals) == ["p1", "w1"]

    final = sup.generate("Paris", thread_id=first.thread_id)
    assert log[-1] == "fetched Paris" and ran == [] and asked == [1]
    assert final.finish_reason == "stop" and final.text == "top: Paris"
    told = {m.tool_call_id: m.text for m in final.messages if isinstance(m, ToolMessage)}
    assert told["d2"] == "sub: Paris: sunny, +72F"
    assert "stopped by a new user message" in told["d1"]
    assert Inbox(sqlite_url).pending() == [] and Inbox(sqlite_url).ready() == []


def test_a_reply_auto_resume_reads_for_a_subagent_supersedes_the_approval_beside_it_there(
        sqlite_url: str) -> None:
    """A subagent's turn holds a suspended tool and an undecided payment; the user's reply
    through the API is read for the tool. The payment was declined in the ledger before
    the subagent's gate ran, which then applied the decline and never read the reply: the
    tool asked again, the message unanswered (helper-97). Its gate reads the reply, and
    supersedes the payment beside it, as an agent's own gate does at the top."""
    from tests.test_suspension import city_from_reply, weather_tool

    ran: list[int] = []
    log: list[str] = []

    pay = _pay(ran)

    def forecaster_reply(messages: list[BaseMessage]) -> Any:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        if not results:
            return turn(call("weather", {}, "w1"), call("pay", {"amount": 5}, "p1"))
        return "sub: " + " | ".join(m.text for m in results)

    def top_reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("forecaster", {"task": "weather"}, "d1"))
        return f"top: {messages[-1].text}"

    forecaster = Agent(name="forecaster", description="Weather", tools=[weather_tool(log), pay],
                       model=ScriptedChatModel(forecaster_reply, structured=city_from_reply))
    sup = Agent(name="supervisor", agents={"forecaster": forecaster}, checkpointer=sqlite_url,
                auto_resume_suspended_tools=True, model=ScriptedChatModel(top_reply))
    first = sup.generate("weather, and pay")
    final = sup.generate("Paris", thread_id=first.thread_id)
    assert log[-1] == "fetched Paris" and ran == []
    assert final.finish_reason == "stop" and final.text == "top: Paris"
    told = {m.tool_call_id: m.text for m in final.messages if isinstance(m, ToolMessage)}
    assert "Paris: sunny" in told["d1"] and "not run" in told["d1"]
    assert Inbox(sqlite_url).pending() == []


def test_a_decision_below_a_delegation_beside_a_call_that_ran_runs_first_at_graph_input(
        sqlite_url: str) -> None:
    """The supervisor's turn delegated a payment and ran a lookup beside it; a reviewer
    approved the payment in the inbox, then the user's next message came as graph input.
    The lookup's result was still in the step the payment's wait interrupted, so the reply
    gave up, the turn was swept, and the approved payment never ran, its run listed as
    ready for good (helper-97). The payment runs first, once; the lookup is answered as
    recorded, never run again."""
    from langchain_core.messages import HumanMessage

    ran: list[str] = []

    @create_tool
    def lookup(key: str) -> str:
        """Look something up."""
        ran.append("lookup")
        return f"value of {key}"

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Send a payment."""
        ran.append("pay")
        return f"paid {amount}"

    def top_reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("payer", {"task": "pay"}, "d1"), call("lookup", {"key": "k"}, "l1"))
        return f"top: {messages[-1].text}"

    payer = _payer(pay)
    sup = Agent(name="supervisor", agents={"payer": payer}, tools=[lookup],
                checkpointer=sqlite_url, model=ScriptedChatModel(top_reply))
    first = sup.generate("pay and look up")
    (asked,) = Inbox(sqlite_url).pending()
    Inbox(sqlite_url).approve(asked.id, decided_by="cfo")
    out = sup.graph.invoke({"messages": [HumanMessage("hello")]}, config(first.thread_id))
    told = {m.tool_call_id: m.text for m in out["messages"] if isinstance(m, ToolMessage)}
    assert ran == ["lookup", "pay"] and told == {"d1": "payer: paid 1", "l1": "value of k"}
    assert out["messages"][-1].text == "top: hello"
    assert Inbox(sqlite_url).pending() == [] and Inbox(sqlite_url).ready() == []


def test_a_decision_below_a_delegation_beside_a_tool_that_suspended_runs_first_at_graph_input(
        sqlite_url: str) -> None:
    """The supervisor's turn delegated a payment and ran its own weather tool beside it,
    which suspended in the step the payment's wait interrupted (its gate had not taken the
    question yet). A reviewer approved the payment; the user's next message as graph input
    made the reply give up, the turn was swept, and the approved payment never ran, its run
    listed as ready for good (helper-98). The payment runs first, once; the weather tool's
    question, which nobody was asked, is superseded by the message, as every door supersedes
    it (it was asked once the message's run went on, the message answered after it:
    helper-146), and the message is answered."""
    from langchain_core.messages import HumanMessage

    from graphkit._new_message import STOPPED_WAITING
    from tests.test_suspension import city_from_reply, weather_tool

    ran: list[int] = []
    log: list[str] = []

    pay = _pay(ran)

    def top_reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("payer", {"task": "pay"}, "d1"), call("weather", {}, "w1"))
        return f"top: {messages[-1].text}"

    payer = _payer(pay)
    sup = Agent(name="supervisor", agents={"payer": payer}, tools=[weather_tool(log)],
                checkpointer=sqlite_url, model=ScriptedChatModel(top_reply,
                                                                 structured=city_from_reply))
    first = sup.generate("pay, and the weather")
    inbox = Inbox(sqlite_url)
    (asked,) = inbox.pending()
    inbox.approve(asked.id, decided_by="cfo")
    sup.graph.invoke({"messages": [HumanMessage("hello")]}, config(first.thread_id))
    said = [m.text for m in sup.graph.get_state(config(first.thread_id)).values["messages"]]
    assert said[2:] == ["payer: paid 1", STOPPED_WAITING.format(name="weather"), "hello",
                        "top: hello"]
    assert ran == [1] and log == ["started"] and inbox.pending() == [] and inbox.ready() == []


def _decided_then_said(boss: Agent, url: str, thread_id: str, decided: str | None,
                       door: str) -> Any:
    """The thread's state once the inbox took `decided` ("approve", "decline"; None: nothing)
    on its one pending approval, and then "forget it" came through `door` ("api", "graph
    input", or "resume": a resume carrying the message under each waiting interrupt's id)."""
    if decided is not None:
        (waiting,) = Inbox(url).pending()
        getattr(Inbox(url), decided)(waiting.id, decided_by="cfo")
    said = {"role": "user", "content": "forget it"}
    if door == "api":
        boss.generate("forget it", thread_id=thread_id)
    elif door == "graph input":
        boss.graph.invoke({"messages": [said]}, config(thread_id))
    else:
        waits = boss.graph.get_state(config(thread_id)).interrupts
        boss.graph.invoke(Command(resume={i.id: {"messages": [said]} for i in waits}),
                          config(thread_id))
    return boss.graph.get_state(config(thread_id))


@pytest.mark.parametrize("decided", [None, "approve", "decline"])
@pytest.mark.parametrize("auto", [False, True], ids=["", "auto-resume"])
@pytest.mark.parametrize("door", ["api", "graph input", "resume"])
def test_a_new_message_supersedes_a_question_the_supervisors_own_tool_asked_beside_a_delegation(
        sqlite_url: str, door: str, auto: bool, decided: str | None) -> None:
    """The supervisor's turn delegates to `payer` (its payment waits) and calls its own `ask`,
    which suspends in the same step: its question is asked once the delegation's wait ends.
    A new message superseded the payment and stopped the delegation, but not the question:
    the message's run waited on it, the message unanswered (helper-145 M1; through the API
    and a resume that carries the message; graph input told the call "not run", though it
    had asked). The question is superseded too, told so, and the message answered; the
    payment never runs. With auto-resume on, the API's message left it too: a question
    nobody was asked is no question the message can answer (helper-146 M1). A decision the
    inbox took before the message stands; through graph input the question was then asked
    again, the tool run again from its start (helper-146 M2)."""
    ran: list[int] = []
    asked: list[str] = []

    ask = _asking(asked)

    def reply(messages: list[BaseMessage]) -> Any:
        last = messages[-1]
        if not isinstance(last, ToolMessage) and last.text == "go":
            return turn(call("payer", {"task": "pay 1"}, "d1"), call("ask", {}, "w1"))
        return "boss: " + " | ".join(m.text for m in messages[1:])

    boss = Agent(name="boss", tools=[ask], agents={"payer": _payer(_pay(ran))},
                 model=ScriptedChatModel(reply), checkpointer=sqlite_url,
                 auto_resume_suspended_tools=auto)
    first = boss.generate("go")
    assert asked == ["asked"] and [p.kind for p in first.pending_approvals] == ["approval"]
    after = _decided_then_said(boss, sqlite_url, first.thread_id, decided, door)
    assert not after.next and not after.interrupts
    messages = after.values["messages"]
    told = {m.tool_call_id: m.text for m in messages if isinstance(m, ToolMessage)}
    if decided is None:
        assert "stopped by a new user message" in told["d1"], told
    else:  # (the decision stands: the delegation went on with it)
        assert told["d1"] == ("payer: paid 1" if decided == "approve" else
                              "payer: Tool call 'pay' was rejected by 'cfo'. It did not run."), told
    assert "superseded by a new user message while it waited for input" in told["w1"], told
    assert messages[-1].text.endswith("forget it") and asked == ["asked"]
    assert ran == ([1] if decided == "approve" else [])
    assert Inbox(sqlite_url).pending() == []


@pytest.mark.parametrize("decided", [None, "approve", "decline"])
@pytest.mark.parametrize("door", ["api", "graph input", "resume"])
def test_a_new_message_stops_a_subagent_with_a_question_its_own_tool_asked_beside_its_delegation(
        sqlite_url: str, door: str, decided: str | None) -> None:
    """boss -> mid -> payer: mid's turn delegates to payer (its payment waits) and calls its
    own `ask`, which suspends in that step. A new message through a resume that carries it
    stopped the delegations, and mid's gate then asked the question all the same: the run
    waited on it (helper-146). The question goes with the stopped delegation. Where the
    inbox decided the payment before the message, the decision stands and mid goes on: its
    gate asked the question at every door, the message unanswered (helper-147 M1)."""
    ran: list[int] = []
    asked: list[str] = []

    ask = _asking(asked)

    def mid_reply(messages: list[BaseMessage]) -> Any:
        if any(isinstance(m, ToolMessage) for m in messages):
            return "mid done"
        return turn(call("payer", {"task": "pay 1"}, "md1"), call("ask", {}, "mw1"))

    mid = Agent(name="mid", description="Mid.", tools=[ask], agents={"payer": _payer(_pay(ran))},
                model=ScriptedChatModel(mid_reply))

    def reply(messages: list[BaseMessage]) -> Any:
        if not isinstance(messages[-1], ToolMessage) and messages[-1].text == "go":
            return turn(call("mid", {"task": "pay 1"}, "d1"))
        return "boss: " + " | ".join(m.text for m in messages[1:])

    boss = Agent(name="boss", agents={"mid": mid}, model=ScriptedChatModel(reply),
                 checkpointer=sqlite_url)
    first = boss.generate("go")
    assert asked == ["asked"] and [p.kind for p in first.pending_approvals] == ["approval"]
    after = _decided_then_said(boss, sqlite_url, first.thread_id, decided, door)
    assert not after.next and not after.interrupts
    assert after.values["messages"][-1].text.endswith("forget it")
    assert ran == ([1] if decided == "approve" else []) and asked == ["asked"]
    assert Inbox(sqlite_url).pending() == []


def test_a_message_auto_resume_reads_for_a_subagents_tool_supersedes_a_question_nobody_saw(
        sqlite_url: str) -> None:
    """With auto-resume on, the supervisor's turn delegates to `wx`, whose weather tool asks
    for a city (shown), and calls its own `ask`, which suspends in that step (asked of
    nobody). The user's message, read as the city, left `ask`: it was asked after the
    message, which waited unanswered in the queue (helper-147 M2). It is superseded, and the
    message answered."""
    from tests.test_suspension import city_from_reply, weather_tool

    log: list[str] = []
    asked: list[str] = []

    ask = _asking(asked)

    def wx_reply(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return f"wx: {messages[-1].text}"
        return turn(call("weather", {}, "w1"))

    wx = Agent(name="wx", description="Weather.", tools=[weather_tool(log)],
               model=ScriptedChatModel(wx_reply, structured=city_from_reply))

    def reply(messages: list[BaseMessage]) -> Any:
        if not isinstance(messages[-1], ToolMessage) and messages[-1].text == "go":
            return turn(call("wx", {"task": "weather"}, "d1"), call("ask", {}, "a1"))
        return "boss: " + " | ".join(m.text for m in messages[1:])

    boss = Agent(name="boss", tools=[ask], agents={"wx": wx}, checkpointer=sqlite_url,
                 model=ScriptedChatModel(reply, structured=city_from_reply),
                 auto_resume_suspended_tools=True)
    first = boss.generate("go")
    assert asked == ["asked"] and [p.kind for p in first.pending_approvals] == ["suspension"]
    after = boss.generate("Paris please", thread_id=first.thread_id)
    assert after.finish_reason == "stop" and after.pending_approvals == []
    told = {m.tool_call_id: m.text for m in after.messages if isinstance(m, ToolMessage)}
    assert "superseded by a new user message while it waited for input" in told["a1"], told
    assert after.text.endswith("Paris please") and asked == ["asked"]
    assert Inbox(sqlite_url).pending() == []
