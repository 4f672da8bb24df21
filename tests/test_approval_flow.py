"""Pre-execution approval: approve, decline, edit, one at a time or all together."""

from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command
from pydantic import BaseModel, Field

from graphkit import (
    Agent,
    ApprovalsPendingError,
    Inbox,
    InvalidApprovedArgsError,
    create_tool,
)
from graphkit.testing import ScriptedChatModel
from tests.helpers import agent_with, call, turn

PAY = {"amount": 40, "payee": {"name": "ACME"}}


def test_static_approval_pauses_before_the_tool_runs_and_approve_runs_it() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "Paid."])
    result = agent.generate("pay ACME 40")
    assert result.finish_reason == "suspended"
    assert ledger.ran == []
    assert result.suspend_payload is not None
    assert result.suspend_payload["tool_call_id"] == "c1"
    assert result.suspend_payload["tool_name"] == "pay"
    assert result.suspend_payload["args"] == PAY
    assert result.suspend_payload["prompt"] == "Pay 40 to ACME?"
    (pending,) = result.pending_approvals
    assert pending.id == result.suspend_payload["id"]
    assert pending.kind == "approval" and pending.verdict == "required"
    assert pending.metadata == {"prompt": "Pay 40 to ACME?", "defaults": {"channel": "finance"}}
    assert pending.agent_path == ["assistant"] and pending.status == "pending"
    assert pending.created_at.endswith("Z")

    final = agent.approve_tool_call_generate(run_id=result.run_id, tool_call_id="c1",
                                             decided_by="alice", comment="ok")
    assert final.finish_reason == "stop" and final.text == "Paid."
    assert ledger.ran == [("pay", PAY)]
    assert final.run_id == result.run_id and final.thread_id == result.thread_id


def test_tool_call_id_may_be_omitted_when_exactly_one_is_pending() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "Paid."])
    result = agent.generate("pay")
    assert agent.approve_tool_call_generate(run_id=result.run_id).text == "Paid."
    assert ledger.names() == ["pay"]


def test_decline_never_runs_and_tells_the_model_who_and_why() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "Understood, not paying."])
    result = agent.generate("pay")
    final = agent.decline_tool_call_generate(run_id=result.run_id, decided_by="bob",
                                             comment="not budgeted")
    assert ledger.ran == []
    assert final.finish_reason == "stop" and final.text == "Understood, not paying."
    rejection = next(m for m in final.messages if isinstance(m, ToolMessage))
    assert rejection.status == "error" and rejection.tool_call_id == "c1"
    assert "rejected" in rejection.text and "bob" in rejection.text
    assert "not budgeted" in rejection.text
    # the model's second call saw the rejection
    model_inputs = agent.model.calls  # type: ignore[attr-defined]
    assert any(isinstance(m, ToolMessage) and "rejected" in m.text for m in model_inputs[-1])


def test_every_call_needing_approval_in_a_turn_is_pending_at_once() -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 7}, "c2"),
                   call("bash", {"command": "rm -rf /srv"}, "c3")), "done"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    assert [p.tool_call_id for p in result.pending_approvals] == ["c1", "c2", "c3"]
    assert [p.verdict for p in result.pending_approvals] == ["required", "required",
                                                             "conditional"]
    state = agent.graph.get_state({"configurable": {"thread_id": result.thread_id}})
    assert len(state.interrupts) == 1  # one interrupt for the turn
    assert len(state.interrupts[0].value["approvals"]) == 3
    assert ledger.ran == []


def test_approving_one_call_runs_only_that_call() -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 7}, "c2")), "done"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    second = agent.approve_tool_call_generate(run_id=result.run_id, tool_call_id="c2")
    assert ledger.ran == [("pay", {**PAY, "amount": 7})]
    assert second.finish_reason == "suspended"
    assert [p.tool_call_id for p in second.pending_approvals] == ["c1"]
    final = agent.decline_tool_call_generate(run_id=result.run_id, tool_call_id="c1")
    assert final.finish_reason == "stop"
    assert ledger.ran == [("pay", {**PAY, "amount": 7})]


def test_edited_args_run_and_the_history_shows_the_call_as_it_ran() -> None:
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "Paid 25."])
    result = agent.generate("pay")
    edited = {"amount": 25, "payee": {"name": "ACME"}}
    final = agent.approve_tool_call_generate(run_id=result.run_id, args=edited,
                                             decided_by="carol")
    assert ledger.ran == [("pay", edited)]
    ai = next(m for m in final.messages if isinstance(m, AIMessage) and m.tool_calls)
    assert ai.tool_calls[0]["args"] == edited
    assert len([m for m in final.messages if isinstance(m, AIMessage)]) == 2


class Payee(BaseModel):
    name: str = Field(pattern=r"^\p{L}+$")  # (pydantic's regex dialect, not Python's)


class Line(BaseModel):
    sku: str
    qty: int = 1


def test_an_edit_naming_an_argument_the_tool_does_not_take_is_refused(tmp_path: Path) -> None:
    """Validation drops what a tool does not take, so an edit naming it (a misspelt `ammount`,
    a payee's `iban`) ran the call as the model wrote it while the audit said "edited"
    (helper-41). Every door refuses it, and nothing is decided."""
    ran: list[tuple[int, str]] = []

    @create_tool(needs_approval=True)
    def pay(amount: int, payee: Payee, lines: list[Line] | None = None) -> str:
        """Pay."""
        ran.append((amount, payee.name))
        return "paid"

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    agent = Agent(name="billing", tools=[pay], checkpointer=db, model=ScriptedChatModel(
        lambda m: "done" if m[-1].type == "tool" else turn(
            call("pay", {"amount": 5000, "payee": {"name": "ACME"}}, "p1"))))
    first = agent.generate("pay")
    (item,) = first.pending_approvals
    misspelt = {"amount": 5000, "ammount": 50, "payee": {"name": "ACME"}}
    nested = {"amount": 50, "payee": {"name": "ACME", "iban": "DE00"}}
    listed = {"amount": 50, "payee": {"name": "ACME"}, "lines": [{"sku": "A", "qtty": 9}]}
    for edit, named in ((misspelt, "'ammount'"), (nested, "'payee.iban'"),
                        (listed, "'lines.0.qtty'")):
        for door in (lambda e: agent.approve_tool_call_generate(run_id=first.run_id, args=e,
                                                                decided_by="cfo"),
                     lambda e: Inbox(db, agents=[agent]).approve(item.id, args=e,
                                                                 decided_by="cfo"),
                     lambda e: Inbox(db).approve(item.id, args=e, decided_by="cfo")):
            with pytest.raises(InvalidApprovedArgsError, match=f"takes no argument {named}"):
                door(edit)  # (the last by the schema recorded with the plan)
    config = {"configurable": {"thread_id": first.thread_id}}
    (interrupt,) = agent.graph.get_state(config).interrupts
    agent.graph.invoke(Command(resume={interrupt.id: {"decisions": [
        {"type": "edit", "edited_action": {"name": "pay", "args": misspelt}}]}}), config)
    (still,) = agent.graph.get_state(config).interrupts
    assert "takes no argument 'ammount'" in str(still.value["error"])
    assert [p.status for p in agent.pending_approvals(run_id=first.run_id)] == ["pending"]
    assert ran == []
    done = agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo",
                                            args={"amount": 50, "payee": {"name": "ACME"}})
    assert done.text == "done" and ran == [(50, "ACME")]


def test_resolve_records_without_running_and_resume_continues() -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 9}, "c2")), "done"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    first, second = result.pending_approvals

    recorded = agent.resolve_tool_approval(run_id=result.run_id, id=first.id, approved=True,
                                           decided_by="dana", comment="fine",
                                           approved_args={**PAY, "amount": 41})
    assert recorded.status == "approved" and recorded.decided_by == "dana"
    assert recorded.approved_args == {**PAY, "amount": 41} and recorded.decided_at
    assert ledger.ran == []
    with pytest.raises(ApprovalsPendingError):
        agent.resume(run_id=result.run_id)
    assert ledger.ran == []

    agent.resolve_tool_approval(run_id=result.run_id, id=second.id, approved=False,
                                decided_by="dana", comment="duplicate")
    statuses = {p.tool_call_id: p.status for p in agent.pending_approvals(run_id=result.run_id)}
    assert statuses == {"c1": "approved", "c2": "rejected"}
    assert ledger.ran == []

    final = agent.resume(run_id=result.run_id)
    assert final.finish_reason == "stop"
    assert ledger.ran == [("pay", {**PAY, "amount": 41})]


def test_request_level_approval_pauses_plain_and_harmless_tools() -> None:
    agent, ledger = agent_with([turn(call("lookup", {"key": "k"}, "c1")), "done"])
    result = agent.generate("go", require_tool_approval=True)
    assert result.finish_reason == "suspended" and ledger.ran == []
    assert result.pending_approvals[0].verdict == "required"
    agent.approve_tool_call_generate(run_id=result.run_id)
    assert ledger.names() == ["lookup"]

    # without the request flag the same tool runs freely
    agent2, ledger2 = agent_with([turn(call("lookup", {"key": "k"}, "c1")), "done"])
    assert agent2.generate("go").finish_reason == "stop"
    assert ledger2.names() == ["lookup"]


def test_agent_default_require_tool_approval_applies_to_later_turns_of_the_run() -> None:
    script = [turn(call("lookup", {"key": "a"}, "c1")), turn(call("lookup", {"key": "b"}, "c2")),
              "done"]
    agent, ledger = agent_with(script, require_tool_approval=True)
    result = agent.generate("go")
    second = agent.approve_tool_call_generate(run_id=result.run_id)
    assert second.finish_reason == "suspended"
    assert second.pending_approvals[0].tool_call_id == "c2"
    assert agent.approve_tool_call_generate(run_id=result.run_id).finish_reason == "stop"
    assert ledger.names() == ["lookup", "lookup"]


def test_unknown_tool_and_invalid_args_answer_the_model_without_running() -> None:
    script = [turn(call("nope", {}, "c1"), call("pay", {"amount": "lots"}, "c2")), "sorry"]
    agent, ledger = agent_with(script)
    result = agent.generate("go")
    assert result.finish_reason == "stop" and ledger.ran == []
    errors = [m for m in result.messages if isinstance(m, ToolMessage)]
    assert [m.status for m in errors] == ["error", "error"]
    assert "'nope' is not a valid tool, try one of" in errors[0].text
    assert "invalid arguments" in errors[1].text


def test_max_steps_stops_a_looping_model() -> None:
    loop = [turn(call("lookup", {"key": str(i)}, f"c{i}")) for i in range(10)]
    agent, ledger = agent_with(loop)
    result = agent.generate("go", max_steps=3)
    assert result.finish_reason == "max_steps"
    assert len(ledger.ran) == 3


def test_a_turn_whose_calls_all_may_run_goes_straight_to_the_tools() -> None:
    """No call waits on a human: the model's node sends the calls itself (one superstep and
    one checkpoint fewer); the tools node still checks each against the ledger. A turn with
    a gated call passes through the approval gate."""
    from graphkit import Agent, create_tool
    from graphkit.testing import ScriptedChatModel

    @create_tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key.upper()

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    agent = Agent(name="a", tools=[lookup, pay], model=ScriptedChatModel([
        turn(call("lookup", {"key": "a"}, "l1"), call("lookup", {"key": "b"}, "l2")), "found",
        turn(call("pay", {"amount": 5}, "p1")), "paid"]))
    config: dict[str, dict[str, str]] = {"configurable": {"thread_id": "t"}}

    def nodes(payload: dict[str, object]) -> list[str]:
        return [next(iter(update)) for update in agent.graph.stream(
            payload, config, stream_mode="updates")]

    assert nodes({"messages": [("user", "look")]}) == ["model", "tools", "tools", "model"]
    assert nodes({"messages": [("user", "pay")]}) == ["model", "__interrupt__"]  # the gate


def test_an_edit_of_a_tool_with_a_pydantic_v1_schema_names_only_its_arguments() -> None:
    """The check of an edit's names reads a schema of pydantic's v1 API too: it let a
    misspelt key through, and the call ran with the model's amount (helper-44)."""
    import warnings

    from langchain_core.tools import StructuredTool

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pydantic.v1 import BaseModel as V1Model

        class Args(V1Model):
            amount: int

    ran: list[int] = []

    def pay(amount: int) -> str:
        ran.append(amount)
        return "paid"

    tool = StructuredTool.from_function(func=pay, name="pay", description="Pay.",
                                        args_schema=Args)
    agent = Agent(name="billing", tools=[tool], require_tool_approval=True,
                  model=ScriptedChatModel(lambda m: "done" if m[-1].type == "tool" else turn(
                      call("pay", {"amount": 5000}, "p1"))))
    first = agent.generate("pay")
    with pytest.raises(InvalidApprovedArgsError, match="takes no argument 'ammount'"):
        agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo",
                                         args={"amount": 5000, "ammount": 50})
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo", args={"amount": 50})
    assert ran == [50]
