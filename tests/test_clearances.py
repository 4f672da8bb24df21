"""Clearances (`graphkit_cleared`): the tools node admits a gated call only once an approval
gate verified its decision, and runs exactly the arguments it verified.

Each attack fails its test when it gets through (something runs that was not approved, by
someone the policy admits, for exactly those arguments, in that thread and agent).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command, Send

from graphkit import Agent, Inbox, ToolContext, create_tool
from graphkit.cli import main
from graphkit.errors import GraphkitError, InvalidApprovedArgsError
from graphkit.testing import ScriptedChatModel
from tests.helpers import (
    PAY,
    agent_with,
    call,
    cfo_only,
    config,
    lax_inbox,
    ledger_plan,
    pay_call,
    pay_then_done,
    plan_of,
    task,
    turn,
)


def forge_alone(agent: Agent, thread_id: str, *forged: dict[str, Any]) -> None:
    agent.graph.update_state(config(thread_id), {"reports": {}}, as_node="approval_gate")
    agent.graph.invoke(Command(goto=[Send("tools", f) for f in forged]), config(thread_id))


def write_plan(agent: Agent, thread_id: str, plan: dict[str, Any]) -> None:
    """A client writes the plan, then lets the gate pause on it again (a report for no call
    makes the gate's first pass persist the plan and pause on the next, from a checkpoint)."""
    agent.graph.update_state(config(thread_id), {"turn": plan, "reports": {"none": {}}},
                             as_node="approval_gate")
    agent.graph.invoke(Command(goto="approval_gate"), config(thread_id))


def cfo_for_pay(decided_by: str | None, pending: Any) -> bool:
    """Only the CFO may decide payments; interns may decide anything else."""
    if pending.tool_name == "pay":
        return decided_by == "cfo"
    return decided_by in ("cfo", "intern")


def cleared(agent: Agent, approval_id: str) -> str | None:
    rows = agent._storage.ledger._sql.query(
        "SELECT run_digest FROM graphkit_cleared WHERE approval_id = ?", (approval_id,))
    return rows[0][0] if rows else None


# ------------------------------------------------------------------ A1: the gate's verify reads
# the policy's inputs (tool name, agent path, kind) from the client-writable state record


def test_policy_refused_claim_passes_verify_with_a_forged_tool_name_cli(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_for_pay,
                            name="billing")
    result = agent.generate("pay")
    thread = result.thread_id
    (pending,) = Inbox(sqlite_url).pending()
    # the CLI without the agent cannot run its policy: it refuses at once
    assert main(["approve", pending.id, "--db", sqlite_url, "--by", "intern"]) != 0
    # an inbox with a policy of its own claims the payment for the intern
    lax_inbox(sqlite_url).approve(pending.id, decided_by="intern")
    # a client rewrites the waiting record's tool name (the call itself stays `pay`)
    plan = plan_of(agent, thread)
    pay_call(plan)["approval"]["tool_name"] = "bash"
    write_plan(agent, thread, plan)
    with contextlib.suppress(Exception):
        agent.resume(run_id=result.run_id)
    assert ran.ran == [], f"a payment approved only by the intern ran: {ran.ran}"


def test_policy_refused_raw_resume_passes_with_a_forged_tool_name() -> None:
    agent, ran = agent_with(pay_then_done, approvers=cfo_for_pay, name="billing")
    result = agent.generate("pay")
    thread = result.thread_id
    plan = plan_of(agent, thread)
    pay_call(plan)["approval"]["tool_name"] = "bash"
    write_plan(agent, thread, plan)
    agent.graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}),
                       config(thread, "intern"))
    assert ran.ran == [], f"a payment approved only by the intern ran: {ran.ran}"


def test_control_the_same_claim_without_the_forgery_is_withdrawn(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_for_pay,
                            name="billing")
    result = agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    lax_inbox(sqlite_url).approve(pending.id, decided_by="intern")
    agent.resume(run_id=result.run_id)
    assert ran.ran == []
    assert Inbox(sqlite_url).get(pending.id).status == "pending"
    assert cleared(agent, pending.id) is None


# ------------------------------------------------------------------ A2: a clearance outlives
# the decision it was for (the gate reopens a cleared approval; ON CONFLICT DO NOTHING keeps
# the first digest)

EDIT = {**PAY, "amount": 5}


def cleared_then_reopened(agent: Agent, sqlite_url: str) -> tuple[Any, dict[str, Any]]:
    """The CFO approves; the gate verifies and clears it (the run stops before `tools`, as a
    client may ask with interrupt_before); then a client puts the record back to pending with
    a digest that fails verification, so the gate reopens the approval. Returns the run and
    the original record."""
    result = agent.generate("pay")
    thread = result.thread_id
    (pending,) = Inbox(sqlite_url).pending()
    lax_inbox(sqlite_url).approve(pending.id, decided_by="cfo")
    agent.graph.invoke(Command(resume={}), config(thread), interrupt_before=["tools"])
    assert cleared(agent, pending.id) is not None
    plan = plan_of(agent, thread)
    record = pay_call(plan)["approval"]
    original = copy.deepcopy(record)
    assert record["status"] == "approved"
    record.update(status="pending", decided_by=None, comment=None, decided_at=None,
                  args_digest="0" * 64)
    write_plan(agent, thread, plan)  # the state holds no plan: the write is not taken
    assert agent._storage.ledger.approval(pending.id).status == "approved"
    return result, original


def test_a_cleared_then_reopened_approval_runs_on_a_refused_claim(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_for_pay,
                            name="billing")
    result, original = cleared_then_reopened(agent, sqlite_url)
    (ai,) = [c for c in agent.graph.get_state(config(result.thread_id)).values["messages"]
             if getattr(c, "tool_calls", None)]
    plan = ledger_plan(agent, result.thread_id, ai_message_id=str(ai.id))
    # the client's Command moved the approved call on: it ran, as the CFO approved it
    assert ran.ran == [("pay", PAY)]
    assert cleared(agent, original["id"]) == original["args_digest"]
    # the intern cannot claim the approval (it is the CFO's, decided)
    assert main(["approve", original["id"], "--db", sqlite_url, "--by", "intern"]) != 0
    forge_alone(agent, result.thread_id, task(pay_call(plan), ["billing"]))
    forge_alone(agent, result.thread_id, task(pay_call(plan), ["billing"]))
    assert ran.ran == [("pay", PAY)], f"the CFO's approval runs once: {ran.ran}"


def test_a_cleared_then_reopened_approval_edited_by_the_cfo(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_for_pay,
                            name="billing")
    result, original = cleared_then_reopened(agent, sqlite_url)
    # the decision stood and ran; a later edit is refused, and nothing else runs
    with pytest.raises(GraphkitError):
        agent.approve_tool_call_generate(run_id=result.run_id, decided_by="cfo", args=EDIT)
    key = original["call_key"]
    forge_alone(agent, result.thread_id, task({"tool_call_id": "c1", "tool_name": "pay",
                                               "key": key, "args": EDIT}, ["billing"]))
    assert ran.ran == [("pay", PAY)]


def test_a_crash_after_the_clear_then_a_stricter_policy_leaves_a_stale_clearance(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No client write at all: the gate clears the CFO's approval and dies before its
    checkpoint (here: right after its ledger write); the agent is redeployed with a policy
    that no longer admits the CFO, whose decision the gate then withdraws. The CEO edits the
    payment."""
    from graphkit._journal import GateJournal

    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_for_pay,
                            name="billing")
    result = agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    lax_inbox(sqlite_url).approve(pending.id, decided_by="cfo")
    real_sync = GateJournal.sync

    def crash(self: Any, *args: Any, **kwargs: Any) -> None:
        real_sync(self, *args, **kwargs)
        raise RuntimeError("process died after the gate's clear, before its checkpoint")

    monkeypatch.setattr(GateJournal, "sync", crash)
    with pytest.raises(RuntimeError, match="process died"):
        agent.resume(run_id=result.run_id)
    monkeypatch.setattr(GateJournal, "sync", real_sync)
    assert ran.ran == [] and cleared(agent, pending.id) is not None

    def ceo_only(decided_by: str | None, pending: Any) -> bool:
        return decided_by == "ceo"

    agent2, _ = agent_with(pay_then_done, ran, checkpointer=sqlite_url, approvers=ceo_only,
                           name="billing")
    # The CFO's decision was verified and cleared under the policy of its time, and the
    # ledger's plan says so: "approved" means it runs (once), a later policy withdraws nothing.
    plan = plan_of(agent2, result.thread_id)
    assert pay_call(plan)["approval"]["status"] == "approved"
    agent2.resume(run_id=result.run_id)
    with pytest.raises(GraphkitError):
        agent2.approve_tool_call_generate(run_id=result.run_id, decided_by="ceo", args=EDIT)
    forge_alone(agent2, result.thread_id, task(pay_call(plan), ["billing"], args=EDIT))
    assert ran.ran == [("pay", PAY)]


def test_a_pass_that_fails_as_it_writes_clears_nothing_and_plans_nothing(
        durable_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's pass writes its clearance, its plan of the turn and what its run waits on
    as one (one statement on PostgreSQL, one transaction on SQLite): a pass that fails in the
    last of them leaves no clearance (which the tools node admits a gated call on) and the
    plan as it was, and the next resume applies the decision from the start."""
    from graphkit._ledger import Ledger

    agent, ran = agent_with(pay_then_done, checkpointer=durable_url, name="billing")
    result = agent.generate("pay")
    inbox = Inbox(agent._storage)
    (pending,) = inbox.pending()
    inbox.approve(pending.id, decided_by="cfo")
    real_marks = Ledger._marks

    def broken(*args: Any, **kwargs: Any) -> list[Any]:
        return [*real_marks(*args, **kwargs), ("UPDATE graphkit_no_such_table SET x = 1", ())]

    monkeypatch.setattr(Ledger, "_marks", staticmethod(broken))
    with pytest.raises(Exception, match="graphkit_no_such_table"):
        agent.resume(run_id=result.run_id)
    assert cleared(agent, pending.id) is None
    assert pay_call(plan_of(agent, result.thread_id))["approval"]["status"] == "pending"
    assert ran.ran == []
    monkeypatch.setattr(Ledger, "_marks", staticmethod(real_marks))
    assert agent.resume(run_id=result.run_id).finish_reason == "stop"
    assert ran.ran == [("pay", PAY)] and cleared(agent, pending.id) is not None


# ------------------------------------------------------------------ suspensions


def checkout_agent(seen: list[Any], url: str, **kwargs: Any) -> Agent:
    @create_tool
    def checkout(amount: int, ctx: ToolContext) -> str:
        """Charge, then ask where to ship."""
        seen.append(ctx.resume_data)
        if ctx.resume_data is None:
            return str(ctx.suspend({"message": "ship where?"}))
        return f"shipped to {ctx.resume_data}"

    def reply(messages: list[Any]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("checkout", {"amount": 5}, "k1"))
        return "done"

    return Agent(name="shop", tools=[checkout], model=ScriptedChatModel(reply),
                 checkpointer=url, **kwargs)




def test_a_suspension_answered_by_a_refused_reviewer_never_reaches_the_tool(
        sqlite_url: str) -> None:
    seen: list[Any] = []
    agent = checkout_agent(seen, sqlite_url, approvers=cfo_only)
    result = agent.generate("buy")
    assert result.finish_reason == "suspended" and seen == [None]
    (pending,) = Inbox(sqlite_url).pending()
    lax_inbox(sqlite_url).resume(pending.id, "Moscow", decided_by="intern")  # no policy here
    plan = plan_of(agent, result.thread_id)
    (c,) = plan["calls"]
    forge_alone(agent, result.thread_id, task(c, ["shop"]))
    assert "Moscow" not in seen, f"unverified resume data reached the tool: {seen}"


def test_a_cleared_then_reopened_suspension_feeds_a_refused_answer(sqlite_url: str) -> None:
    seen: list[Any] = []
    agent = checkout_agent(seen, sqlite_url, approvers=cfo_only)
    result = agent.generate("buy")
    thread = result.thread_id
    (pending,) = Inbox(sqlite_url).pending()
    lax_inbox(sqlite_url).resume(pending.id, "Berlin", decided_by="cfo")
    suspended = copy.deepcopy(plan_of(agent, thread)["calls"][0]["suspension"])
    agent.graph.invoke(Command(resume={}), config(thread), interrupt_before=["tools"])
    assert cleared(agent, pending.id) is not None and seen == [None]
    # a client puts the suspension back, with a digest that fails verification: reopened
    plan = plan_of(agent, thread)
    planned = copy.deepcopy(plan["calls"][0])
    plan["calls"][0]["suspension"] = {**suspended, "args_digest": "0" * 64}
    plan["calls"][0]["resume_values"] = []
    write_plan(agent, thread, plan)  # not taken: the state holds no plan (the call ran on)
    assert agent._storage.ledger.approval(pending.id).status != "pending"
    with pytest.raises(GraphkitError):  # decided already, and refused by policy anyway
        lax_inbox(sqlite_url).resume(pending.id, "Moscow", decided_by="intern")
    forge_alone(agent, thread, task(planned, ["shop"]))
    assert "Moscow" not in seen, f"the intern's resume data reached the tool: {seen}"
    assert seen == [None, "Berlin"]


def test_a_forged_suspension_kind_lets_an_anonymous_answer_approve_a_payment() -> None:
    """The Agent API may answer a suspension without naming anyone; a client turns the
    payment's approval record into a 'suspension' in state; the in-process answer approves it
    (kind is read from the state record, not the ledger row)."""
    agent, ran = agent_with(pay_then_done, approvers=cfo_only, name="billing")
    result = agent.generate("pay")
    thread = result.thread_id
    plan = plan_of(agent, thread)
    pay_call(plan)["approval"]["kind"] = "suspension"
    write_plan(agent, thread, plan)
    with contextlib.suppress(Exception):
        agent.resume_generate({"city": "Oslo"}, run_id=result.run_id)
    assert ran.ran == [], f"a payment ran without the CFO: {ran.ran}"


# ------------------------------------------------------------------ other attacks


def test_a_cleared_approval_of_thread_a_runs_nothing_in_thread_b(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_only,
                            name="billing")
    a = agent.generate("pay")
    b = agent.generate("pay")
    agent.resolve_tool_approval(run_id=a.run_id, id=a.pending_approvals[0].id, approved=True,
                                decided_by="cfo")
    agent.graph.invoke(Command(resume={}), config(a.thread_id), interrupt_before=["tools"])
    a_plan = plan_of(agent, a.thread_id)
    assert cleared(agent, pay_call(a_plan)["approval"]["id"]) is not None
    b_plan = plan_of(agent, b.thread_id)
    # B sends A's call (A's key, args, path) to its tools node
    forge_alone(agent, b.thread_id, task(pay_call(a_plan), ["billing"]))
    # B's plan holds A's (approved, cleared) record and key for its own call
    pay_call(b_plan)["approval"] = copy.deepcopy(pay_call(a_plan)["approval"])
    pay_call(b_plan)["key"] = pay_call(a_plan)["key"]
    agent.graph.update_state(config(b.thread_id), {"turn": b_plan}, as_node="approval_gate")
    agent.graph.invoke(Command(goto="approval_gate"), config(b.thread_id))
    assert ran.ran == [], ran.ran
    agent.graph.invoke(None, config(a.thread_id))  # A's own call still runs, once
    assert ran.ran == [("pay", PAY)]


def test_a_reused_tool_call_id_across_turns_asks_again(sqlite_url: str) -> None:
    def reply(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        return turn(call("pay", PAY, "c1"))  # the same id every turn

    agent, ran = agent_with(reply, checkpointer=sqlite_url, approvers=cfo_only, name="billing")
    first = agent.generate("pay")
    first_plan = plan_of(agent, first.thread_id)
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    assert ran.ran == [("pay", PAY)]
    second = agent.generate("pay again", thread_id=first.thread_id)
    assert second.finish_reason == "suspended"
    assert second.pending_approvals[0].id != first_plan["calls"][0]["approval"]["id"]
    second_plan = plan_of(agent, first.thread_id)
    forge_alone(agent, first.thread_id, task(pay_call(first_plan), ["billing"]),  # turn 1 key
                task(pay_call(second_plan), ["billing"]))
    assert ran.ran == [("pay", PAY)], ran.ran
    # a client writes turn 1's approved record over turn 2's pending one
    plan = copy.deepcopy(second_plan)
    pay_call(plan)["approval"] = copy.deepcopy(pay_call(first_plan)["approval"])
    agent.graph.update_state(config(first.thread_id), {"turn": plan}, as_node="approval_gate")
    agent.graph.invoke(Command(goto="approval_gate"), config(first.thread_id))
    assert ran.ran == [("pay", PAY)], ran.ran


def test_a_grant_revoked_between_planning_and_running(sqlite_url: str) -> None:
    """Revoking a grant stops the calls planned after it; one it approved while it was live
    runs, as one a person approved before would (docs/reviewing.md: "later calls ... ask again")."""
    def reply(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        n = sum(isinstance(m, AIMessage) for m in messages)
        return turn(call("pay", {**PAY, "amount": 40 + n}, f"c{n}"))

    agent, ran = agent_with(reply, checkpointer=sqlite_url, approvers=cfo_only, name="billing")
    first = agent.generate("pay")
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo", remember="thread")
    assert len(ran.ran) == 1
    cfg = config(first.thread_id)
    # the next turn is planned (auto-approved by the grant), stopped before its tools run
    agent.graph.invoke({"messages": [("user", "pay again")]}, cfg, interrupt_before=["tools"])
    assert len(ran.ran) == 1
    (grant,) = Inbox(sqlite_url).grants(first.thread_id)
    Inbox(sqlite_url).revoke(grant["id"], decided_by="cfo")
    agent.graph.invoke(None, cfg)
    assert len(ran.ran) == 2  # approved while the grant was live
    third = agent.generate("pay once more", thread_id=first.thread_id)
    assert third.finish_reason == "suspended" and len(ran.ran) == 2  # planned after: asks


def test_a_cleared_edit_never_runs_the_original_arguments(durable_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=durable_url, approvers=cfo_only,
                            name="billing")
    result = agent.generate("pay")
    plan = plan_of(agent, result.thread_id)
    agent.resolve_tool_approval(run_id=result.run_id, id=pay_call(plan)["approval"]["id"],
                                approved=True, decided_by="cfo", approved_args=EDIT)
    agent.graph.invoke(Command(resume={}), config(result.thread_id), interrupt_before=["tools"])
    forge_alone(agent, result.thread_id, task(pay_call(plan), ["billing"]))  # original args
    assert ("pay", PAY) not in ran.ran
    assert ran.ran in ([], [("pay", EDIT)])


def test_an_edit_the_tool_refuses_never_runs(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_only,
                            name="billing")
    result = agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    bad = {**EDIT, "memo": "x"}  # the tool's model would drop the extra key: refused
    with pytest.raises(InvalidApprovedArgsError, match="takes no argument 'memo'"):
        lax_inbox(sqlite_url).approve(pending.id, decided_by="cfo", args=bad)
    lax_inbox(sqlite_url).approve(pending.id, decided_by="cfo", args=EDIT)
    plan = plan_of(agent, result.thread_id)
    forge_alone(agent, result.thread_id, task(pay_call(plan), ["billing"], args=bad),
                task(pay_call(plan), ["billing"], args=EDIT),
                task(pay_call(plan), ["billing"], args=PAY))
    # the forged tasks run nothing; the gate they hand back to may run the cleared edit, once
    assert ran.ran in ([], [("pay", EDIT)]), ran.ran


async def test_async_refused_claim_and_forged_send(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_only,
                            name="billing")
    result = await agent.agenerate("pay")
    (pending,) = await Inbox(sqlite_url).apending()
    await lax_inbox(sqlite_url).aapprove(pending.id, decided_by="intern")
    plan = await asyncio.to_thread(plan_of, agent, result.thread_id)
    cfg = config(result.thread_id)
    await agent.graph.aupdate_state(cfg, {"reports": {}}, as_node="approval_gate")
    await agent.graph.ainvoke(Command(goto=[Send("tools", task(pay_call(plan), ["billing"]))]),
                              cfg)
    assert ran.ran == []


def _ops(ran: list[Any], **kwargs: Any) -> Agent:
    """A subagent `ops` whose turn plans a gated `purge` of 7 days; each purge that runs is
    noted in `ran`."""
    @create_tool(needs_approval=True)
    def purge(days: int) -> str:
        """Purge logs."""
        ran.append(days)
        return "purged"

    def sub_reply(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "sub done"
        return turn(call("purge", {"days": 7}, "p1"))

    return Agent(name="ops", description="ops", tools=[purge],
                 model=ScriptedChatModel(sub_reply), **kwargs)


def test_a_subagent_decision_its_own_policy_refuses(sqlite_url: str) -> None:
    ran: list[Any] = []
    ops = _ops(ran, approvers=lambda who, p: who == "dba")
    boss = Agent(name="boss", checkpointer=sqlite_url, agents={"ops": ops},
                 approvers=lambda who, p: who in ("dba", "boss"),
                 model=ScriptedChatModel([turn(call("ops", {"task": "purge"}, "d1")), "ok"]))
    result = boss.generate("go")
    (pending,) = Inbox(sqlite_url).pending()
    assert pending.agent_path == ["boss", "ops"]
    lax_inbox(sqlite_url).approve(pending.id, decided_by="boss")  # the supervisor's policy admits
    boss.resume(run_id=result.run_id)
    assert ran == [], "the subagent's own policy refuses 'boss'"
    assert boss.approve_tool_call_generate(run_id=result.run_id, decided_by="dba").text == "ok"
    assert ran == [7]


# ------------------------------------------------------------------ legitimate flows


def test_legit_api_approve_edit_decline(durable_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=durable_url, approvers=cfo_only,
                            name="billing")
    r1, r2, r3 = (agent.generate("pay") for _ in range(3))
    assert agent.approve_tool_call_generate(run_id=r1.run_id, decided_by="cfo").text == "done"
    assert agent.approve_tool_call_generate(run_id=r2.run_id, decided_by="cfo",
                                            args=EDIT).text == "done"
    assert agent.decline_tool_call_generate(run_id=r3.run_id, decided_by="cfo").text == "done"
    assert ran.ran == [("pay", PAY), ("pay", EDIT)]
    for r in (r1, r2, r3):
        agent.resume(run_id=r.run_id)
    assert ran.ran == [("pay", PAY), ("pay", EDIT)]


def test_legit_inbox_and_cli(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_only,
                            name="billing")
    runs = [agent.generate("pay") for _ in range(4)]
    inbox = Inbox(sqlite_url, agents=[agent])
    ids = {p.run_id: p.id for p in inbox.pending()}
    inbox.approve(ids[runs[0].run_id], decided_by="cfo")
    inbox.approve(ids[runs[1].run_id], decided_by="cfo", args=EDIT)
    cli = ["--db", sqlite_url, "--by", "cfo", "--agent", "tests.policy_agent:billing"]
    assert main(["approve", ids[runs[2].run_id], *cli,
                 "--args", json.dumps({**PAY, "amount": 7})]) == 0
    assert main(["decline", ids[runs[3].run_id], *cli]) == 0
    for r in runs:
        assert agent.resume(run_id=r.run_id).text == "done"
    assert ran.ran == [("pay", PAY), ("pay", EDIT), ("pay", {**PAY, "amount": 7})]


def test_legit_raw_resume_with_identity_and_crash_after_clear(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from graphkit._journal import GateJournal

    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_only,
                            name="billing")
    r = agent.generate("pay")
    agent.graph.invoke(Command(resume={"decisions": [{"type": "edit", "args": EDIT}]}),
                       config(r.thread_id, "cfo"))
    assert ran.ran == [("pay", EDIT)]
    r2 = agent.generate("pay")
    lax_inbox(sqlite_url).approve(r2.pending_approvals[0].id, decided_by="cfo")
    real = GateJournal.sync
    calls = {"n": 0}

    def once(self: Any, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("crash after the clear")
        real(self, *args, **kwargs)

    monkeypatch.setattr(GateJournal, "sync", once)
    with pytest.raises(RuntimeError):
        agent.resume(run_id=r2.run_id)
    monkeypatch.setattr(GateJournal, "sync", real)
    assert agent.resume(run_id=r2.run_id).text == "done"
    assert ran.ran == [("pay", EDIT), ("pay", PAY)]


def test_legit_grants(sqlite_url: str) -> None:
    def reply(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        n = sum(isinstance(m, AIMessage) for m in messages)
        return turn(call("pay", {**PAY, "amount": 40 + n}, f"c{n}"))

    agent, ran = agent_with(reply, checkpointer=sqlite_url, approvers=cfo_only, name="billing")
    first = agent.generate("pay")
    agent.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo", remember="thread")
    second = agent.generate("again", thread_id=first.thread_id)
    assert second.finish_reason == "stop" and len(ran.ran) == 2
    (grant,) = Inbox(sqlite_url).grants(first.thread_id)
    Inbox(sqlite_url).revoke(grant["id"], decided_by="cfo")
    third = agent.generate("again", thread_id=first.thread_id)
    assert third.finish_reason == "suspended" and len(ran.ran) == 2
    other = agent.generate("pay")  # another thread: the grant never applied there
    assert other.finish_reason == "suspended"


def test_legit_suspensions_via_inbox_and_api(sqlite_url: str) -> None:
    seen: list[Any] = []
    agent = checkout_agent(seen, sqlite_url, approvers=cfo_only)
    r1 = agent.generate("buy")
    r2 = agent.generate("buy")
    lax_inbox(sqlite_url).resume(r1.pending_approvals[0].id, "Berlin", decided_by="cfo")
    assert agent.resume(run_id=r1.run_id).text == "done"
    assert agent.resume_generate("Paris", run_id=r2.run_id, decided_by="cfo").text == "done"
    assert seen == [None, None, "Berlin", "Paris"]


async def test_legit_async(sqlite_url: str) -> None:
    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_only,
                            name="billing")
    r = await agent.agenerate("pay")
    out = await agent.aapprove_tool_call(run_id=r.run_id, decided_by="cfo", args=EDIT).result()
    assert out.text == "done" and ran.ran == [("pay", EDIT)]
    seen: list[Any] = []
    shop = checkout_agent(seen, sqlite_url.replace(".db", "2.db"), approvers=cfo_only)
    s = await shop.agenerate("buy")
    assert (await shop.aresume_generate("Rome", run_id=s.run_id, decided_by="cfo")).text == "done"
    assert seen == [None, "Rome"]


def test_legit_supervisor_via_api_and_inbox(sqlite_url: str) -> None:
    ran: list[Any] = []
    ops = _ops(ran)
    boss = Agent(name="boss", checkpointer=sqlite_url, agents={"ops": ops}, approvers=cfo_only,
                 model=ScriptedChatModel(lambda m: "ok" if isinstance(m[-1], ToolMessage)
                                         else turn(call("ops", {"task": "purge"}, "d1"))))
    r1 = boss.generate("go")
    assert boss.approve_tool_call_generate(run_id=r1.run_id, decided_by="cfo",
                                           args={"days": 3}).text == "ok"
    r2 = boss.generate("go")
    lax_inbox(sqlite_url).approve(r2.pending_approvals[0].id, decided_by="cfo")
    assert boss.resume(run_id=r2.run_id).text == "ok"
    assert ran == [3, 7]


def test_legit_worker(tmp_path: Any) -> None:
    import threading
    import time

    from graphkit._worker import Worker

    url = f"sqlite:///{tmp_path / 'w.db'}"
    agent, ran = agent_with(pay_then_done, checkpointer=url, approvers=cfo_only, name="billing")
    runs = [agent.generate("pay") for _ in range(3)]
    worker = Worker(agent)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        inbox = lax_inbox(url)
        items = inbox.pending()
        inbox.approve(items[0].id, decided_by="cfo")
        inbox.approve(items[1].id, decided_by="intern")  # withdrawn by the gate
        inbox.decline(items[2].id, decided_by="cfo")
        deadline = time.monotonic() + 30
        while worker.resumed < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert worker.resumed >= 2
        time.sleep(0.3)
        assert ran.ran == [("pay", PAY)]
        assert Inbox(url).get(items[1].id).status == "pending"
    finally:
        worker.stop()
        thread.join(timeout=10)
    del runs


def test_resume_data_from_a_copied_thread_reaches_the_original_threads_tool(
        sqlite_url: str) -> None:
    """`Ledger.resume_values` reads cleared suspensions by call key alone, not by thread. A
    copy of thread T1 (the server's thread copy: same plan, same call key) reports its own
    suspension for T1's call; the copy's client answers it in the copy; T1's tool then reads
    that answer when T1's own reviewer resumes it."""
    seen: list[Any] = []

    @create_tool
    def ship(ctx: ToolContext) -> str:
        """Ship the order."""
        city = ctx.suspend({"message": "ship where?"})
        seen.append(city)
        return f"shipped to {city}"

    def reply(messages: list[Any]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        return turn(call("ship", {}, "s1"))

    agent = Agent(name="shop", tools=[ship], model=ScriptedChatModel(reply),
                  checkpointer=sqlite_url)
    t1 = agent.generate("ship it")
    assert t1.finish_reason == "suspended"
    values = agent.graph.get_state(config(t1.thread_id)).values
    # the copy: T2 holds T1's values (plan, call key); its client reports a suspension for it
    t2 = "copy-of-t1"
    agent.graph.update_state(config(t2), {**values, "reports": {"s1": {"payload": {
        "message": "ship where?"}}}}, as_node="approval_gate")
    agent.graph.invoke(Command(goto="approval_gate"), config(t2))
    agent.graph.invoke(Command(resume={"decisions": [
        {"type": "resume", "data": "Moscow", "tool_call_id": "s1"}]}), config(t2))
    # (the copy has no plan of its own in the ledger: its gate plans the turn anew, under
    # its own call key, and its client's answer is its own thread's business)
    # T1's own reviewer answers T1's suspension
    done = agent.resume_generate("Berlin", run_id=t1.run_id)
    told = [m.content for m in done.messages if isinstance(m, ToolMessage)]
    assert told == ["shipped to Berlin"], f"T1's tool read the copy's answer: {told}"


def test_a_forged_suspension_kind_lets_a_policy_refused_raw_resume_approve_a_payment() -> None:
    """A policy that lets anyone answer a tool's question (a suspension) but only the CFO
    approve: the kind it is shown comes from the client-writable state record."""
    def answers_for_all(decided_by: str | None, pending: Any) -> bool:
        return decided_by is not None and (pending.kind == "suspension" or decided_by == "cfo")

    agent, ran = agent_with(pay_then_done, approvers=answers_for_all, name="billing")
    result = agent.generate("pay")
    thread = result.thread_id
    plan = plan_of(agent, thread)
    pay_call(plan)["approval"]["kind"] = "suspension"
    write_plan(agent, thread, plan)
    agent.graph.invoke(Command(resume={"decisions": [
        {"type": "resume", "data": "ok", "tool_call_id": "c1"}]}), config(thread, "intern"))
    assert ran.ran == [], f"a payment ran on the intern's 'answer': {ran.ran}"


def test_a_cleared_approval_does_not_admit_a_sibling_call_with_the_same_arguments(
        durable_url: str) -> None:
    def reply(messages: list[Any]) -> Any:
        if not any(isinstance(m, AIMessage) for m in messages):
            return turn(call("pay", PAY, "c1"), call("pay", PAY, "c2"))
        return "done"

    agent, ran = agent_with(reply, checkpointer=durable_url, approvers=cfo_only, name="billing")
    result = agent.generate("pay")
    plan = plan_of(agent, result.thread_id)
    c1, c2 = plan["calls"]
    agent.resolve_tool_approval(run_id=result.run_id, id=c1["approval"]["id"], approved=True,
                                decided_by="cfo")
    agent.resolve_tool_approval(run_id=result.run_id, id=c2["approval"]["id"], approved=False,
                                decided_by="cfo")
    agent.graph.invoke(Command(resume={}), config(result.thread_id), interrupt_before=["tools"])
    assert cleared(agent, c1["approval"]["id"]) is not None
    forge_alone(agent, result.thread_id, task(c2, ["billing"]),
                task(c2, ["billing"], tool_call_id="c1"), task(c1, ["billing"]),
                task(c1, ["billing"], tool_call_id="c2"))
    assert ran.ran in ([], [("pay", PAY)]), ran.ran  # c1 at most once, c2 never
    agent.graph.invoke(None, config(result.thread_id))
    assert ran.ran == [("pay", PAY)], ran.ran


def test_an_expired_approval_claimed_by_a_refused_reviewer(sqlite_url: str) -> None:
    import time
    from datetime import timedelta

    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, approvers=cfo_only,
                            name="billing", approval_ttl=timedelta(milliseconds=400))
    result = agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    lax_inbox(sqlite_url).approve(pending.id, decided_by="intern")
    time.sleep(0.5)
    plan = plan_of(agent, result.thread_id)
    forge_alone(agent, result.thread_id, task(pay_call(plan), ["billing"]))
    agent.resume(run_id=result.run_id)
    assert ran.ran == []
    with pytest.raises(Exception):  # noqa: B017 - expired: never approved
        agent.approve_tool_call_generate(run_id=result.run_id, decided_by="cfo")
    assert ran.ran == []


def test_a_new_message_in_a_copied_thread_leaves_the_original_suspension_alone(
        sqlite_url: str) -> None:
    seen: list[Any] = []
    agent = checkout_agent(seen, sqlite_url)
    t1 = agent.generate("buy")
    sus_id = t1.pending_approvals[0].id
    values = agent.graph.get_state(config(t1.thread_id)).values
    # the server's thread copy: T2 starts from T1's checkpoint (here: its values), paused
    agent.graph.update_state(config("t2"), {**values, "reports": {"none": {}}},
                             as_node="approval_gate")
    agent.graph.invoke(Command(goto="approval_gate"), config("t2"))
    agent.generate("never mind", thread_id="t2")  # supersedes what waits in T2
    row = agent._storage.ledger.approval(sus_id)
    assert row is not None and row.status == "pending", (
        f"T2's message decided T1's suspension: {row and row.decision}")


def test_an_approved_call_whose_tool_the_agent_lost_stops_the_run_and_changes_nothing(
        sqlite_url: str) -> None:
    """A redeploy renamed the tool of an approved call: the gate must not send it to a tools
    node that refuses it unanswered (and send it again, step after step, to the recursion
    limit: thousands of checkpoints and audit rows per attempt, for every worker retry). The
    run stops with a typed error; an agent that has the tool runs the call once."""
    ran: list[str] = []

    def billing(tool_name: str) -> Agent:
        @create_tool(name=tool_name, needs_approval=True)
        def pay(amount: int) -> str:
            """Pay."""
            ran.append(f"{tool_name} {amount}")
            return "paid"

        return Agent(name="billing", tools=[pay], checkpointer=sqlite_url,
                     model=ScriptedChatModel(lambda m: "done" if isinstance(m[-1], ToolMessage)
                                             else turn(call("pay", {"amount": 500}, "p1"))))

    first = billing("pay").generate("pay 500")
    (pending,) = first.pending_approvals
    Inbox(sqlite_url).approve(pending.id, decided_by="cfo")
    renamed = billing("send_payment")
    cfg = config(first.thread_id)
    before = len(list(renamed.graph.get_state_history(cfg)))
    audit = len(Inbox(sqlite_url).audit(thread_id=first.thread_id))
    for _ in range(2):
        with pytest.raises(GraphkitError, match="has no tool of that name"):
            renamed.resume(run_id=first.run_id)
    assert len(list(renamed.graph.get_state_history(cfg))) == before
    assert len(Inbox(sqlite_url).audit(thread_id=first.thread_id)) == audit
    assert ran == []
    assert billing("pay").resume(run_id=first.run_id).text == "done"
    assert ran == ["pay 500"]
