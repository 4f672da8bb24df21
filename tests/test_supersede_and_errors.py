"""A new message supersedes pending calls; refused decisions raise typed errors, change nothing."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from graphkit import (
    Agent,
    AmbiguousApprovalError,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApproverNotAllowedError,
    GraphkitError,
    InvalidApprovedArgsError,
    SnapshotNotFoundError,
    _html,
)
from graphkit.testing import ScriptedChatModel
from tests.helpers import (
    Ledger,
    agent_with,
    boss_over_billing,
    call,
    pay_then_done,
    turn,
    two_payments,
)
from tests.test_suspension import weather_agent, weather_tool

PAY = {"amount": 40, "payee": {"name": "ACME"}}


def test_new_message_supersedes_pending_calls_and_the_run_goes_on() -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", PAY, "c2")), "Sure, what else?"]
    agent, ledger = agent_with(script)
    first = agent.generate("pay twice")
    second = agent.generate("actually, forget it", thread_id=first.thread_id)
    assert ledger.ran == []
    assert second.finish_reason == "stop" and second.text == "Sure, what else?"
    kinds = [type(m).__name__ for m in second.messages]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "ToolMessage", "HumanMessage",
                     "AIMessage"]
    for message in second.messages[2:4]:
        assert isinstance(message, ToolMessage) and message.status == "error"
        assert "superseded" in message.text
    # the history stays valid: every tool call has its answer before the next user message
    with pytest.raises(ApprovalAlreadyResolvedError, match="superseded"):
        agent.approve_tool_call(run_id=first.run_id, tool_call_id="c1")


@pytest.mark.parametrize("then", ["resume", "decide in the inbox"])
def test_a_superseding_message_holds_when_its_run_stops_before_the_gate(
        sqlite_url: str, then: str) -> None:
    """The new message's run stops at its first step, before the gate read the message
    (`on_state_change` on what waits, as a process dying there would). What the message does
    is in the ledger already: the call it superseded cannot be approved any more, and the
    next resume delivers the message. Before, it travelled only in that run's resume value:
    the message was lost, and the call stayed approvable (helper-16)."""
    from graphkit import Inbox

    script = [turn(call("pay", PAY, "c1")), "Sure, I will not pay.", "(unused)"]
    agent, ledger = agent_with(script, checkpointer=sqlite_url)
    first = agent.generate("pay ACME")
    (item,) = Inbox(sqlite_url).pending()
    second = agent.generate("no, do not pay", thread_id=first.thread_id,
                            on_state_change=lambda state: state.awaiting_approval)
    assert second.finish_reason == "checkpoint"
    assert Inbox(sqlite_url).pending() == []
    if then == "decide in the inbox":
        with pytest.raises(ApprovalAlreadyResolvedError, match="superseded"):
            Inbox(sqlite_url).approve(item.id, decided_by="ops")
    done = agent.resume(run_id=second.run_id)
    assert ledger.ran == []
    assert done.finish_reason == "stop" and done.text == "Sure, I will not pay."
    said = [(type(m).__name__, m.text) for m in done.messages]
    assert said[2][0] == "ToolMessage" and "superseded" in said[2][1]
    assert said[3:] == [("HumanMessage", "no, do not pay"),
                        ("AIMessage", "Sure, I will not pay.")]


@pytest.mark.parametrize("waits", ["approval", "suspension read by auto-resume"])
@pytest.mark.parametrize("given", ["system message", "user and AI messages", "empty", "blank",
                                   "an id the conversation holds", "one id twice"])
def test_a_new_input_that_could_not_join_the_conversation_is_refused_and_changes_nothing(
        sqlite_url: str, waits: str, given: str) -> None:
    """While calls wait, a new input is queued to join the conversation once the turn is
    over, by its id, and only the user's messages are delivered from there. Anything else was
    queued for good, and a message reusing an id answered a suspended tool without ever being
    shown (helper-23): each is refused, with nothing declined, queued or run."""
    from langchain_core.messages import SystemMessage

    from tests.test_suspension import weather_agent

    log: list[str] = []
    if waits == "approval":
        agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "ok"], checkpointer=sqlite_url)
        first = agent.generate(HumanMessage("pay ACME", id="h1"))
    else:
        agent = weather_agent(log, auto_resume_suspended_tools=True, checkpointer=sqlite_url)
        first = agent.generate(HumanMessage("weather?", id="h1"))
    before = agent.snapshot(run_id=first.run_id)
    message: Any = {
        "system message": SystemMessage("be terse"),
        "user and AI messages": [HumanMessage("Paris"), AIMessage("noted")],
        "empty": HumanMessage(""),
        "blank": HumanMessage("  \n"),
        "an id the conversation holds": HumanMessage("Paris", id="h1"),
        "one id twice": [HumanMessage("hmm", id="d"), HumanMessage("Paris", id="d")],
    }[given]
    with pytest.raises(GraphkitError, match=r"while tool calls wait|in the conversation"):
        agent.generate(message, thread_id=first.thread_id)
    after = agent.snapshot(run_id=first.run_id)
    assert after["checkpoint_id"] == before["checkpoint_id"]
    assert after["pending_approvals"] == before["pending_approvals"]
    assert agent._storage.ledger.queue_of(first.thread_id, agent.name) == []
    assert log == (["started"] if waits != "approval" else [])
    if waits == "approval":
        assert ledger.ran == []


def test_a_new_message_reusing_the_id_of_a_queued_one_is_refused_and_changes_nothing(
        sqlite_url: str) -> None:
    """'Rome' (unreadable: the weather tool asks again) waits in the queue under its id; a
    message reusing that id would answer the tool, and the queue, which keeps one message per
    id, would keep 'Rome' and drop it: acted on, never shown (helper-24). Refused."""
    from tests.test_suspension import weather_agent

    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True, checkpointer=sqlite_url)
    first = agent.generate("weather?")
    agent.generate(HumanMessage("Rome", id="m1"), thread_id=first.thread_id)
    before = agent.snapshot(run_id=first.run_id)
    with pytest.raises(GraphkitError, match="queued to join"):
        agent.generate(HumanMessage("Tokyo", id="m1"), thread_id=first.thread_id)
    assert agent.snapshot(run_id=first.run_id)["checkpoint_id"] == before["checkpoint_id"]
    assert log == ["started"]
    queued = agent._storage.ledger.queue_of(first.thread_id, "wx")
    assert [m["data"]["content"] for _, m in queued] == ["Rome"]
    done = agent.generate("Tokyo", thread_id=first.thread_id)
    assert log == ["started", "started", "fetched Tokyo"]
    assert [m.text for m in done.messages if isinstance(m, HumanMessage)] == [
        "weather?", "Rome", "Tokyo"]


@pytest.mark.parametrize("again", ["the same message (a retry)", "another message"])
def test_a_message_under_an_id_the_conversation_holds_is_refused_and_changes_nothing(
        sqlite_url: str, again: str) -> None:
    """The thread is idle: 'Paris' was taken (the weather call ran with it) and answered. A
    message under its id would replace it, LangGraph's reducer keeping one message per id:
    another would rewrite what the tool acted on, and a retry would run the model again. Two
    API calls racing with one id did both (helper-25). Refused."""
    from tests.test_suspension import weather_agent

    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True, checkpointer=sqlite_url)
    first = agent.generate("weather?")
    done = agent.generate(HumanMessage("Paris", id="m1"), thread_id=first.thread_id)
    before = agent.snapshot(run_id=done.run_id)
    text = "Paris" if again.startswith("the same") else "Tokyo"
    with pytest.raises(GraphkitError, match="in the conversation already"):
        agent.generate(HumanMessage(text, id="m1"), thread_id=first.thread_id)
    after = agent.snapshot(run_id=done.run_id)
    assert after["checkpoint_id"] == before["checkpoint_id"]
    assert after["messages"] == before["messages"]
    assert [m.text for m in agent.generate(thread_id=first.thread_id).messages] == [
        m.text for m in done.messages]  # (nothing new to do: nothing changed)
    assert log == ["started", "started", "fetched Paris"]


def test_a_message_saying_approved_never_approves() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "ok"])
    first = agent.generate("pay")
    agent.generate("approved, go ahead", thread_id=first.thread_id)
    assert ledger.ran == []


def test_errors_name_what_was_given_and_change_nothing() -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 2}, "c2")), "done"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    run_id = result.run_id
    before = agent.snapshot(run_id=run_id)

    with pytest.raises(AmbiguousApprovalError) as ambiguous:
        agent.approve_tool_call(run_id=run_id)
    assert ambiguous.value.pending_ids == ["c1", "c2"]
    assert "c1" in str(ambiguous.value) and "c2" in str(ambiguous.value)

    with pytest.raises(ApprovalNotFoundError, match="'nope'"):
        agent.approve_tool_call(run_id=run_id, tool_call_id="nope")

    with pytest.raises(InvalidApprovedArgsError, match="amount"):
        agent.approve_tool_call(run_id=run_id, tool_call_id="c1", args={"amount": "many"})

    with pytest.raises(SnapshotNotFoundError, match="snapshot not found"):
        agent.approve_tool_call(run_id="no-such-run")

    with pytest.raises(ApprovalNotFoundError):
        agent.resolve_tool_approval(run_id=run_id, id="apr_unknown", approved=True)

    after = agent.snapshot(run_id=run_id)
    assert after["pending_approvals"] == before["pending_approvals"]
    assert after["checkpoint_id"] == before["checkpoint_id"]
    assert ledger.ran == []

    agent.decline_tool_call_generate(run_id=run_id, tool_call_id="c1")
    with pytest.raises(ApprovalAlreadyResolvedError):
        agent.approve_tool_call(run_id=run_id, tool_call_id="c1")
    # still decidable after all the refusals
    assert agent.approve_tool_call_generate(run_id=run_id, tool_call_id="c2").text == "done"
    assert ledger.ran == [("pay", {**PAY, "amount": 2})]


def test_starting_a_thread_needs_a_message() -> None:
    agent, _ = agent_with(["hi"])
    with pytest.raises(GraphkitError, match="pass a message"):
        agent.generate()
    first = agent.generate("hello")
    assert agent.generate(thread_id=first.thread_id).text == "hi"  # nothing new to do


@pytest.mark.parametrize("message", [[42], [{"role": "wizard", "content": "hi"}],
                                     [{"content": "no role"}], [("user",)]])
def test_a_message_langchain_cannot_read_gets_a_typed_error_and_changes_nothing(
        message: Any) -> None:
    """LangChain's own errors (NotImplementedError, ValueError, ...) reached the caller
    (helper-108 L3)."""
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "done"])
    result = agent.generate("go")
    with pytest.raises(GraphkitError, match="a message is text"):
        agent.generate(message, thread_id=result.thread_id)
    assert [p.status for p in agent.pending_approvals(run_id=result.run_id)] == ["pending"]
    assert agent.approve_tool_call_generate(run_id=result.run_id).text == "done"
    assert ledger.ran == [("pay", PAY)]


def test_resolve_twice_is_refused() -> None:
    agent, _ = agent_with([turn(call("pay", PAY, "c1"), call("pay", PAY, "c2")), "done"])
    result = agent.generate("go")
    approval = result.pending_approvals[0]
    agent.resolve_tool_approval(run_id=result.run_id, id=approval.id, approved=True)
    with pytest.raises(ApprovalAlreadyResolvedError):
        agent.resolve_tool_approval(run_id=result.run_id, id=approval.id, approved=False)


def test_deciding_a_runs_one_call_again_says_it_was_decided() -> None:
    """The run's one call was approved and ran; a second approve (or the loser of two at
    once, which read after the winner's run ended: helper-133) was told "no pending
    approvals", as if the run never had one. Told as a named decision is: already decided."""
    agent, ledger = agent_with(pay_then_done)
    result = agent.generate("pay")
    agent.approve_tool_call_generate(run_id=result.run_id)
    for again in (agent.approve_tool_call_generate, agent.decline_tool_call):
        with pytest.raises(ApprovalAlreadyResolvedError, match="was already approved"):
            again(run_id=result.run_id)
    assert ledger.ran == [("pay", PAY)]
    # a subagent's call, a tool's request for input
    paid: list[int] = []
    boss = boss_over_billing("memory", paid)
    result = boss.generate("go")
    boss.approve_tool_call_generate(run_id=result.run_id)
    with pytest.raises(ApprovalAlreadyResolvedError, match="'p1'"):
        boss.approve_tool_call_generate(run_id=result.run_id)
    log: list[str] = []
    agent = weather_agent(log)
    result = agent.generate("weather?")
    agent.resume_generate({"city": "Oslo"}, run_id=result.run_id)
    with pytest.raises(ApprovalAlreadyResolvedError, match="'w1'"):
        agent.resume_generate({"city": "Rome"}, run_id=result.run_id)
    assert paid == [7] and log == ["started", "started", "fetched Oslo"]
    # what still waits, beside the call decided, is what the error points to
    ledger = Ledger()
    agent = Agent(name="wx", tools=[weather_tool([]), *ledger.tools], model=ScriptedChatModel(
        [turn(call("weather", {}, "w1"), call("pay", PAY, "p1")), "done"]))
    result = agent.generate("weather, and pay")
    agent.approve_tool_call_generate(run_id=result.run_id, tool_call_id="p1")
    with pytest.raises(ApprovalNotFoundError, match=r"'weather' is suspended.*resume it"):
        agent.approve_tool_call(run_id=result.run_id)
    # two calls decided: which one a second approve meant is not known
    agent, _ = agent_with(two_payments)
    result = agent.generate("pay")
    agent.approve_tool_call(run_id=result.run_id, tool_call_id="c1").result()
    agent.approve_tool_call_generate(run_id=result.run_id, tool_call_id="c2")
    with pytest.raises(ApprovalNotFoundError, match="has no pending approvals"):
        agent.approve_tool_call(run_id=result.run_id)


def test_a_decision_with_no_name_says_no_name() -> None:
    """An anonymous decision, or one graphkit took (a new message superseded the call), names
    nobody: the refusal of a second decision says what was decided and why, and never calls
    the decider "nobody in particular"."""
    agent, _ = agent_with([turn(call("pay", PAY, "c1"), call("pay", PAY, "c2")), "done", "ok"])
    first = agent.generate("go")
    card = _html.card(dataclasses.replace(first.pending_approvals[0], status="rejected",
                                          comment="superseded by a new user message"))
    assert "no named reviewer — superseded by a new user message" in card
    agent.approve_tool_call(run_id=first.run_id, tool_call_id="c1")
    with pytest.raises(ApprovalAlreadyResolvedError) as anonymous:
        agent.decline_tool_call(run_id=first.run_id, tool_call_id="c1")
    assert "was already approved; a decision is final" in str(anonymous.value)
    agent.generate("forget it", thread_id=first.thread_id)
    with pytest.raises(ApprovalAlreadyResolvedError) as superseded:
        agent.approve_tool_call(run_id=first.run_id, tool_call_id="c2")
    assert "was already rejected (superseded" in str(superseded.value)
    assert "nobody" not in str(anonymous.value) + str(superseded.value)


def test_approvers_policy_refuses_and_the_approval_stays_pending() -> None:
    def only_finance(who: str | None, pending: object) -> bool:
        return who == "finance-lead"

    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "done"], approvers=only_finance)
    result = agent.generate("go")
    with pytest.raises(ApproverNotAllowedError) as refused:
        agent.approve_tool_call(run_id=result.run_id, decided_by="intern")
    assert isinstance(refused.value, PermissionError)
    assert agent.pending_approvals(run_id=result.run_id)[0].status == "pending"
    assert agent.approve_tool_call_generate(run_id=result.run_id,
                                            decided_by="finance-lead").text == "done"
    assert ledger.names() == ["pay"]


def test_error_tree() -> None:
    from graphkit.errors import ArgsDigestMismatchError

    assert issubclass(ArgsDigestMismatchError, InvalidApprovedArgsError)
    for error in (SnapshotNotFoundError, ApprovalNotFoundError, AmbiguousApprovalError,
                  ApprovalAlreadyResolvedError, InvalidApprovedArgsError,
                  ApproverNotAllowedError):
        assert issubclass(error, GraphkitError)


def test_raw_graph_resume_with_a_bad_decision_keeps_the_call_pending() -> None:
    from langgraph.types import Command

    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "done"])
    result = agent.generate("go")
    config = {"configurable": {"thread_id": result.thread_id}}
    agent.graph.invoke(Command(resume={"decisions": [{"type": "aprove"}]}), config)
    state = agent.graph.get_state(config)
    (interrupt,) = state.interrupts
    assert "aprove" in interrupt.value["error"]
    assert interrupt.value["approvals"][0]["status"] == "pending"
    assert ledger.ran == []
    agent.graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    assert ledger.names() == ["pay"]
    messages = agent.graph.get_state(config).values["messages"]
    assert isinstance(messages[-1], AIMessage) and isinstance(messages[0], HumanMessage)


def _two_deploys(url: str, ran: list[str]) -> Agent:
    from graphkit import create_tool

    @create_tool(needs_approval=True)
    def deploy(version: str) -> str:
        """Deploy."""
        ran.append(version)
        return f"deployed {version}"

    def reply(messages: list[Any]) -> Any:
        last = messages[-1]
        if isinstance(last, HumanMessage) and "also" in str(last.content):
            return f"noted: {last.content}"
        if isinstance(last, ToolMessage):
            return "deploys settled"
        return AIMessage("", tool_calls=[
            {"name": "deploy", "args": {"version": "1.0"}, "id": "d1"},
            {"name": "deploy", "args": {"version": "2.0"}, "id": "d2"}])

    return Agent(name="rel", tools=[deploy], checkpointer=url, model=ScriptedChatModel(reply))


@pytest.mark.parametrize("door", ["inbox", "cli", "resolve"])
def test_a_message_after_a_recorded_decision_reaches_the_conversation(
        sqlite_url: str, door: str) -> None:
    """A decision recorded (inbox, CLI, resolve_tool_approval) before the run continued, then
    a new message: the recorded approval still runs (it came first), what still waited is
    superseded, and the message reaches the conversation after the turn, once."""
    from graphkit import Inbox
    from graphkit.cli import main

    ran: list[str] = []
    agent = _two_deploys(sqlite_url, ran)
    first = agent.generate("ship both")
    one = next(p for p in first.pending_approvals if p.tool_call_id == "d1")
    if door == "inbox":
        Inbox(sqlite_url).approve(one.id, decided_by="ops")
    elif door == "cli":
        assert main(["approve", one.id, "--by", "ops", "--db", sqlite_url],
                    out=lambda _: None) == 0
    else:
        agent.resolve_tool_approval(run_id=first.run_id, id=one.id, approved=True,
                                    decided_by="ops")
    second = agent.generate("also tell the team", thread_id=first.thread_id)
    assert second.finish_reason == "stop" and ran == ["1.0"]
    said = [m.content for m in second.messages if isinstance(m, HumanMessage)]
    assert said == ["ship both", "also tell the team"]
    results = {m.tool_call_id: m for m in second.messages if isinstance(m, ToolMessage)}
    assert results["d1"].content == "deployed 1.0"
    assert results["d2"].status == "error" and "superseded" in str(results["d2"].content)
    assert second.text == "noted: also tell the team"


@pytest.mark.parametrize("approved", ["false", "no", 1, 0, None])
def test_a_yes_or_no_given_as_anything_but_a_bool_decides_nothing(approved: Any) -> None:
    """`resolve_tool_approval(approved="false")` (a form's or a JSON field's text) approved
    the payment, the string being truthy; a run option given so turned auto-resume on. Each
    is refused with a typed error, nothing decided, nothing run."""
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "done"])
    result = agent.generate("go")
    (approval,) = result.pending_approvals
    with pytest.raises(GraphkitError, match="approved must be True or False"):
        agent.resolve_tool_approval(run_id=result.run_id, id=approval.id, approved=approved)
    assert [p.status for p in agent.pending_approvals(run_id=result.run_id)] == ["pending"]
    for option in ("require_tool_approval", "auto_resume_suspended_tools"):
        if approved is None:
            continue  # (left out: the agent's own setting)
        with pytest.raises(GraphkitError, match=f"{option} must be True, False or None"):
            agent.generate("again", thread_id=result.thread_id, **{option: approved})
    with pytest.raises(ValueError, match="max_steps must be a whole number"):
        agent.generate("again", thread_id=result.thread_id, max_steps=str(approved))
    assert [p.status for p in agent.pending_approvals(run_id=result.run_id)] == ["pending"]
    assert ledger.ran == []
    assert agent.approve_tool_call_generate(run_id=result.run_id).text == "done"
