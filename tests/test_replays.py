"""A decision names its run: given for an earlier run of a thread (its run_id, and the model's
tool_call_id, which models reuse), it never lands on a newer call of the thread."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, HumanMessageChunk, ToolMessage

from graphkit import Agent, Inbox, create_tool
from graphkit.errors import GraphkitError
from graphkit.testing import ScriptedChatModel


def _release(url: str, ran: list[str], reply: Any = None, **kwargs: Any) -> Agent:
    """The release agent; its model asks to deploy the version the user's last message
    names, reusing its tool_call_id in every turn (or replies with `reply`)."""
    @create_tool(needs_approval=True, approval_prompt="Send build {{version}} to prod?")
    def deploy(version: str) -> str:
        """Deploy a build."""
        ran.append(version)
        return f"deployed {version}"

    def asks(messages: list[Any]) -> Any:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return f"done: {last.content}"
        asked = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        version = str(asked.content).split()[-1]
        # the model reuses its tool_call_id in every turn
        return AIMessage("", tool_calls=[{"name": "deploy", "args": {"version": version},
                                          "id": "call_1"}])

    return Agent(name="release", tools=[deploy], checkpointer=url,
                 model=ScriptedChatModel(reply or asks), **kwargs)


@pytest.mark.parametrize("how", ["approve", "edit", "remember", "decline", "resolve"])
def test_a_decision_for_an_earlier_run_never_lands_on_the_newer_call(
        sqlite_url: str, how: str) -> None:
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    older = agent.generate("ship 1.4.2")
    newer = agent.generate("no wait, ship 6.6.6", thread_id=older.thread_id)
    assert newer.pending_approvals[0].args == {"version": "6.6.6"}
    with pytest.raises(GraphkitError):
        if how == "approve":
            agent.approve_tool_call_generate(run_id=older.run_id, tool_call_id="call_1",
                                             decided_by="alice")
        elif how == "edit":
            agent.approve_tool_call_generate(run_id=older.run_id, tool_call_id="call_1",
                                             args={"version": "1.4.3"}, decided_by="alice")
        elif how == "remember":
            agent.approve_tool_call_generate(run_id=older.run_id, decided_by="alice",
                                             remember="thread")
        elif how == "decline":
            agent.decline_tool_call_generate(run_id=older.run_id, decided_by="alice")
        else:
            agent.resolve_tool_approval(run_id=older.run_id, id=newer.pending_approvals[0].id,
                                        approved=True, decided_by="alice")
    assert ran == []
    assert agent.pending_approvals(run_id=older.run_id) == []
    (waiting,) = agent.pending_approvals(run_id=newer.run_id)
    assert waiting.status == "pending" and waiting.args == {"version": "6.6.6"}
    assert Inbox(sqlite_url).grants() == []
    # the newer run is decided under its own id, and its audit names it
    done = agent.approve_tool_call_generate(run_id=newer.run_id, decided_by="alice")
    assert ran == ["6.6.6"] and done.text == "done: deployed 6.6.6"
    approved = [e for e in Inbox(sqlite_url).audit(thread_id=older.thread_id)
                if e["event"] == "approved"]
    assert [e["run_id"] for e in approved] == [newer.run_id]


@dataclasses.dataclass
class _Said:
    messages: list[Any]


@pytest.mark.parametrize("door", ["invoke", "ainvoke", "a list of commands", "a dataclass",
                                  "update pairs", "a state write, then input with none",
                                  "a state write of a chunk", "a state write of a tuple"])
def test_a_decision_for_an_earlier_run_never_lands_on_a_call_a_message_given_to_the_graph_made(
        sqlite_url: str, door: str) -> None:
    """The newer turn came from a message given to the graph itself (a LangGraph server's
    client, Studio, Agent Chat UI, `agent.graph.invoke`): before, no run was recorded for it,
    its call was filed under the earlier run, and an operator's decision for the earlier
    run's call (the model reused its tool_call_id) paid the newer call (helper-108 H1), then
    again for input in shapes LangGraph reads and a dict-only check did not, and for a user's
    message a state write brought (helper-110). The graph's doors now start a run in the
    ledger as the API does; a thread the API never ran (a server's own) keeps its calls
    under no run."""
    import asyncio

    from langgraph.types import Command

    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    older = agent.generate("ship 1.4.2")
    config = {"configurable": {"thread_id": older.thread_id}}
    said = [HumanMessage("no wait, ship 6.6.6")]
    message = {"messages": said}
    if door == "invoke":
        agent.graph.invoke(message, config)
    elif door == "ainvoke":
        asyncio.run(agent.graph.ainvoke(message, config))
    elif door == "a list of commands":
        agent.graph.invoke([Command(update=message)], config)
    elif door == "a dataclass":
        agent.graph.invoke(_Said(said), config)
    elif door == "update pairs":  # (the gate's interrupt stays: input with none goes on)
        agent.graph.invoke(Command(update=[("messages", said)]), config)
        agent.graph.invoke({"messages": []}, config)
    else:  # (a chunk and a tuple of messages passed a reading of the write by type)
        written: Any = {"a state write of a chunk": [HumanMessageChunk(said[0].content)],
                        "a state write of a tuple": tuple(said)}.get(door, said)
        agent.graph.update_state(config, {"messages": written})
        agent.graph.invoke({}, config)
    (waiting,) = Inbox(sqlite_url).pending()
    assert waiting.args == {"version": "6.6.6"}
    assert waiting.run_id not in (None, older.run_id)
    with pytest.raises(GraphkitError):
        agent.approve_tool_call_generate(run_id=older.run_id, tool_call_id="call_1",
                                         decided_by="alice")
    assert ran == [] and agent.pending_approvals(run_id=older.run_id) == []
    done = agent.approve_tool_call_generate(run_id=waiting.run_id, decided_by="alice")
    assert ran == ["6.6.6"] and done.text == "done: deployed 6.6.6"
    # a thread only the graph's doors ran: its calls are filed under no run, as before
    served = {"configurable": {"thread_id": "served"}}
    agent.graph.invoke({"messages": [("user", "ship 2.0.0")]}, served)
    agent.graph.invoke({"messages": [("user", "ship 2.0.1")]}, served)
    assert [(p.args, p.run_id) for p in Inbox(sqlite_url).pending()] == [
        ({"version": "2.0.1"}, None)]


@pytest.mark.parametrize("newer_call", ["undecided", "expired"])
def test_resuming_an_earlier_run_is_refused_once_the_thread_went_on(
        sqlite_url: str, newer_call: str) -> None:
    """The thread went on in a newer run, which rests on its own call, undecided: a resume
    naming the earlier run is refused (typed, naming the newer run) and changes nothing, even
    once that call is overdue. Before, it said the earlier run "still has undecided tool calls"
    (the newer run's, which a decision naming it is refused), or, once they were overdue,
    ran the newer run on under the earlier run's id."""
    import time

    from graphkit.errors import RunSupersededError

    ran: list[str] = []
    ttl = {"approval_ttl": timedelta(seconds=1)} if newer_call == "expired" else {}
    agent = _release(sqlite_url, ran, **ttl)
    older = agent.generate("ship 1.4.2")
    newer = agent.generate("no wait, ship 6.6.6", thread_id=older.thread_id)
    (waiting,) = newer.pending_approvals
    if newer_call == "expired":
        time.sleep(1.2)
    config = {"configurable": {"thread_id": older.thread_id}}
    history = [c.config["configurable"]["checkpoint_id"]
               for c in agent.graph.get_state_history(config)]
    with pytest.raises(RunSupersededError) as refused:
        agent.resume(run_id=older.run_id)
    assert refused.value.later_run_id == newer.run_id
    assert f"went on in run {newer.run_id!r}" in str(refused.value)
    assert ran == []
    assert [c.config["configurable"]["checkpoint_id"]
            for c in agent.graph.get_state_history(config)] == history
    assert [p.status for p in agent.pending_approvals(run_id=newer.run_id)] == ["pending"]
    # its snapshot says the same, not the newer run's pause (helper-112: "suspended")
    earlier, later = (agent.snapshot(run_id=r.run_id) for r in (older, newer))
    assert (earlier["status"], earlier["later_run_id"]) == ("superseded", newer.run_id)
    assert (later["status"], later["later_run_id"]) == ("suspended", None)
    if newer_call == "undecided":
        Inbox(sqlite_url).approve(waiting.id, decided_by="alice")
    done = agent.resume(run_id=newer.run_id)
    assert done.run_id == newer.run_id
    if newer_call == "expired":
        assert ran == [] and "expired" in done.text
    else:
        assert ran == ["6.6.6"] and done.text == "done: deployed 6.6.6"


def test_resuming_an_earlier_run_goes_on_as_the_run_its_thread_went_on_in(
        sqlite_url: str) -> None:
    """The newer run's call was approved in the inbox: a resume naming the earlier run goes on
    as the newer run, under its id (before, the newer run's call ran under the earlier id)."""
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    older = agent.generate("ship 1.4.2")
    newer = agent.generate("no wait, ship 6.6.6", thread_id=older.thread_id)
    (waiting,) = newer.pending_approvals
    Inbox(sqlite_url).approve(waiting.id, decided_by="alice")
    done = agent.resume(run_id=older.run_id)
    assert done.run_id == newer.run_id
    assert ran == ["6.6.6"] and done.text == "done: deployed 6.6.6"
    approved = [e for e in Inbox(sqlite_url).audit(thread_id=older.thread_id)
                if e["event"] == "approved"]
    assert [e["run_id"] for e in approved] == [newer.run_id]


def test_a_run_continued_without_a_message_resumes_as_itself(sqlite_url: str) -> None:
    """`generate(None, thread_id=...)` starts a run that writes no options of its own into
    the state: it is still the thread's latest run (the ledger says), and resumes as itself
    (helper-17 against ed8c05b: it was refused as left behind by the run before it)."""
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    older = agent.generate("ship 1.4.2", on_state_change=lambda state: state.step >= 1)
    assert older.finish_reason == "checkpoint"
    later = agent.generate(None, thread_id=older.thread_id)
    assert later.finish_reason == "suspended"
    (waiting,) = later.pending_approvals
    Inbox(sqlite_url).approve(waiting.id, decided_by="alice")
    done = agent.resume(run_id=later.run_id)
    assert ran == ["1.4.2"] and done.text == "done: deployed 1.4.2"


def test_a_run_continued_without_a_message_is_decided_under_its_own_id(
        sqlite_url: str) -> None:
    """The run `generate(None, thread_id=...)` started is the thread's current run, which the
    ledger's run registry says, not the state (whose options still name the run before): its
    call is decided and listed under its id (helper-17: refused as not its own)."""
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    older = agent.generate("ship 1.4.2", on_state_change=lambda state: state.step >= 1)
    later = agent.generate(None, thread_id=older.thread_id)
    (waiting,) = agent.pending_approvals(run_id=later.run_id)
    assert waiting.args == {"version": "1.4.2"}
    done = agent.approve_tool_call_generate(run_id=later.run_id, decided_by="alice")
    assert ran == ["1.4.2"] and done.text == "done: deployed 1.4.2"


def test_a_state_rewritten_to_name_an_earlier_run_does_not_make_it_current(
        sqlite_url: str) -> None:
    """A client who can write the thread's state (a LangGraph server's, a raw `Command`)
    names the earlier run in its options: a decision naming that run still never lands on
    the newer run's call, since the ledger, not the state, tells which run is current
    (helper-15: the state's word made the earlier run current, and its decision ran the
    newer call)."""
    from langgraph.types import Command

    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    older = agent.generate("ship 1.4.2")
    newer = agent.generate("no wait, ship 6.6.6", thread_id=older.thread_id)
    config = {"configurable": {"thread_id": older.thread_id}}
    options = agent.graph.get_state(config).values["options"]
    agent.graph.invoke(Command(update={"options": {**options, "run_id": older.run_id}}),
                       config)
    assert agent.graph.get_state(config).values["options"]["run_id"] == older.run_id
    assert agent.pending_approvals(run_id=older.run_id) == []
    with pytest.raises(GraphkitError):
        agent.approve_tool_call_generate(run_id=older.run_id, decided_by="alice")
    assert ran == []
    (waiting,) = agent.pending_approvals(run_id=newer.run_id)
    assert waiting.status == "pending" and waiting.args == {"version": "6.6.6"}


def test_a_suspension_answer_for_an_earlier_run_is_refused(sqlite_url: str) -> None:
    from pydantic import BaseModel

    from graphkit import ToolContext

    class City(BaseModel):
        city: str

    asked: list[str] = []

    @create_tool(resume_schema=City)
    def weather(ctx: ToolContext) -> str:
        """Weather for a city."""
        asked.append("asked")
        if ctx.resume_data is None:
            return ctx.suspend({"message": "Which city?"})
        return f"sunny in {ctx.resume_data.city}"

    model = ScriptedChatModel(lambda m: "ok" if isinstance(m[-1], ToolMessage) else AIMessage(
        "", tool_calls=[{"name": "weather", "args": {}, "id": "w1"}]))
    agent = Agent(name="wx", tools=[weather], checkpointer=sqlite_url, model=model)
    older = agent.generate("weather?")
    newer = agent.generate("weather again?", thread_id=older.thread_id)
    assert newer.finish_reason == "suspended"
    with pytest.raises(GraphkitError):
        agent.resume_generate({"city": "Paris"}, run_id=older.run_id)
    assert agent.resume_generate({"city": "Oslo"}, run_id=newer.run_id).text == "ok"


def test_time_travel_before_a_pending_approval_supersedes_it(sqlite_url: str) -> None:
    """T1 paid (approved, ran); T2 waits for the CFO. A client forks the thread from T1's
    checkpoint at the gate (time travel): T2's turn is no longer in the conversation, so its
    approval is declined as superseded, not left in the inbox for a reviewer to approve a
    payment no run will ever make (the inbox once said "approved" and nothing ran)."""
    from tests.helpers import PAY, agent_with, call, cfo_only, config, turn

    def model(messages: list[Any]) -> Any:
        if isinstance(messages[-1], HumanMessage):
            asked = sum(isinstance(m, HumanMessage) for m in messages)
            return turn(call("pay", PAY, f"c{asked}"))
        return "done"

    agent, ran = agent_with(model, checkpointer=sqlite_url, approvers=cfo_only, name="billing")
    first = agent.generate("pay")
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    second = agent.generate("pay again", thread_id=first.thread_id)
    (waiting,) = second.pending_approvals
    old = next(s for s in agent.graph.get_state_history(config(first.thread_id))
               if s.next == ("approval_gate",) and isinstance(s.values["messages"][-1], AIMessage)
               and s.values["messages"][-1].tool_calls[0]["id"] == "c1")
    agent.graph.invoke(None, old.config)
    assert ran.ran == [("pay", PAY)]  # T1's call ran once; the replay got its result
    assert Inbox(sqlite_url).pending() == []
    row = agent._storage.ledger.approval(waiting.id)
    assert row is not None and row.status == "rejected"
    assert "no longer in the conversation" in str((row.decision or {}).get("comment"))
    with pytest.raises(GraphkitError):
        Inbox(sqlite_url).approve(waiting.id, decided_by="cfo")
    assert ran.ran == [("pay", PAY)]


@pytest.mark.parametrize("claimed", ["never", "by a process that died"])
def test_time_travel_before_an_approved_call_that_has_no_outcome_records_it_stopped(
        sqlite_url: str, claimed: str) -> None:
    """T1 paid; T2's payment was approved in the inbox, and its run has not gone on. A client
    forks the thread from T1's checkpoint: T2's turn is no longer in the conversation, so its
    call is recorded as not run, and a replay of T2's own paused checkpoint answers it so, and
    pays nothing. Before, the approval outlived its turn and that replay paid; the model,
    which reuses tool_call_ids, may meanwhile have been told that a call of the same id did
    not run (helper-25). So for a call a process claimed and died with (before its tool
    started, or inside it after the payment): the fork recorded nothing for a call already
    claimed, and the replay took it over from the dead holder and paid (again, if it had
    paid: helper-84); it is recorded as stopped, its outcome unknown."""
    from tests.helpers import PAY, agent_with, call, config, dead_owner, turn

    def model(messages: list[Any]) -> Any:
        if isinstance(messages[-1], HumanMessage):
            asked = sum(isinstance(m, HumanMessage) for m in messages)
            return turn(call("pay", PAY, f"c{asked}"))
        return "done"

    agent, ran = agent_with(model, checkpointer=sqlite_url, name="billing")
    first = agent.generate("pay")
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    second = agent.generate("pay again", thread_id=first.thread_id)
    (waiting,) = second.pending_approvals
    paused = agent.graph.get_state(config(first.thread_id)).config
    Inbox(sqlite_url).approve(waiting.id, decided_by="cfo")
    if claimed != "never":
        ledger = agent._storage.ledger
        key = ledger.approval(waiting.id).call_key
        assert ledger.start(key, dead_owner(), holder_dead=lambda _o: False)[0] == "won"
    old = next(s for s in agent.graph.get_state_history(config(first.thread_id))
               if s.next == ("approval_gate",) and isinstance(s.values["messages"][-1], AIMessage)
               and s.values["messages"][-1].tool_calls[0]["id"] == "c1")
    agent.graph.invoke(None, old.config)
    assert ran.ran == [("pay", PAY)]
    out = agent.graph.invoke(None, paused)  # the old branch, where T2 was approved
    assert ran.ran == [("pay", PAY)]
    (told,) = [m.text for m in out["messages"]
               if isinstance(m, ToolMessage) and m.tool_call_id == waiting.tool_call_id]
    assert "no longer in the conversation" in told and "will not run" in told
    if claimed != "never":
        assert "unknown" in told


def test_time_travel_before_a_declined_call_keeps_its_decline_and_leaves_nothing_ready(
        sqlite_url: str) -> None:
    """A payment declined in the inbox, its run not gone on, then a fork from before its turn:
    the decline stayed marked waiting, the run ready for good; counted as waiting, it was
    then recorded as stopped, and a replay of the branch that holds the turn told the model
    "its turn is no longer in the conversation", the reviewer's words lost (helper-88). The
    decline stands, and nothing waits on it."""
    from tests.helpers import PAY, agent_with, call, config, turn

    agent, ran = agent_with([turn(call("pay", PAY, "c1")), "words", "done"],
                            checkpointer=sqlite_url)
    paused = agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    Inbox(sqlite_url).decline(pending.id, decided_by="cfo", comment="too much")
    history = list(agent.graph.get_state_history(config(paused.thread_id)))
    before = next(s for s in history if s.next == ("model",) and not any(
        isinstance(m, AIMessage) for m in s.values.get("messages", [])))
    agent.graph.invoke(None, agent.graph.update_state(before.config, {
        "messages": [HumanMessage("never mind")]}))
    assert Inbox(sqlite_url).ready() == []
    out = agent.graph.invoke(None, history[0].config)  # the branch that holds the turn
    (told,) = [m.text for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "rejected by 'cfo': too much" in told and ran.ran == []
    assert Inbox(sqlite_url).ready() == [] and Inbox(sqlite_url).pending() == []


def test_time_travel_before_a_resumed_suspension_stops_its_call(sqlite_url: str) -> None:
    """The weather tool of T2 suspended, and the inbox resumed it with a city; its run has not
    gone on. A client forks the thread from before T2 and goes on: T2's call is recorded as
    stopped, and a replay of T2's paused checkpoint answers it so and never fetches (helper-26:
    a resumed suspension, unlike an approval, still ran there)."""
    from tests.helpers import call, config, turn
    from tests.test_suspension import city_from_reply, weather_tool

    log: list[str] = []

    def replies(messages: list[Any]) -> Any:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return f"The weather in {last.text}"
        return "hello" if last.text in ("hi", "never mind") else turn(call("weather", {}, "w1"))

    agent = Agent(name="wx", tools=[weather_tool(log)], checkpointer=sqlite_url,
                  model=ScriptedChatModel(replies, structured=city_from_reply))
    first = agent.generate("hi")
    assert agent.generate("weather?", thread_id=first.thread_id).finish_reason == "suspended"
    paused = agent.graph.get_state(config(first.thread_id)).config
    (item,) = Inbox(sqlite_url).pending()
    Inbox(sqlite_url).resume(item.id, {"city": "Paris"}, decided_by="ops")
    before = next(s for s in agent.graph.get_state_history(config(first.thread_id))
                  if len(s.values.get("messages") or []) == 2 and not s.next)
    agent.graph.invoke({"messages": [HumanMessage("never mind")]}, before.config)
    out = agent.graph.invoke(None, paused)
    assert log == ["started"]
    (told,) = [m.text for m in out["messages"] if isinstance(m, ToolMessage)]
    assert "no longer in the conversation" in told and "will not run" in told


def test_a_pass_reads_what_the_ledger_holds_for_it_in_one_statement_each(
        sqlite_url: str) -> None:
    """What a model pass checks for abandoned turns, the agent's message queue, the outcomes
    of the turn's calls (which the model pass checks its tool results against) and the rows
    of their approvals (which the gate applies, and its pause says a reviewer may decide) are
    read in the statement that reads the turn's plan (the time-travel test above shows the
    check still declines what it must), not in statements of their own: in a run's first pass
    (no turn yet) and in the pass after a resumed turn."""
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    sql: Any = agent._storage.ledger._sql
    seen: list[str] = []

    def reads(run: Any) -> tuple[Any, dict[str, int]]:
        seen.clear()
        sql.conn.set_trace_callback(seen.append)
        try:
            result = run()
        finally:
            sql.conn.set_trace_callback(None)
        kinds = {"turn": "SELECT 0 AS part", "waits": "FROM graphkit_approvals a LEFT JOIN",
                 "queue": "FROM graphkit_queue", "rows": "SELECT approval_id, thread_id, kind",
                 "outcomes": "SELECT call_key, executed, outcome"}
        return result, {k: sum(text in s for s in seen) for k, text in kinds.items()}

    paused, first = reads(lambda: agent.generate("ship 1.4.2"))
    assert paused.pending_approvals[0].allowed_decisions == ["approve", "edit", "reject"]
    # the model pass and the gate's: each reads the plan, queue and what waits together
    assert first == {"turn": 2, "waits": 2, "queue": 2, "rows": 0, "outcomes": 0}, first
    done, then = reads(lambda: agent.approve_tool_call_generate(run_id=paused.run_id,
                                                                 decided_by="alice"))
    assert done.text == "done: deployed 1.4.2" and ran == ["1.4.2"]
    # the decision reads its row; the gate reads it again, with its plan (it verifies what it
    # applies), and the model pass reads the call's outcome with its plan
    assert then == {"turn": 2, "waits": 2, "queue": 2, "rows": 1, "outcomes": 0}, then


def _two_calls(url: str, ran: list[str]) -> Agent:
    """`release`, whose model asks two calls one after the other for each message (reusing
    its tool_call_id), then answers."""
    @create_tool(needs_approval=True)
    def deploy(version: str) -> str:
        """Deploy a build."""
        ran.append(version)
        return f"deployed {version}"

    def reply(messages: list[Any]) -> Any:
        asked = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
        results = [m for m in messages[asked:] if isinstance(m, ToolMessage)]
        if len(results) >= 2:
            return "done"
        version = f"{str(messages[asked].content).split()[-1]}-{len(results) + 1}"
        return AIMessage("", tool_calls=[{"name": "deploy", "args": {"version": version},
                                          "id": "call_1"}])

    return Agent(name="release", tools=[deploy], checkpointer=url,
                 model=ScriptedChatModel(reply))


@pytest.mark.parametrize("forged", ["the earlier run", "no run", "another thread's run"])
@pytest.mark.parametrize("goes_on", ["decided here", "decided in the inbox"])
@pytest.mark.parametrize("started", ["over a pause", "after the thread ended"])
def test_calls_are_filed_under_the_threads_current_run_whatever_the_state_names(
        sqlite_url: str, forged: str, goes_on: str, started: str) -> None:
    """A client who can write the state names another run in its options (the earlier run of
    the thread, a run id of nothing, another thread's run), then the newer run goes on: the
    call its model asks next is filed under the newer run, the thread's current run as the
    ledger recorded it, so a decision naming the earlier run never takes it (helper-20: the
    gate filed it under the run the state named, or under none, which any earlier run's
    decision could take: a decision naming the earlier run ran it)."""
    from langgraph.types import Command

    ran: list[str] = []
    agent = _two_calls(sqlite_url, ran)
    older = agent.generate("ship a")
    before = ["a-1", "a-2"] if started == "after the thread ended" else []
    for _ in before:
        agent.approve_tool_call_generate(run_id=older.run_id, decided_by="alice")
    elsewhere = agent.generate("ship z")
    newer = agent.generate("no wait, ship b", thread_id=older.thread_id)
    config = {"configurable": {"thread_id": older.thread_id}}
    named = {"the earlier run": older.run_id, "no run": "nothing-at-all",
             "another thread's run": elsewhere.run_id}[forged]
    options = agent.graph.get_state(config).values["options"]
    agent.graph.invoke(Command(update={"options": {**options, "run_id": named}}), config)
    if goes_on == "decided here":
        agent.approve_tool_call_generate(run_id=newer.run_id, decided_by="alice")
    else:
        (first,) = [p for p in Inbox(sqlite_url).pending() if p.thread_id == older.thread_id]
        Inbox(sqlite_url).approve(first.id, decided_by="alice")
        agent.resume(run_id=newer.run_id)
    assert ran == [*before, "b-1"]
    (second,) = [p for p in Inbox(sqlite_url).pending() if p.thread_id == older.thread_id]
    assert second.args == {"version": "b-2"} and second.run_id == newer.run_id
    assert agent.pending_approvals(run_id=older.run_id) == []
    with pytest.raises(GraphkitError):
        agent.approve_tool_call_generate(run_id=older.run_id, decided_by="mallory")
    assert ran == [*before, "b-1"]
    requested = [e["run_id"] for e in Inbox(sqlite_url).audit(thread_id=older.thread_id)
                 if e["event"] == "requested"]
    assert requested == [older.run_id] * (len(before) or 1) + [newer.run_id] * 2
    done = agent.approve_tool_call_generate(run_id=newer.run_id, decided_by="alice")
    assert ran == [*before, "b-1", "b-2"] and done.text == "done"


def test_the_snapshot_of_a_run_that_ended_says_how_it_ended_once_the_thread_goes_on(
        sqlite_url: str) -> None:
    """A run that answered read "superseded" once the thread's next message started a run
    (helper-118): its snapshot says how it ended, and names the later run."""
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    first = agent.generate("ship 1.0.0")
    done = agent.approve_tool_call_generate(run_id=first.run_id, decided_by="alice")
    assert done.finish_reason == "stop" and agent.snapshot(run_id=first.run_id)["status"] == "stop"
    later = agent.generate("ship 2.0.0", thread_id=first.thread_id)
    ended = agent.snapshot(run_id=first.run_id)
    assert (ended["status"], ended["later_run_id"]) == ("stop", later.run_id)


def test_an_earlier_run_lists_nothing_of_a_later_run_when_the_state_holds_no_interrupt(
        sqlite_url: str) -> None:
    """A state write that leaves no interrupt (`update_state` without `as_node`) makes the
    listing fall back to the turn's plan, which is the thread's current run's: the earlier run
    lists none of it (helper-20: `pending_approvals` and `snapshot` of the earlier run showed
    the newer run's call)."""
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    older = agent.generate("ship 1.4.2")
    newer = agent.generate("no wait, ship 6.6.6", thread_id=older.thread_id)
    config = {"configurable": {"thread_id": older.thread_id}}
    agent.graph.update_state(config, {"messages": []})
    assert not agent.graph.get_state(config).interrupts
    assert agent.pending_approvals(run_id=older.run_id) == []
    assert agent.snapshot(run_id=older.run_id)["awaiting_approval"] is False
    (waiting,) = agent.pending_approvals(run_id=newer.run_id)
    assert waiting.args == {"version": "6.6.6"}


def test_another_agents_message_on_a_thread_is_refused_and_changes_nothing(
        sqlite_url: str) -> None:
    """A thread is one agent's: a second agent (another name, the same database and thread
    id) that sends a message there is refused, typed, before anything is written, and the
    first agent's pause stands (helper-20: the message was lost, the first agent's call was
    asked again under the second, and the first agent's decision landed on it)."""
    ran: list[str] = []
    agent = _release(sqlite_url, ran)
    other = Agent(name="intruder", tools=agent.tools, checkpointer=sqlite_url,
                  model=ScriptedChatModel(lambda m: "hello"))
    older = agent.generate("ship 1.4.2")
    config = {"configurable": {"thread_id": older.thread_id}}
    history = len(list(agent.graph.get_state_history(config)))
    with pytest.raises(GraphkitError, match="belongs to agent 'release'"):
        other.generate("ship 6.6.6", thread_id=older.thread_id)
    assert len(list(agent.graph.get_state_history(config))) == history
    (waiting,) = agent.pending_approvals(run_id=older.run_id)
    assert waiting.args == {"version": "1.4.2"} and ran == []
    done = agent.approve_tool_call_generate(run_id=older.run_id, decided_by="alice")
    assert ran == ["1.4.2"] and done.text == "done: deployed 1.4.2"


@pytest.mark.parametrize("read", ["at once", "after the thread went on"])
def test_a_decisions_stream_goes_on_as_the_threads_current_run(sqlite_url: str,
                                                               read: str) -> None:
    """A decision naming run A, whose stream advances the thread after a later run B started
    on it (`generate(None, thread_id=...)` continued it; or the stream was read only after a
    new message went on): the stream goes on as B, under B's id, and its result names B, so
    that what the result lists can be decided with the run id it gives (helper-21: the result
    named A, listed the next call, which the gate files under B, and a decision naming A was
    refused; the checkpoints of B's turn named A)."""
    ran: list[str] = []
    agent = _two_calls(sqlite_url, ran)
    older = agent.generate("ship a")
    config = {"configurable": {"thread_id": older.thread_id}}
    if read == "at once":
        later = agent.generate(None, thread_id=older.thread_id)
        assert later.finish_reason == "suspended"
        done = agent.approve_tool_call_generate(run_id=older.run_id, decided_by="alice")
        assert ran == ["a-1"]
    else:
        stream = agent.approve_tool_call(run_id=older.run_id, decided_by="alice")
        later = agent.generate("no wait, ship b", thread_id=older.thread_id)
        assert ran == ["a-1"]  # (decided before the message: it runs first)
        (first,) = later.pending_approvals
        Inbox(sqlite_url).approve(first.id, decided_by="alice")
        done = stream.result()
        assert stream.run_id == later.run_id
        assert ran == ["a-1", "b-1"]
    assert done.run_id == later.run_id and done.finish_reason == "suspended"
    (waiting,) = done.pending_approvals
    assert agent.graph.get_state(config).metadata["graphkit_run_id"] == later.run_id
    last = agent.approve_tool_call_generate(run_id=done.run_id, decided_by="alice")
    assert last.text == "done" and ran[-1] == waiting.args["version"]


def test_an_approval_id_names_that_approval_never_a_call_a_model_gave_the_same_id(
        sqlite_url: str) -> None:
    """A decision that names a call by its approval id (as `tool_call_id`, as the notebook's
    cards do) decided, once that approval was decided, a later call the model gave that id
    as its tool_call_id (helper-114). It names that approval alone: already decided."""
    from graphkit.errors import ApprovalAlreadyResolvedError

    ran: list[str] = []
    first_id: list[str] = []

    def reply(messages: list[Any]) -> Any:
        if not first_id:
            return AIMessage("", tool_calls=[{"name": "deploy", "args": {"version": "1"},
                                              "id": "call_1"}])
        if sum(isinstance(m, ToolMessage) for m in messages) == 1:
            return AIMessage("", tool_calls=[{"name": "deploy", "args": {"version": "6.6.6"},
                                              "id": first_id[0]}])
        return "done"

    agent = _release(sqlite_url, ran, reply)
    paused = agent.generate("ship 1")
    first_id.append(paused.pending_approvals[0].id)
    later = agent.approve_tool_call_generate(run_id=paused.run_id, decided_by="bob")
    (newer,) = later.pending_approvals
    assert (newer.tool_call_id, ran) == (first_id[0], ["1"])
    for decide in (agent.approve_tool_call_generate, agent.decline_tool_call_generate):
        with pytest.raises(ApprovalAlreadyResolvedError):
            decide(run_id=paused.run_id, tool_call_id=first_id[0], decided_by="alice")
    assert [(p.id, p.status) for p in agent.pending_approvals(run_id=paused.run_id)] == [
        (newer.id, "pending")]
    assert ran == ["1"]
