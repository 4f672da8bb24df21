"""The tools node's one-statement claim (`Ledger.start_admitted`) admits nothing the
step-by-step checks (`_why_not`) would refuse, and neither admits a decision that no gate has
verified yet (one claimed through a door that could not check the agent's policy).

Every test forges what a LangGraph client can send (a `Send` to the tools node, state writes)
against a call whose approval row is already 'approved' in the ledger, and fails if anything
runs that was not approved, for exactly those arguments, in that thread and agent.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.types import Command, Send

from graphkit import Agent
from graphkit.cli import main
from tests.helpers import agent_with, call, ledger_plan, turn

PAY = {"amount": 40, "payee": {"name": "ACME"}}


def pay_then_done(messages: list[Any]) -> Any:
    """Turn 1 asks to pay; every later turn (however many a forged task causes) is 'done'."""
    from langchain_core.messages import AIMessage

    if not any(isinstance(m, AIMessage) for m in messages):
        return turn(call("pay", PAY, "c1"))
    return "done"


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def plan_of(agent: Agent, thread_id: str) -> dict[str, Any]:
    plan: dict[str, Any] = ledger_plan(agent, thread_id)
    return plan


def task(plan_call: dict[str, Any], agent_path: Any, **changes: Any) -> dict[str, Any]:
    return {"tool_call_id": plan_call["tool_call_id"], "tool_name": plan_call["tool_name"],
            "key": plan_call["key"], "args": plan_call["args"], "metadata": {},
            "agent_path": agent_path, "options": {}, "then": "model", **changes}


def forge(agent: Agent, thread_id: str, forged: dict[str, Any]) -> None:
    agent.graph.invoke(Command(goto=Send("tools", forged)), config(thread_id))


def forge_alone(agent: Agent, thread_id: str, *forged: dict[str, Any]) -> None:
    """Forged tasks that are the whole next superstep: a state write "as the gate" first ends
    the paused gate task (else it re-runs beside them, applies the approval and runs the real
    call, and the forged tasks then only meet `executed IS NOT NULL`)."""
    agent.graph.update_state(config(thread_id), {"reports": {}}, as_node="approval_gate")
    agent.graph.invoke(Command(goto=[Send("tools", f) for f in forged]), config(thread_id))


def pay_call(agent: Agent, thread_id: str) -> dict[str, Any]:
    return next(c for c in plan_of(agent, thread_id)["calls"] if c["tool_name"] == "pay")


def test_approved_key_from_another_thread_is_refused(durable_url: str) -> None:
    """Thread A's pay is approved in the ledger (claimed, run not resumed); a client of
    thread B sends A's key with A's args and A's agent path to B's tools node."""
    agent, ran = agent_with(pay_then_done, checkpointer=durable_url)
    a = agent.generate("pay")
    b = agent.generate("pay")
    assert a.finish_reason == b.finish_reason == "suspended"
    a_call = pay_call(agent, a.thread_id)
    agent.approve_tool_call(run_id=a.run_id, decided_by="cfo")  # claimed, not yet applied
    forge(agent, b.thread_id, task(a_call, ["assistant"]))
    forge(agent, b.thread_id, task(a_call, ["assistant"], tool_call_id="c1"))
    assert ran.ran == []
    row = agent._storage.ledger.call(a_call["key"])
    assert row is not None and row.executed is None  # nobody claimed it
    # A still runs its approved call, once
    assert agent.resume(run_id=a.run_id).text == "done"
    assert ran.ran == [("pay", PAY)]


def test_odd_agent_paths_and_other_tool_or_args_on_an_approved_key(durable_url: str) -> None:
    agent, ran = agent_with(pay_then_done,
                            checkpointer=durable_url)
    a = agent.generate("pay")
    a_call = pay_call(agent, a.thread_id)
    agent.approve_tool_call(run_id=a.run_id, decided_by="cfo")
    forged = [task(a_call, ["assistant"], args={**PAY, "amount": 4000})]  # other args
    for path in (["assistant", ""], ["", "assistant"], ["assistant/"], "assistant",
                 ["assistant", "assistant"], [], None):
        forged.append(task(a_call, path, args={**PAY, "amount": 4001}))
        forged.append(task(a_call, path))  # the approved args, from another agent path
    forged.append(task(a_call, ["assistant"], tool_name="lookup", args={"key": "k"}))
    forge_alone(agent, a.thread_id, *forged)
    amounts = [args.get("amount") for name, args in ran.ran if name == "pay"]
    assert 4000 not in amounts and 4001 not in amounts
    assert ("lookup", {"key": "k"}) not in ran.ran
    assert [r for r in ran.ran if r[0] == "pay"] in ([], [("pay", PAY)])  # at most once


def test_an_edit_approves_only_the_edited_arguments(durable_url: str) -> None:
    """The call row's args_digest is the model's arguments; the approval's run_digest is the
    edit's. The model's arguments must not run on the strength of the edit."""
    agent, ran = agent_with(pay_then_done,
                            checkpointer=durable_url)
    a = agent.generate("pay")
    a_call = pay_call(agent, a.thread_id)
    edited = {**PAY, "amount": 5}
    agent.approve_tool_call(run_id=a.run_id, decided_by="cfo", args=edited)
    forge_alone(agent, a.thread_id, task(a_call, ["assistant"]))  # the planned args
    assert ("pay", PAY) not in ran.ran
    assert ran.ran in ([], [("pay", edited)])


def test_a_decided_call_runs_once_whatever_is_replayed(durable_url: str) -> None:
    agent, ran = agent_with(pay_then_done,
                            checkpointer=durable_url)
    a = agent.generate("pay")
    a_call = pay_call(agent, a.thread_id)
    agent.approve_tool_call_generate(run_id=a.run_id, decided_by="cfo")
    assert ran.ran == [("pay", PAY)]
    for _ in range(2):
        forge(agent, a.thread_id, task(a_call, ["assistant"]))
    assert ran.ran == [("pay", PAY)]


def test_a_declined_call_never_runs_by_a_forged_send(durable_url: str) -> None:
    agent, ran = agent_with(pay_then_done,
                            checkpointer=durable_url)
    a = agent.generate("pay")
    a_call = pay_call(agent, a.thread_id)
    agent.decline_tool_call(run_id=a.run_id, decided_by="cfo")
    forge_alone(agent, a.thread_id, task(a_call, ["assistant"]))
    assert ran.ran == []


def release_manager_only(decided_by: str | None, pending: Any) -> bool:
    return decided_by == "release-manager"


def test_a_decision_the_agents_policy_refuses_never_runs_via_a_forged_send(
        sqlite_url: str) -> None:
    """An inbox with a policy of its own claims an approval for someone the agent's
    `approvers` policy refuses (the CLI without the agent refuses at once); the gate
    withdraws it on its next pass. Before that pass, a client sends
    the call to the tools node: the ledger says 'approved', for exactly these arguments."""
    agent, ran = agent_with(pay_then_done,
                            checkpointer=sqlite_url, approvers=release_manager_only,
                            name="billing")
    result = agent.generate("pay")
    a_call = pay_call(agent, result.thread_id)
    from graphkit import Inbox
    from tests.helpers import lax_inbox

    (pending,) = Inbox(sqlite_url).pending()
    assert main(["approve", pending.id, "--db", sqlite_url, "--by", "intern"]) != 0
    lax_inbox(sqlite_url).approve(pending.id, decided_by="intern")
    # forge_alone: the forged task is the whole next superstep (else it races the gate's
    # re-verification, which withdraws the decision; the attack then wins about half the time)
    forge_alone(agent, result.thread_id, task(a_call, ["billing"]))
    assert ran.ran == [], "a call approved by someone the policy refuses ran"


@pytest.mark.parametrize(("storage", "segment"), [("postgres", "assistant\x00"),
                                                   ("sqlite", "assistant\ud800")])
def test_an_odd_character_in_a_forged_agent_path_is_refused_not_a_wedged_thread(
        request: pytest.FixtureRequest, storage: str, segment: str) -> None:
    """`_plain` lets any non-empty segment without '/' through to the one-statement claim; on
    PostgreSQL a NUL byte in a text parameter raises DataError inside the tools node. The
    forged task should be refused like any other, and the thread's approved call still run."""
    url = request.getfixturevalue(f"{storage}_url")
    agent, ran = agent_with(pay_then_done, checkpointer=url)
    a = agent.generate("pay")
    a_call = pay_call(agent, a.thread_id)
    agent.approve_tool_call(run_id=a.run_id, decided_by="cfo")
    errors = []
    try:
        forge(agent, a.thread_id, task(a_call, [segment], args={**PAY, "amount": 1}))
    except Exception as exc:
        errors.append(f"forged Send crashed the run: {type(exc).__name__}: {exc}")
    try:
        agent.resume(run_id=a.run_id)
    except Exception as exc:
        errors.append(f"the thread is wedged, resume fails: {type(exc).__name__}: {exc}")
    assert ("pay", {**PAY, "amount": 1}) not in ran.ran
    assert not errors, errors
    assert ran.ran == [("pay", PAY)]


def test_a_task_naming_an_earlier_calls_key_answers_nothing_for_the_pending_call(
        sqlite_url: str) -> None:
    """Turn 1's payment ran; turn 2's waits for approval. A client sends the tools node turn
    2's call id with turn 1's key: the key belongs to another call, so the tools node refuses
    (it never hands turn 1's recorded result to turn 2's call), the call still waits, and its
    approval then runs it once; the model reads its real result first, and never "did not
    run"."""
    def script(messages: list[Any]) -> Any:
        humans = sum(isinstance(m, HumanMessage) for m in messages)
        if isinstance(messages[-1], HumanMessage):
            return turn(call("pay", {**PAY, "amount": 10 * humans}, f"c{humans}"))
        return "done"

    agent, ran = agent_with(script, checkpointer=sqlite_url, name="billing")
    first = agent.generate("pay 1")
    old = plan_of(agent, first.thread_id)["calls"][0]
    agent.approve_tool_call_generate(run_id=first.run_id)
    second = agent.generate("pay 2", thread_id=first.thread_id)
    new = plan_of(agent, second.thread_id)["calls"][0]
    out = agent.graph.invoke(Command(goto=Send("tools", task(
        old, ["billing"], tool_call_id=new["tool_call_id"]))), config(second.thread_id))
    assert not [m for m in out["messages"] if isinstance(m, ToolMessage)
                and m.tool_call_id == new["tool_call_id"]]
    assert agent.approve_tool_call_generate(run_id=second.run_id).text == "done"
    assert [args["amount"] for _, args in ran.ran] == [10, 20]
    told = [m for m in agent.graph.get_state(config(second.thread_id)).values["messages"]
            if isinstance(m, ToolMessage) and m.tool_call_id == new["tool_call_id"]]
    # (the forged task's hand-back to the gate makes a second gate pass, whose replay of the
    # call that ran is discarded after the turn as a stray: it never stands for the call)
    assert told[0].content == "paid 20 to ACME"
    assert not any("did not run" in str(m.content) for m in told)


def test_a_call_marked_done_without_an_outcome_is_answered_once_from_the_ledger(
        tmp_path: Any) -> None:
    """A call the ledger marks done with no outcome (a row written by hand: none of
    graphkit's writes leaves one): its tools node answered with a refusal the ledger did not
    record, which the gate counts as no answer, and sent the call again, to the run's step
    limit (10,000 steps, each a checkpoint). The outcome, unknown, is recorded and answers
    the call; it never runs."""
    from graphkit import Inbox
    from tests.helpers import PAY, agent_with, call, turn

    url = f"sqlite:///{tmp_path / 'a.db'}"
    agent, ran = agent_with([turn(call("pay", PAY, "c1")), "done"], checkpointer=url)
    paused = agent.generate("pay")
    (asked,) = Inbox(url).pending()
    Inbox(url).approve(asked.id, decided_by="cfo")
    agent._storage.ledger._sql.execute("UPDATE graphkit_calls SET executed = 'done', "
                                       "outcome = NULL")
    result = agent.resume(run_id=paused.run_id)
    assert result.text == "done" and ran.ran == []
    (answer,) = [m for m in result.messages if m.type == "tool"]
    assert "no outcome" in answer.text
    (outcome,) = agent._storage.ledger.outcomes(
        [r[0] for r in agent._storage.ledger._sql.query("SELECT call_key FROM graphkit_calls")]
    ).values()
    assert outcome is not None and outcome["content"] == answer.text
