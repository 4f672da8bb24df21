"""Approvals at scale, on SQLite and on a PostgreSQL server the tests start: the inbox,
exactly one decision, who may decide, digests, expiry, audit, remembered grants."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from pydantic import BaseModel

from graphkit import (
    Agent,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApproverNotAllowedError,
    Inbox,
    InvalidApprovedArgsError,
    create_tool,
)
from graphkit.testing import ScriptedChatModel
from tests.helpers import agent_with, call, turn
from tests.test_storage import ROOT, events, run

PAY = {"amount": 40, "payee": {"name": "ACME"}}


def pay_calls(n: int, prefix: str = "c") -> list[Any]:
    return [turn(*[call("pay", {**PAY, "amount": i + 1}, f"{prefix}{i}") for i in range(n)]),
            "done"]


def test_inbox_lists_across_threads_and_agents_and_decides_without_the_agent(
        durable_url: str) -> None:
    billing, ledger = agent_with(pay_calls(2), checkpointer=durable_url, name="billing")
    ops, _ops_ledger = agent_with([turn(call("bash", {"command": "rm -r /x"}, "b1")), "ok"],
                                 checkpointer=durable_url, name="ops")
    first = billing.generate("pay two")
    second = billing.generate("pay two more")
    third = ops.generate("clean")

    inbox = Inbox(durable_url)
    everything = inbox.pending()
    assert len(everything) == 5
    assert {p.thread_id for p in everything} == {first.thread_id, second.thread_id,
                                                 third.thread_id}
    assert [p.tool_name for p in inbox.pending(agent="ops")] == ["bash"]
    assert len(inbox.pending(tool_name="pay")) == 4
    assert len(inbox.pending(limit=2)) == 2

    target = next(p for p in everything if p.run_id == first.run_id and p.tool_call_id == "c0")
    other = next(p for p in everything if p.run_id == first.run_id and p.tool_call_id == "c1")
    assert inbox.get(target.id).status == "pending"
    assert inbox.ready() == []
    approved = inbox.approve(target.id, decided_by="alice", comment="ok",
                             args={**PAY, "amount": 99})
    assert approved.status == "approved" and approved.decided_by == "alice"
    assert inbox.ready() == []  # c1 of the same run is still undecided
    inbox.decline(other.id, decided_by="alice", comment="duplicate")
    assert inbox.ready() == [first.run_id]
    assert ledger.ran == []  # deciding never runs anything by itself

    final = billing.resume(run_id=first.run_id)
    assert final.finish_reason == "stop"
    assert ledger.ran == [("pay", {**PAY, "amount": 99})]
    rejection = next(m for m in final.messages
                     if isinstance(m, ToolMessage) and m.tool_call_id == "c1")
    assert "duplicate" in rejection.text
    assert inbox.ready() == []
    assert len(inbox.pending()) == 3


def test_agent_sees_inbox_decisions_and_refuses_to_decide_twice(durable_url: str) -> None:
    agent, ledger = agent_with(pay_calls(1), checkpointer=durable_url)
    result = agent.generate("pay")
    inbox = Inbox(durable_url)
    (pending,) = inbox.pending()
    inbox.decline(pending.id, decided_by="bob")
    (shown,) = agent.pending_approvals(run_id=result.run_id)
    assert shown.status == "rejected" and shown.decided_by == "bob"
    with pytest.raises(ApprovalAlreadyResolvedError):
        agent.approve_tool_call(run_id=result.run_id)
    with pytest.raises(ApprovalAlreadyResolvedError):
        inbox.approve(pending.id, decided_by="carol")
    agent.resume(run_id=result.run_id)
    assert ledger.ran == []


@pytest.mark.parametrize("via", ["agent", "inbox"])
def test_two_processes_deciding_at_once_exactly_one_wins(durable_url: str, tmp_path: Path,
                                                          via: str) -> None:
    log = tmp_path / "log.jsonl"
    started = run(durable_url, log, "start")
    run_id = started["run_id"]
    inbox = Inbox(durable_url)
    approval = next(p for p in inbox.pending() if p.tool_call_id == "c2")
    start_at = f"{time.time() + 4:.3f}"
    args = ([run_id, "c2", start_at] if via == "agent" else [approval.id, start_at])
    procs = [
        subprocess.Popen([sys.executable, "-m", "tests.xproc_agent", durable_url, str(log),
                          f"race-{via}", *args], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes.append(json.loads(out.strip().splitlines()[-1])["outcome"])
    assert sorted(outcomes) == ["lost", "won"]
    if via == "inbox":
        run(durable_url, log, "approve", run_id, "c3")  # also applies the inbox decision
    ran = [e["command"] for e in events(log) if e["event"] == "ran"]
    assert ran.count("rm -r old") == 1  # c2: approved once, ran once
    assert inbox.get(approval.id).status == "approved"


def test_approvers_policy_in_the_inbox(durable_url: str) -> None:
    agent, _ = agent_with(pay_calls(1), checkpointer=durable_url)
    agent.generate("pay")
    inbox = Inbox(durable_url, approvers=lambda who, p: who == "cfo" and p.tool_name == "pay")
    (pending,) = inbox.pending()
    with pytest.raises(ApproverNotAllowedError):
        inbox.approve(pending.id, decided_by="intern")
    assert inbox.get(pending.id).status == "pending"
    assert inbox.approve(pending.id, decided_by="cfo").status == "approved"
    refused = [e for e in inbox.audit(id=pending.id) if e["event"] == "refused"]
    assert refused and refused[0]["decided_by"] == "intern"


def test_decision_bound_to_the_reviewed_digest(durable_url: str) -> None:
    agent, ledger = agent_with(pay_calls(1), checkpointer=durable_url)
    result = agent.generate("pay")
    (pending,) = agent.pending_approvals(run_id=result.run_id)
    assert pending.args_digest.startswith("sha256:")
    inbox = Inbox(durable_url)
    with pytest.raises(InvalidApprovedArgsError, match="digest"):
        inbox.approve(pending.id, decided_by="a", args_digest="sha256:not-what-is-waiting")
    with pytest.raises(InvalidApprovedArgsError, match="digest"):
        agent.approve_tool_call(run_id=result.run_id, args_digest="sha256:stale")
    assert inbox.get(pending.id).status == "pending"
    final = agent.approve_tool_call_generate(run_id=result.run_id,
                                             args_digest=pending.args_digest)
    assert final.finish_reason == "stop" and len(ledger.ran) == 1


def test_inbox_checks_edited_args_against_the_tool_schema(durable_url: str) -> None:
    agent, _ = agent_with(pay_calls(1), checkpointer=durable_url)
    agent.generate("pay")
    inbox = Inbox(durable_url)
    (pending,) = inbox.pending()
    with pytest.raises(InvalidApprovedArgsError, match="payee"):
        inbox.approve(pending.id, decided_by="a", args={"amount": 5})
    with pytest.raises(ApprovalNotFoundError):
        inbox.approve("apr_missing", decided_by="a")
    assert inbox.get(pending.id).status == "pending"


def test_undecided_in_time_is_declined_as_expired_never_approved(durable_url: str) -> None:
    agent, ledger = agent_with(pay_calls(1), checkpointer=durable_url,
                               approval_ttl=timedelta(milliseconds=50))
    result = agent.generate("pay")
    (pending,) = agent.pending_approvals(run_id=result.run_id)
    assert pending.expires_at is not None
    time.sleep(0.1)
    inbox = Inbox(durable_url)
    (expired,) = inbox.expire()
    assert expired.id == pending.id and expired.status == "rejected"
    assert expired.comment and "expired" in expired.comment
    assert inbox.pending() == [] and inbox.expire() == []
    with pytest.raises(ApprovalAlreadyResolvedError, match="was already expired"):
        inbox.approve(pending.id, decided_by="late")
    final = agent.resume(run_id=result.run_id)
    assert ledger.ran == [] and final.finish_reason == "stop"
    assert any(e["event"] == "expired" for e in inbox.audit(thread_id=result.thread_id))


def test_an_inbox_never_lists_an_approval_past_its_time(durable_url: str) -> None:
    """An approval past its `expires_at` was listed as waiting (the web inbox and the CLI
    showed its card) until something touched its run or called `expire()`, and a reviewer's
    approval of it could only be refused. Listing declines it as expired, as touching does:
    its run is ready to go on, told so."""
    agent, ledger = agent_with(pay_calls(2), checkpointer=durable_url,
                               approval_ttl=timedelta(milliseconds=50))
    result = agent.generate("pay")
    time.sleep(0.1)
    inbox = Inbox(durable_url)
    assert inbox.pending() == []
    for approval in result.pending_approvals:
        assert inbox.get(approval.id).status == "rejected"
    assert [e["event"] for e in inbox.audit(thread_id=result.thread_id)].count("expired") == 2
    assert inbox.ready() == [result.run_id] and inbox.expire() == []
    assert agent.resume(run_id=result.run_id).finish_reason == "stop" and ledger.ran == []


def test_tool_ttl_expires_when_the_run_is_next_touched(durable_url: str) -> None:
    ran: list[str] = []

    @create_tool(needs_approval=True, approval_ttl=timedelta(milliseconds=30))
    def wire(amount: int) -> str:
        """Wire money."""
        ran.append(str(amount))
        return "sent"

    script = [turn(call("wire", {"amount": 1}, "w1")), "ok"]
    agent = Agent(name="bank", model=ScriptedChatModel(script), tools=[wire],
                  checkpointer=durable_url)
    result = agent.generate("wire 1")
    time.sleep(0.06)
    # (told as every door tells it, where this one said "was already rejected (expired")
    with pytest.raises(ApprovalAlreadyResolvedError, match="was already expired"):
        agent.approve_tool_call(run_id=result.run_id)
    final = agent.resume(run_id=result.run_id)
    assert ran == [] and "expired" in next(
        m for m in final.messages if isinstance(m, ToolMessage)).text


def test_audit_log_records_every_kind_of_decision(durable_url: str) -> None:
    script = [turn(call("pay", PAY, "c1"), call("pay", {**PAY, "amount": 2}, "c2")),
              turn(call("pay", {**PAY, "amount": 3}, "c3")), "done"]
    agent, ledger = agent_with(script, checkpointer=durable_url,
                               approvers=lambda who, p: who != "mallory")
    result = agent.generate("pay")
    with pytest.raises(ApproverNotAllowedError):
        agent.approve_tool_call(run_id=result.run_id, tool_call_id="c1", decided_by="mallory")
    agent.approve_tool_call_generate(run_id=result.run_id, tool_call_id="c1", decided_by="al",
                                     args={**PAY, "amount": 41}, comment="rounded")
    second = agent.decline_tool_call_generate(run_id=result.run_id, tool_call_id="c2",
                                              decided_by="al", comment="dup")
    assert second.finish_reason == "suspended"  # the model's next turn asks again
    superseded = agent.generate("stop paying", thread_id=result.thread_id)
    assert superseded.finish_reason == "stop"

    log = Inbox(durable_url).audit(thread_id=result.thread_id)
    kinds = [(e["event"], e["tool_call_id"]) for e in log]
    assert ("requested", "c1") in kinds and ("requested", "c3") in kinds
    assert ("refused", "c1") in kinds
    assert ("edited", "c1") in kinds and ("rejected", "c2") in kinds
    assert ("superseded", "c3") in kinds
    edited = next(e for e in log if e["event"] == "edited")
    assert edited["decided_by"] == "al" and edited["comment"] == "rounded"
    assert edited["args_before"]["amount"] == 40 and edited["args_after"]["amount"] == 41
    assert all(e["at"] for e in log)
    assert ledger.ran == [("pay", {**PAY, "amount": 41})]


def test_remember_thread_grants_later_calls_of_the_tool(durable_url: str) -> None:
    script = [turn(call("pay", PAY, "c1")), turn(call("pay", {**PAY, "amount": 2}, "c2")),
              turn(call("bash", {"command": "rm -r a"}, "b1")),
              turn(call("bash", {"command": "rm -r b"}, "b2")), "done"]
    agent, ledger = agent_with(script, checkpointer=durable_url)
    result = agent.generate("go")
    after_pay = agent.approve_tool_call_generate(run_id=result.run_id, decided_by="al",
                                                 remember="thread")
    # c2 ran without asking; the bash call (a predicate tool) still asks
    assert [p.tool_call_id for p in after_pay.pending_approvals] == ["b1"]
    after_bash = agent.approve_tool_call_generate(run_id=result.run_id, remember="thread")
    assert after_bash.finish_reason == "stop"
    assert [name for name, _ in ledger.ran] == ["pay", "pay", "bash", "bash"]
    assert len(ledger.predicate_calls) == 2  # the predicate was still consulted for b2
    log = Inbox(durable_url).audit(thread_id=result.thread_id)
    assert [e["event"] for e in log].count("granted") == 2
    assert ("auto_approved", "c2") in [(e["event"], e["tool_call_id"]) for e in log]

    other, _other_ledger = agent_with(pay_calls(1), checkpointer=durable_url)
    assert other.generate("pay").finish_reason == "suspended"  # another thread still asks


def test_inbox_lists_ten_thousand_pending_approvals(sqlite_url: str) -> None:
    per_run, runs = 100, 100
    agent, ledger = agent_with(pay_calls(per_run), checkpointer=sqlite_url)
    for i in range(runs):
        assert agent.generate(f"batch {i}").finish_reason == "suspended"
    inbox = Inbox(sqlite_url)
    started = time.perf_counter()
    pending = inbox.pending()
    took = time.perf_counter() - started
    assert len(pending) == per_run * runs
    assert len({p.id for p in pending}) == per_run * runs
    assert len({p.thread_id for p in pending}) == runs
    assert ledger.ran == []
    print(f"listed {len(pending)} pending approvals in {took:.2f}s")


async def test_inbox_async_twins(sqlite_url: str) -> None:
    agent, ledger = agent_with(pay_calls(2), checkpointer=sqlite_url)
    result = await agent.agenerate("pay")
    inbox = Inbox(sqlite_url)
    first, second = await inbox.apending()
    assert (await inbox.aget(first.id)).status == "pending"
    await inbox.aapprove(first.id, decided_by="a")
    await inbox.adecline(second.id, decided_by="a")
    assert await inbox.aready() == [result.run_id]
    assert await inbox.aexpire() == []
    assert {e["event"] for e in await inbox.aaudit(thread_id=result.thread_id)} >= {
        "requested", "approved", "rejected"}
    assert (await agent.aresume(run_id=result.run_id)).finish_reason == "stop"
    assert len(ledger.ran) == 1



def test_every_blocking_inbox_method_has_an_async_twin() -> None:
    """The contract: every blocking method has an async twin with an `a` prefix. Only the
    two that read no storage (they judge a given item) have none."""
    import inspect

    pure = {"may_view", "seen_messages"}
    blocking = {name for name, member in inspect.getmembers(Inbox, inspect.isfunction)
                if not name.startswith(("_", "a")) and name not in pure}
    missing = sorted(n for n in blocking if not inspect.iscoroutinefunction(
        getattr(Inbox, "a" + n, None)))
    assert not missing, f"no async twin: {missing}"


@pytest.mark.parametrize("kind", [Inbox, Agent], ids=["Inbox", "Agent"])
def test_every_async_twin_takes_what_its_blocking_method_takes(kind: type) -> None:
    """A twin is the same method, awaited: the same parameters, defaults and annotations
    (`Inbox.aapprove` had no `remember`; the agent's async `*_generate` took `**kwargs`)."""
    import inspect

    differ = {name: (str(inspect.signature(member)),
                     str(inspect.signature(getattr(kind, "a" + name))))
              for name, member in inspect.getmembers(kind, inspect.isfunction)
              if not name.startswith("_") and hasattr(kind, "a" + name)
              and list(inspect.signature(member).parameters.values())
              != list(inspect.signature(getattr(kind, "a" + name)).parameters.values())}
    assert not differ, differ


async def test_inbox_async_twins_answer_a_suspension_and_revoke_a_grant(sqlite_url: str
                                                                        ) -> None:
    from graphkit import ToolContext

    said: list[Any] = []

    def ask_body(ctx: ToolContext) -> str:
        data = ctx.suspend({"message": "which city?"})
        said.append(data)
        return f"weather in {data}"

    ask = create_tool(ask_body, name="ask", description="Ask for a city.")
    agent, ledger = agent_with([turn(call("pay", {"amount": 5, "payee": {"name": "acme"}}, "p1")),
                                "paid",
                                turn(call("ask", {}, "a1")), "done"], checkpointer=sqlite_url)
    agent = Agent(name="assistant", model=agent.model, tools=[*ledger.tools, ask],
                  checkpointer=sqlite_url)
    first = await agent.agenerate("pay", thread_id="t")
    inbox = Inbox(sqlite_url, agents=[agent])
    (pending,) = await inbox.apending()
    assert (await inbox.aschema(pending.id))["schema"]["properties"]["amount"]
    assert [m.type for m in await inbox.amessages(pending.id)][:2] == ["human", "ai"]
    await agent.aapprove_tool_call(run_id=first.run_id, remember="thread")
    assert (await agent.aresume(run_id=first.run_id)).text == "paid"
    (grant,) = await inbox.agrants("t")
    assert (await inbox.arevoke(grant["id"], decided_by="ops"))["revoked"]
    asked = await agent.agenerate("weather", thread_id="t")
    (question,) = await inbox.apending()
    assert asked.finish_reason == "suspended" and question.kind == "suspension"
    await inbox.aresume(question.id, "Oslo", decided_by="ops")
    assert (await agent.aresume(run_id=asked.run_id)).text == "done"
    assert said == ["Oslo"] and len(ledger.ran) == 1

def test_entries_of_a_turn_that_never_reached_a_checkpoint_are_closed(sqlite_url: str) -> None:
    """A process that died after the model's turn was planned but before its checkpoint leaves
    an approval no run waits on; the thread's next turn closes its inbox entry (found through
    the ledger's index on the thread: the inbox index, which grows with every approval ever
    asked, is not scanned for it)."""
    agent, ledger = agent_with([turn(call("pay", PAY, "c1")), "ok"], checkpointer=sqlite_url)
    saver = agent.graph.checkpointer
    assert saver is not None and not isinstance(saver, bool)
    real_put = saver.put
    armed = [True]

    def dies_after_the_model(config: Any, checkpoint: Any, metadata: Any, versions: Any
                             ) -> Any:
        if armed[0] and metadata.get("step") == 1:  # after the model: indexed, not saved
            armed[0] = False
            raise RuntimeError("the process died here")
        return real_put(config, checkpoint, metadata, versions)

    saver.put = dies_after_the_model  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="died"):
        agent.generate("pay", thread_id="t1")
    (lost,) = Inbox(sqlite_url).pending()
    again = agent.generate("pay", thread_id="t1")
    assert again.finish_reason == "suspended"
    (asked,) = again.pending_approvals
    assert [p.id for p in Inbox(sqlite_url).pending()] == [asked.id] != [lost.id]
    # the user's new message superseded the call of the turn that was cut short
    assert Inbox(sqlite_url).get(lost.id).status == "rejected"
    assert [e["event"] for e in Inbox(sqlite_url).audit(id=lost.id)][-1] == "superseded"
    with pytest.raises(ApprovalAlreadyResolvedError):
        Inbox(sqlite_url).approve(lost.id, decided_by="cfo")  # no run waits on it
    assert ledger.ran == []


def test_inbox_decides_an_approval_deep_in_a_subagent(sqlite_url: str) -> None:
    from tests.test_supervisor import FIND, Users, supervisor

    users = Users()
    sup = supervisor(users, FIND, checkpointer=sqlite_url)
    result = sup.generate("Find user with ID 12345")
    inbox = Inbox(sqlite_url)
    (pending,) = inbox.pending(agent="supervisor")
    assert pending.agent_path == ["supervisor", "data_agent"]
    assert pending.run_id == result.run_id
    inbox.approve(pending.id, decided_by="dpo", args={"userId": "54321"})
    assert inbox.ready() == [result.run_id] and users.looked_up == []
    final = sup.resume(run_id=result.run_id)
    assert final.text == "Here is user 12345." and users.looked_up == ["54321"]
    assert inbox.pending() == []



def test_a_cards_messages_come_from_the_thread_the_ledger_recorded(sqlite_url: str) -> None:
    """A store writer cannot point an approval at another thread (graphkit once kept an inbox
    index in the store): the card shows the conversation of the ledger's thread."""
    agent, _ran = agent_with([turn(call("pay", {"amount": 5, "payee": {"name": "x"}}, "p1")),
                              "paid", "the plan is secret"], checkpointer=sqlite_url)
    paused = agent.generate("pay x 5")
    other = agent.generate("tell me the secret plan")
    (pending,) = paused.pending_approvals
    inbox = Inbox(sqlite_url, agents=[agent])
    agent._storage.store.put(("graphkit", "approvals"), pending.id,
                             {**pending.to_dict(), "thread_id": other.thread_id})
    said = [str(m.content) for m in inbox.messages(pending.id)]
    assert "pay x 5" in said and "tell me the secret plan" not in said, said


def test_a_subagents_card_judges_the_supervisors_calls_as_the_supervisors(
        sqlite_url: str) -> None:
    """The card of a subagent's approval shows the supervisor's conversation, whose calls
    were judged as if they were the subagent's: a clerk who may see only billing's approvals
    read the supervisor's wire transfer, its account and its confirmation (helper-77)."""
    from langchain_core.messages import AIMessage, HumanMessage

    @create_tool(needs_approval=True)
    def wire(account: str, amount: int) -> str:
        """Wire money."""
        return f"wired {amount} to {account}, confirmation WX-7781"

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        return f"paid {amount}"

    billing = Agent(name="billing", description="Pays invoices.", tools=[pay],
                    model=ScriptedChatModel(lambda messages: "paid" if isinstance(
                        messages[-1], ToolMessage) else turn(call("pay", {"amount": 7}, "p1"))))

    def boss_reply(messages: list[Any]) -> Any:
        said = [m for m in messages if isinstance(m, HumanMessage)][-1].content
        if isinstance(messages[-1], ToolMessage):
            return "ok"
        if said == "wire":
            return AIMessage("", tool_calls=[call("wire", {"account": "CH93-ACCT-1",
                                                           "amount": 1_000_000}, "w1")])
        return AIMessage("", tool_calls=[call("billing", {"task": "pay the invoice"}, "d1")])

    boss = Agent(name="boss", tools=[wire], agents={"billing": billing},
                 model=ScriptedChatModel(boss_reply), checkpointer=sqlite_url)
    first = boss.generate("wire")
    boss.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo")
    boss.generate("pay the invoice", thread_id=first.thread_id)
    inbox = Inbox(sqlite_url, agents=[boss], viewers=lambda who, pending: who == "cfo" or (
        who == "clerk" and list(pending.agent_path) == ["boss", "billing"]))
    (card,) = inbox.pending(viewer="clerk")
    seen = json.dumps([m.model_dump() for m in inbox.messages(card.id, viewer="clerk")])
    assert "CH93-ACCT-1" not in seen and "WX-7781" not in seen and '"hidden"' in seen
    assert "CH93-ACCT-1" in json.dumps([m.model_dump() for m in inbox.messages(
        card.id, viewer="cfo")])


def test_a_reviewer_who_keeps_asking_for_a_hidden_card_is_audited_once(sqlite_url: str
                                                                         ) -> None:
    """Each look at a card the viewers policy hides was audited: reloading it filled the
    card's audit without end (20 reloads, 20 rows: helper-144). One entry per reviewer and
    card; another reviewer's attempt is an entry of its own."""
    from graphkit.errors import ApprovalNotFoundError
    from tests.helpers import pay_then_done

    agent, _ = agent_with(pay_then_done, checkpointer=sqlite_url)
    agent.generate("pay")
    inbox = Inbox(sqlite_url, viewers=lambda who, pending: who == "cfo")
    (card,) = Inbox(sqlite_url).pending()
    for who in ["mallory"] * 5 + ["eve"] * 2:
        with pytest.raises(ApprovalNotFoundError):
            inbox.get(card.id, viewer=who)
    refused = [e["decided_by"] for e in Inbox(sqlite_url).audit(id=card.id)
               if e["event"] == "refused"]
    assert refused == ["mallory", "eve"]


@pytest.mark.parametrize(("annotation", "model_args", "edit", "runs"), [
    ("dict[str, float]", {"a": 1.5}, {"a": 2}, {"a": 2.0}),
    ("Optional[float]", 1.5, 2, 2.0),
    ("tuple[float, float]", [1.0, 1.0], [2, 3], (2.0, 3.0)),
    ("Annotated[str, StringConstraints(strip_whitespace=True)]", "a", "  b  ", "b"),
    ("int", 1, 2.0, 2),
], ids=["dict-of-floats", "optional-float", "tuple", "stripped", "float-for-int"])
def test_an_edit_recorded_without_the_tool_runs_as_the_tools_model_reads_it(
        sqlite_url: str, annotation: str, model_args: Any, edit: Any, runs: Any) -> None:
    """Attack (adversary review): an inbox that cannot load the tool recorded edits the gate
    then withdrew ("edited", yet the call was pending again and never ran). An edit it records
    now runs, as the tool's own model reads it; the policy judged that reading."""
    from typing import Annotated, Optional  # noqa: F401 - names the annotations use

    from pydantic import StringConstraints  # noqa: F401

    ran: list[Any] = []
    namespace: dict[str, Any] = {**globals(), **locals()}
    exec(f"def t(x: {annotation}) -> str:\n    '''T.'''\n    ran.append(x)\n    return 'ok'\n",
         namespace)
    tool = create_tool(needs_approval=True)(namespace["t"])
    agent = Agent(name="a", tools=[tool], checkpointer=sqlite_url, model=ScriptedChatModel([
        turn(call("t", {"x": model_args}, "t1")), "done"]))
    first = agent.generate("go")
    Inbox(sqlite_url).approve(first.pending_approvals[0].id, decided_by="ops",
                              args={"x": edit})
    assert agent.resume(run_id=first.run_id).text == "done" and ran == [runs]
    assert not any("withdrawn" in str(e.get("detail"))
                   for e in Inbox(sqlite_url).audit(thread_id=first.thread_id))


@pytest.mark.parametrize("edit", [{"x": "not a date"}, {"x": 10**400}])
def test_an_edit_the_tools_model_would_refuse_is_refused_by_an_inbox_without_it(
        sqlite_url: str, edit: dict[str, Any]) -> None:
    ran: list[Any] = []

    @create_tool(needs_approval=True)
    def when(x: datetime.datetime) -> str:
        """When."""
        ran.append(x)
        return "ok"

    agent = Agent(name="a", tools=[when], checkpointer=sqlite_url, model=ScriptedChatModel([
        turn(call("when", {"x": "2024-01-01T00:00:00Z"}, "t1")), "done"]))
    first = agent.generate("go")
    with pytest.raises(InvalidApprovedArgsError):
        Inbox(sqlite_url).approve(first.pending_approvals[0].id, decided_by="ops", args=edit)
    assert Inbox(sqlite_url).get(first.pending_approvals[0].id).status == "pending"


def test_a_door_that_cannot_run_the_agents_policy_refuses_at_once(sqlite_url: str) -> None:
    """The agent decides who may approve with a policy; an inbox without the agent (or a
    policy of its own) cannot run it: it refuses the decision here, audited, rather than
    record one the gate would withdraw (a reviewer would believe in a payment that never
    runs). Given the agent, the same reviewer's decision is final and runs."""
    from graphkit import ApproverNotAllowedError

    agent, ran = agent_with(pay_calls(1), checkpointer=sqlite_url,
                            approvers=lambda who, p: who == "cfo")
    result = agent.generate("pay")
    (pending,) = result.pending_approvals
    with pytest.raises(ApproverNotAllowedError, match="policy this inbox cannot run"):
        Inbox(sqlite_url).approve(pending.id, decided_by="cfo")
    assert Inbox(sqlite_url).get(pending.id).status == "pending"
    assert [e["event"] for e in Inbox(sqlite_url).audit(id=pending.id)][-1] == "refused"
    Inbox(sqlite_url, agents=[agent]).approve(pending.id, decided_by="cfo")
    agent.resume(run_id=result.run_id)
    assert ran.names() == ["pay"]


def test_an_inbox_that_cannot_run_the_agents_policy_shows_its_approvals_to_no_reviewer(
        sqlite_url: str) -> None:
    """Who may see an approval is its agent's policy to say (by default, what it lets them
    decide): an inbox without the agent shows a named reviewer nothing of an agent with a
    policy (list, card, audit), rather than everything; given the agent, the policy's own
    answer. This process itself (no `viewer`) still reads its own database."""
    from graphkit import ApprovalNotFoundError

    agent, _ran = agent_with(pay_calls(1), checkpointer=sqlite_url,
                             approvers=lambda who, p: who == "cfo")
    result = agent.generate("pay")
    (pending,) = result.pending_approvals
    blind = Inbox(sqlite_url)
    assert blind.pending(viewer="dev") == [] and blind.pending(viewer="cfo") == []
    with pytest.raises(ApprovalNotFoundError):
        blind.get(pending.id, viewer="dev")
    assert blind.audit(thread_id=result.thread_id, viewer="dev") == []
    assert [p.id for p in blind.pending()] == [pending.id]
    seeing = Inbox(sqlite_url, agents=[agent])
    assert [p.id for p in seeing.pending(viewer="cfo")] == [pending.id]
    assert seeing.pending(viewer="dev") == []


def test_a_reviewer_sees_what_the_approvers_policy_lets_them_decide_as_it_reads_the_decision(
        sqlite_url: str) -> None:
    """The approvers policy of docs/reviewing.md reads `metadata["decision"]`; as the
    default viewing policy it was asked with no decision, raised KeyError, and hid from bob
    the payment it let him approve (helper-109). Viewing asks it of each decision the
    approval allows: shown if the reviewer may take one."""
    def approvers(who: str, pending: Any) -> bool:
        return who == "alice" or (who == "bob" and pending.args["amount"] < 100
                                  and pending.metadata["decision"] != "edit")

    agent, ran = agent_with(pay_calls(1), checkpointer=sqlite_url, approvers=approvers)
    (pending,) = agent.generate("pay").pending_approvals
    inbox = Inbox(sqlite_url, agents=[agent])
    assert [p.id for p in inbox.pending(viewer="bob")] == [pending.id]
    assert inbox.get(pending.id, viewer="bob").id == pending.id
    assert inbox.pending(viewer="eve") == []
    inbox.approve(pending.id, decided_by="bob")
    assert inbox.get(pending.id).status == "approved" and ran.names() == []


def test_a_definition_without_the_policy_never_exposes_the_approvals_the_policy_asked(
        sqlite_url: str) -> None:
    """Whether an inbox without the agent may show or decide an approval read the tool's
    schema row, which the last definition of the agent to plan the tool writes: one without
    the policy (an old deploy still running, a script) planned a call once, and a reviewer
    the policy refuses saw the 5000 payment and recorded an approval, blocking the one who
    may (helper-109). Each approval says whether its agent had a policy when it asked."""
    from graphkit import ApprovalNotFoundError, ApproverNotAllowedError

    guarded, ran = agent_with(pay_calls(1), checkpointer=sqlite_url, name="billing",
                              approvers=lambda who, p: who == "cfo")
    asked = guarded.generate("pay").pending_approvals[0]
    open_door, _ = agent_with(pay_calls(1), checkpointer=sqlite_url, name="billing")
    theirs = open_door.generate("pay").pending_approvals[0]
    blind = Inbox(sqlite_url)
    assert [p.id for p in blind.pending(viewer="eve")] == [theirs.id]
    with pytest.raises(ApprovalNotFoundError):
        blind.get(asked.id, viewer="eve")
    with pytest.raises(ApproverNotAllowedError, match="policy this inbox cannot run"):
        blind.approve(asked.id, decided_by="eve")
    assert blind.get(asked.id).status == "pending" and ran.names() == []


@pytest.mark.parametrize("given", ["the agent", "no agent"])
def test_a_decision_for_a_run_a_state_write_ended_applies_once_whichever_inbox_takes_it(
        sqlite_url: str, given: str) -> None:
    """A client writes the paused thread's state as its tools node (`update_state(...,
    as_node="tools")`) and continues it: the run ends without its gate. An inbox given the
    agent declined the approval as superseded ("no longer waits"), while the API and an inbox
    without the agent recorded it and a resume ran it (helper-90): the doors disagreed. Every
    door records it; the run is listed as ready, and its resume (a worker's) takes it back
    to its gate: the call runs once, and nothing is left waiting."""
    from tests.helpers import pay_then_done

    agent, ran = agent_with(pay_then_done, checkpointer=sqlite_url, name="billing")
    first = agent.generate("pay")
    cfg = {"configurable": {"thread_id": first.thread_id}}
    agent.graph.update_state(cfg, {"reports": {}}, as_node="tools")
    agent.graph.invoke(None, cfg)
    inbox = Inbox(sqlite_url, agents=[agent]) if given == "the agent" else Inbox(sqlite_url)
    (pending,) = inbox.pending()
    assert inbox.approve(pending.id, decided_by="cfo").status == "approved"
    assert inbox.ready() == [first.run_id] and ran.ran == []
    done = agent.resume(run_id=first.run_id)
    assert done.text == "done" and len(ran.ran) == 1
    assert inbox.pending() == [] and inbox.ready() == []


def test_a_whole_float_edited_for_an_integer_is_the_int_that_runs_or_refused_at_once(
        durable_url: str) -> None:
    """An inbox without the agent's code checks an edit by the recorded JSON schema, which
    takes 3.0 as an integer: the approval was recorded with 3.0 while the tool ran with 3,
    and 1e20 (an int no checkpoint holds, read for the tool) was recorded approved, then
    withdrawn by the gate (helper-104 F3). The edit is read as the tool reads it, and what
    runs is held to the bounds of what may be given: refused at once, nothing decided."""
    agent, ledger = agent_with(pay_calls(2), checkpointer=durable_url, name="billing")
    paused = agent.generate("pay")
    first, second = paused.pending_approvals
    inbox = Inbox(durable_url)
    with pytest.raises(InvalidApprovedArgsError, match="beyond 64 bits"):
        inbox.approve(second.id, decided_by="ops", args={**PAY, "amount": 1e20})
    assert inbox.get(second.id).status == "pending"
    assert [e["event"] for e in inbox.audit(id=second.id)] == ["requested", "refused"]
    taken = inbox.approve(first.id, decided_by="ops", args={**PAY, "amount": 3.0})
    assert taken.approved_args == {**PAY, "amount": 3}
    assert type(taken.approved_args["amount"]) is int
    inbox.decline(second.id, decided_by="ops")
    assert agent.resume(run_id=paused.run_id).text == "done"
    assert ledger.ran == [("pay", {**PAY, "amount": 3})]


class _Payee(BaseModel):
    name: str
    branch: int


def test_an_edit_is_read_as_the_tool_reads_it_at_every_depth_its_schema_names(
        durable_url: str) -> None:
    """Whole floats for integers were read as ints only in a field of the arguments' own
    properties: an optional field (`anyOf` with null), a nested model (`$ref`) and a mapping
    (`additionalProperties`) kept 3.0 in the approval while the tool ran with 3, and 1e20 was
    recorded approved, then withdrawn at the gate (helper-107)."""
    ran: list[dict[str, Any]] = []

    @create_tool(needs_approval=True)
    def pay(amount: int | None, payee: _Payee, split: dict[str, int]) -> str:
        """Pay."""
        ran.append({"amount": amount, "payee": payee.model_dump(), "split": split})
        return "paid"

    given = {"amount": 5, "payee": {"name": "ACME", "branch": 1}, "split": {"a": 1}}
    agent = Agent(name="billing", tools=[pay], checkpointer=durable_url,
                  model=ScriptedChatModel([turn(call("pay", given, "c1"),
                                                call("pay", given, "c2")), "done"]))
    paused = agent.generate("pay")
    first, second = paused.pending_approvals
    inbox = Inbox(durable_url)  # without the agent's code
    for big in ({**given, "amount": 1e20}, {**given, "payee": {"name": "A", "branch": 1e20}},
                {**given, "split": {"a": 1e20}}):
        with pytest.raises(InvalidApprovedArgsError, match="beyond 64 bits"):
            inbox.approve(second.id, decided_by="ops", args=big)
    edited = {"amount": 3.0, "payee": {"name": "ACME", "branch": 2.0}, "split": {"a": 4.0}}
    taken = inbox.approve(first.id, decided_by="ops", args=edited)
    read = {"amount": 3, "payee": {"name": "ACME", "branch": 2}, "split": {"a": 4}}
    assert taken.approved_args == read
    assert json.dumps(taken.approved_args, sort_keys=True) == json.dumps(read, sort_keys=True)
    inbox.decline(second.id, decided_by="ops")
    assert agent.resume(run_id=paused.run_id).text == "done" and ran == [read]
