"""Allowed decisions per tool, as LangChain's `interrupt_on` has them: the interrupt says
exactly what a reviewer may do, and a decision of another type is refused (typed, audited,
nothing changed) at every door: the Agent API, the Inbox, the CLI, a raw `Command`."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.types import Command

from graphkit import Agent, Inbox, create_tool
from graphkit.cli import main
from graphkit.errors import DecisionNotAllowedError, GraphkitError
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, ledger_plan, turn


def _agent(url: str, ran: list[str], *, allowed: Any = ("approve", "reject", "respond"),
           agent_default: Any = None) -> Agent:
    @create_tool(needs_approval=True, allowed_decisions=allowed)
    def transfer(amount: int) -> str:
        """Move money."""
        ran.append(f"transfer {amount}")
        return f"moved {amount}"

    def reply(messages: list[Any]) -> Any:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return f"model read: {last.content}"
        return turn(call("transfer", {"amount": 500}, "t1"))

    return Agent(name="treasury", tools=[transfer], checkpointer=url,
                 model=ScriptedChatModel(reply), allowed_decisions=agent_default)


def _refusals(url: str, approval_id: str) -> list[dict[str, Any]]:
    return [e for e in Inbox(url).audit(id=approval_id) if e["event"] == "refused"]


def test_the_interrupt_lists_exactly_the_tools_allowed_decisions(sqlite_url: str) -> None:
    ran: list[str] = []
    agent = _agent(sqlite_url, ran)
    first = agent.generate("move 500")
    (pending,) = first.pending_approvals
    assert pending.allowed_decisions == ["approve", "reject", "respond"]
    snapshot = agent.graph.get_state({"configurable": {"thread_id": first.thread_id}})
    (interrupt,) = snapshot.interrupts
    assert interrupt.value["review_configs"] == [
        {"action_name": "transfer", "allowed_decisions": ["approve", "reject", "respond"]}]
    assert Inbox(sqlite_url).get(pending.id).allowed_decisions == [
        "approve", "reject", "respond"]


def test_default_and_agent_level_allowed_decisions(sqlite_url: str) -> None:
    ran: list[str] = []
    plain = _agent(sqlite_url, ran, allowed=None)
    assert plain.generate("move").pending_approvals[0].allowed_decisions == [
        "approve", "edit", "reject"]
    strict = _agent(sqlite_url, ran, allowed=None, agent_default=["approve", "reject"])
    assert strict.generate("move").pending_approvals[0].allowed_decisions == [
        "approve", "reject"]
    own = _agent(sqlite_url, ran, allowed=["reject"], agent_default=["approve", "reject"])
    assert own.generate("move").pending_approvals[0].allowed_decisions == ["reject"]


@pytest.mark.parametrize("bad", [[], ["approve", "ignore"], "approve", [1]])
def test_create_tool_refuses_unknown_allowed_decisions(bad: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        create_tool(lambda x: x, name="t", allowed_decisions=bad)


def test_an_edit_the_tool_does_not_allow_is_refused_at_every_door(sqlite_url: str) -> None:
    ran: list[str] = []
    agent = _agent(sqlite_url, ran)
    first = agent.generate("move 500")
    (pending,) = first.pending_approvals
    with pytest.raises(DecisionNotAllowedError, match="'edit' decision is not allowed"):
        agent.approve_tool_call_generate(run_id=first.run_id, args={"amount": 5},
                                         decided_by="cfo")
    with pytest.raises(DecisionNotAllowedError):
        Inbox(sqlite_url, agents=[agent]).approve(pending.id, decided_by="cfo",
                                                  args={"amount": 5})
    with pytest.raises(DecisionNotAllowedError):  # an inbox that cannot load the tool
        Inbox(sqlite_url).approve(pending.id, decided_by="cfo", args={"amount": 5})
    err = io.StringIO()
    lines: list[str] = []
    import contextlib
    with contextlib.redirect_stderr(err):
        code = main(["approve", pending.id, "--by", "cfo", "--args", '{"amount": 5}',
                     "--db", sqlite_url], out=lines.append)
    assert code == 1 and "not allowed" in err.getvalue() and not lines
    config = {"configurable": {"thread_id": first.thread_id}}
    agent.graph.invoke(Command(resume={"decisions": [
        {"type": "edit", "edited_action": {"name": "transfer", "args": {"amount": 5}}}]}),
        config)
    # nothing ran, the approval still waits, and each refusal is in the audit
    assert ran == []
    assert [p.id for p in agent.pending_approvals(run_id=first.run_id)] == [pending.id]
    assert len(_refusals(sqlite_url, pending.id)) >= 5
    assert all("DecisionNotAllowedError" in (e.get("detail") or "")
               for e in _refusals(sqlite_url, pending.id))
    # what is allowed still works
    done = agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert ran == ["transfer 500"] and done.text == "model read: moved 500"


def test_a_forged_allowed_list_in_the_state_does_not_widen_what_the_ledger_allows(
        sqlite_url: str) -> None:
    """A client writes a plan with a wider list into the graph state: the state holds no plan
    (the ledger does), the write is not taken, and the claim is bound to the list the ledger
    recorded when the call was planned."""
    ran: list[str] = []
    agent = _agent(sqlite_url, ran, allowed=["approve", "reject"])
    first = agent.generate("move 500")
    config = {"configurable": {"thread_id": first.thread_id}}
    plan = ledger_plan(agent, first.thread_id)
    plan["calls"][0]["approval"]["allowed_decisions"] = ["approve", "edit", "reject", "respond"]
    agent.graph.invoke(Command(update={"turn": plan}, goto="approval_gate"), config)
    request = agent.graph.get_state(config).interrupts[0].value
    # the interrupt shows the ledger's list, not the forged copy
    assert request["review_configs"][0]["allowed_decisions"] == ["approve", "reject"]
    assert agent.pending_approvals(run_id=first.run_id)[0].allowed_decisions == [
        "approve", "reject"]
    agent.graph.invoke(Command(resume={"decisions": [
        {"type": "respond", "message": "done already"}]}), config)
    approval_id = plan["calls"][0]["approval"]["id"]
    row = agent._storage.ledger.approval(approval_id)
    assert row is not None and row.status == "pending" and ran == []
    assert any("DecisionNotAllowedError" in (e.get("detail") or "")
               for e in _refusals(sqlite_url, approval_id))
    done = agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert ran == ["transfer 500"] and "moved 500" in done.text


def test_respond_answers_the_model_without_running_the_tool(sqlite_url: str) -> None:
    ran: list[str] = []
    agent = _agent(sqlite_url, ran)
    first = agent.generate("move 500")
    done = agent.respond_tool_call_generate(run_id=first.run_id, decided_by="cfo",
                                            message="Use the treasury desk instead.")
    assert ran == []
    assert "Use the treasury desk instead." in done.text
    events = [e["event"] for e in Inbox(sqlite_url).audit(thread_id=first.thread_id)]
    assert "responded" in events


def test_respond_through_the_inbox_cli_and_async_api(sqlite_url: str) -> None:
    ran: list[str] = []
    agent = _agent(sqlite_url, ran)
    first = agent.generate("move 500")
    (pending,) = first.pending_approvals
    decided = Inbox(sqlite_url).respond(pending.id, decided_by="cfo", message="Not today.")
    assert decided.status != "pending"
    assert "Not today." in agent.resume(run_id=first.run_id).text and ran == []

    second = agent.generate("move 500")
    lines: list[str] = []
    assert main(["respond", second.pending_approvals[0].id, "--by", "cfo", "--message",
                 "Ask again Monday.", "--db", sqlite_url], out=lines.append) == 0
    assert lines and lines[0].startswith("responded to")
    assert "Ask again Monday." in agent.resume(run_id=second.run_id).text

    async def flow() -> str:
        third = await agent.agenerate("move 500")
        done = await agent.arespond_tool_call_generate(run_id=third.run_id, decided_by="cfo",
                                                       message="Handled by phone.")
        return done.text

    assert "Handled by phone." in asyncio.run(flow())
    assert ran == []


def test_respond_is_refused_where_the_tool_does_not_allow_it(sqlite_url: str) -> None:
    ran: list[str] = []
    agent = _agent(sqlite_url, ran, allowed=None)  # approve, edit, reject
    first = agent.generate("move 500")
    (pending,) = first.pending_approvals
    with pytest.raises(DecisionNotAllowedError):
        agent.respond_tool_call_generate(run_id=first.run_id, message="it is done")
    with pytest.raises(DecisionNotAllowedError):
        Inbox(sqlite_url).respond(pending.id, decided_by="cfo", message="it is done")
    config = {"configurable": {"thread_id": first.thread_id}}
    agent.graph.invoke(Command(resume={"decisions": [
        {"type": "respond", "message": "it is done"}]}), config)
    assert [p.status for p in agent.pending_approvals(run_id=first.run_id)] == ["pending"]
    assert ran == []
    assert isinstance(DecisionNotAllowedError("x"), GraphkitError | ValueError)


def test_a_forged_approval_id_with_a_widened_list_is_never_recorded(sqlite_url: str) -> None:
    """Attack (adversary review): the state's approval gets an id the ledger does not know
    and a wider allowed list; the gate must not record it as a second, decidable approval of
    the call (its `respond` would reach the model, and the real approval would be orphaned)."""
    ran: list[str] = []
    agent = _agent(sqlite_url, ran, allowed=["approve", "reject"])
    first = agent.generate("move 500")
    (real,) = first.pending_approvals
    config = {"configurable": {"thread_id": first.thread_id}}
    plan = ledger_plan(agent, first.thread_id)
    record = plan["calls"][0]["approval"]
    record["allowed_decisions"] = ["approve", "edit", "reject", "respond"]
    record["id"] = "apr_forged0000000000"
    agent.graph.invoke(Command(update={"turn": plan}, goto="approval_gate"), config)
    assert agent._storage.ledger.approval("apr_forged0000000000") is None
    out = agent.graph.invoke(Command(resume={"decisions": [
        {"type": "respond", "message": "FORGED ANSWER"}]}), config)
    assert not any("FORGED ANSWER" in str(m.content) for m in out["messages"])
    assert ran == []
    row = agent._storage.ledger.approval(real.id)
    assert row is not None and row.status == "pending"
    assert real.id in [p.id for p in Inbox(sqlite_url).pending()]
    with pytest.raises(GraphkitError):  # the inbox's copy of the forged record decides nothing
        Inbox(sqlite_url).respond("apr_forged0000000000", decided_by="cfo", message="FORGED")
    assert agent._storage.ledger.approval("apr_forged0000000000") is None


def test_a_respond_reaches_the_model_marked_as_the_reviewers_words(sqlite_url: str) -> None:
    """A reviewer's `respond` on a side-effecting tool ("The payment succeeded") is told to the
    model as the reviewer's answer, by name, never as the tool's result; the tool did not run."""
    ran: list[str] = []
    agent = _agent(sqlite_url, ran)
    first = agent.generate("move 500")
    done = agent.respond_tool_call_generate(run_id=first.run_id, decided_by="cfo",
                                            message="The transfer of 500 succeeded.")
    (told,) = [m for m in done.messages if isinstance(m, ToolMessage)]
    assert ran == []
    assert str(told.content).startswith(
        "[Tool call 'transfer' did not run. The reviewer 'cfo' answered in its place")
    assert "not the tool's result" in str(told.content)
    assert str(told.content).endswith("The transfer of 500 succeeded.")
    # through the inbox too (another door, same gate)
    second = agent.generate("move 500 again")
    Inbox(sqlite_url).respond(second.pending_approvals[0].id, decided_by="cfo", message="Done.")
    final = agent.resume(run_id=second.run_id)
    answers = [m for m in final.messages if isinstance(m, ToolMessage)]
    assert "The reviewer 'cfo' answered in its place" in str(answers[-1].content)


def test_a_grant_is_refused_for_a_tool_that_does_not_allow_approve(sqlite_url: str) -> None:
    # a grant approves later calls as the model wrote them: on a tool whose calls must be
    # edited (or rejected), it would be recorded as live and refused at every later call
    ran: list[str] = []
    agent = _agent(sqlite_url, ran, allowed=("edit", "reject"))
    first = agent.generate("move 500")
    (pending,) = first.pending_approvals
    with pytest.raises(DecisionNotAllowedError, match="remember='thread'"):
        agent.approve_tool_call_generate(run_id=first.run_id, args={"amount": 50},
                                         decided_by="cfo", remember="thread")
    with pytest.raises(DecisionNotAllowedError, match="remember='thread'"):
        Inbox(sqlite_url, agents=[agent]).approve(pending.id, decided_by="cfo",
                                                  args={"amount": 50}, remember="thread")
    assert ran == [] and Inbox(sqlite_url).grants() == []
    assert [p.id for p in agent.pending_approvals(run_id=first.run_id)] == [pending.id]
    done = agent.approve_tool_call_generate(run_id=first.run_id, args={"amount": 50},
                                            decided_by="cfo")
    assert ran == ["transfer 50"] and done.text == "model read: moved 50"


@pytest.mark.parametrize("door", ["agent", "inbox", "inbox without the agent"])
@pytest.mark.parametrize("answer", ["", "   ", "\u200b", "\u3164", "\u2800\u200d"])
def test_a_respond_without_an_answer_is_refused_at_every_door(sqlite_url: str, door: str,
                                                              answer: str) -> None:
    """A respond with an empty answer was refused by a raw `Command` but recorded by the
    inbox (and its web page), and the model read an empty answer (helper-78), or one of
    blank characters only (helper-79): the check is the decision's, whatever door brings
    it, and reads text as a name is read."""
    ran: list[str] = []
    agent = _agent(sqlite_url, ran)
    first = agent.generate("move 500")
    (pending,) = first.pending_approvals
    with pytest.raises(GraphkitError, match="needs the answer"):
        if door == "agent":
            agent.respond_tool_call(run_id=first.run_id, message=answer, decided_by="cfo")
        else:
            inbox = Inbox(sqlite_url, agents=[agent] if door == "inbox" else ())
            inbox.respond(pending.id, decided_by="cfo", message=answer)
    assert Inbox(sqlite_url).get(pending.id).status == "pending"
    assert len(_refusals(sqlite_url, pending.id)) == 1 and ran == []
