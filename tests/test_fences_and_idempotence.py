"""Attacks, kept as regression tests, on `supersede_unanswered`'s fence and `pending_below`,
`validate_args`'s idempotence check, and the ledger beside a SqliteSaver/PostgresSaver
instance (`_storage._ledger_beside`).

Each test failed on the reviewed code (it names the promise that broke) and passes since the
fixes.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel
from tests.helpers import PAY, call, cfo_only, config, turn

USER = {"langgraph_auth_user": {"identity": "user"}}


def _raw_input(agent: Agent, thread_id: str, text: str) -> dict[str, Any]:
    """A client's new message: plain graph input, given to the graph without graphkit's API."""
    out: dict[str, Any] = agent.graph.invoke(
        {"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread_id, **USER}})
    return out


def _pay_then_done(messages: list[BaseMessage]) -> Any:
    if not any(isinstance(m, AIMessage) for m in messages):
        return turn(call("pay", PAY, "c1"))
    return "done"


# ============================================================ F1: the fence turns a live call's
# real result into "did not run"


def test_a_payment_that_ran_while_fenced_is_never_reported_as_not_run(sqlite_url: str
                                                                      ) -> None:
    """The approved payment is running (the Agent API resumed it, a worker say) when the user
    types in a client that gives the graph its input directly. That input took no lease: its
    model node fenced the live call (outcome 'unknown'), the payment completed, its `finish`
    recorded nothing, and the next model node replaced its real result 'paid 40 to ACME' with
    DISCARDED: 'did not run'. Money moved; the thread's conversation (what the model, and a
    later reviewer, reads) said it did not. The graph's input now waits for the thread's
    lease (`graphkit._leased_graph`): the message comes after the payment, which the
    conversation reports as paid."""
    started, release = threading.Event(), threading.Event()
    paid: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int, payee: dict[str, Any]) -> str:
        """Send a payment."""
        started.set()
        assert release.wait(20)
        paid.append(amount)
        return f"paid {amount} to {payee.get('name')}"

    agent = Agent(name="billing", tools=[pay], model=ScriptedChatModel(_pay_then_done),
                  checkpointer=sqlite_url, approvers=cfo_only)
    r = agent.generate("pay")
    agent.resolve_tool_approval(run_id=r.run_id, id=r.pending_approvals[0].id, approved=True,
                                decided_by="cfo")
    results: dict[str, Any] = {}

    def worker() -> None:
        results["final"] = agent.resume(run_id=r.run_id)

    running = threading.Thread(target=worker)
    typing = threading.Thread(
        target=lambda: _raw_input(agent, r.thread_id, "meanwhile: what's the weather?"))
    running.start()
    try:
        assert started.wait(20)
        typing.start()
        typing.join(0.5)
        assert typing.is_alive(), "the message ran beside the payment"
    finally:
        release.set()
        running.join(30)
        typing.join(30)
    assert paid == [40]

    final = agent.graph.get_state(config(r.thread_id)).values["messages"]
    told = [str(m.content) for m in final
            if isinstance(m, ToolMessage) and m.tool_call_id == "c1"]
    assert told and not any("did not run" in t for t in told), (
        f"the payment ran ({paid}) and the thread's conversation says: {told}")
    assert [m.content for m in final[-3:]] == ["done", "meanwhile: what's the weather?", "done"]


# ============================================================ F2: the idempotence check misses
# `model_post_init` (application code pydantic runs on every validation)


def test_a_post_init_that_converts_again_runs_other_amounts_than_approved() -> None:
    """`validation_runs_code` looks for function validators, serializers and default
    factories in the core schema; `model_post_init` is there only as the string
    `post_init`, so the second validation is skipped. The reviewer approves the 4000 (cents)
    shown; the tool's own parse converts once more and pays 400000."""
    from pydantic import BaseModel

    class Payment(BaseModel):
        amount: int

        def model_post_init(self, context: Any) -> None:
            self.amount = self.amount * 100  # dollars to cents

    paid: list[int] = []

    @create_tool(args_schema=Payment, needs_approval=True)
    def pay(amount: int) -> str:
        """Send a payment (in dollars)."""
        paid.append(amount)
        return f"paid {amount}"

    agent = Agent(name="billing", tools=[pay], model=ScriptedChatModel(
        lambda m: "done" if any(isinstance(x, AIMessage) for x in m)
        else turn(call("pay", {"amount": 40}, "c1"))))
    r = agent.generate("pay 40 dollars")
    if not r.pending_approvals:
        return  # refused at planning, as a validator that converts again is
    shown = r.pending_approvals[0].args["amount"]
    agent.approve_tool_call_generate(run_id=r.run_id, decided_by="cfo")
    assert paid in ([], [shown]), (
        f"the reviewer approved amount={shown}; the tool ran with {paid}")


# ============================================================ F3: the idempotence check refuses
# legitimate tools: a set-valued argument dumps in the order of one set and re-validates into a
# set whose order differs (string hashes), so the same value 'changes'


def _unstable_labels() -> list[str]:
    """Three labels whose set, rebuilt from its own listing, lists in another order (in this
    process's string hashing)."""
    import itertools

    for labels in itertools.combinations([f"t{i}" for i in range(80)], 3):
        first = list(set(labels))
        if list(set(first)) != first:
            return list(labels)
    raise AssertionError("no unstable set found")


def test_an_idempotent_validator_on_a_set_argument_is_not_refused() -> None:
    from pydantic import BaseModel, field_validator

    class Labels(BaseModel):
        labels: set[str]

        @field_validator("labels")
        @classmethod
        def not_empty(cls, value: set[str]) -> set[str]:
            if not value:
                raise ValueError("give at least one label")
            return value  # idempotent: a check, no conversion

    labelled: list[set[str]] = []

    @create_tool(args_schema=Labels, needs_approval=True)
    def label(labels: set[str]) -> str:
        """Label the ticket."""
        labelled.append(set(labels))
        return "labelled"

    raw = _unstable_labels()
    agent = Agent(name="desk", tools=[label], model=ScriptedChatModel(
        lambda m: "done" if any(isinstance(x, AIMessage) for x in m)
        else turn(call("label", {"labels": raw}, "c1"))))
    r = agent.generate("label it")
    errors = [str(m.content) for m in r.messages if isinstance(m, ToolMessage)]
    assert r.pending_approvals, (
        f"a legitimate call was refused as non-idempotent: {errors}")


# ============================================================ F4: an async SQLite (or
# PostgreSQL) saver instance keeps the ledger in memory: after a restart a call that ran runs
# again


def test_an_async_sqlite_saver_instance_never_runs_a_call_twice_after_a_restart(
        tmp_path: Any) -> None:
    """`_ledger_beside` knows LangGraph's SqliteSaver and PostgresSaver, not their async twins
    (AsyncSqliteSaver, AsyncPostgresSaver: what an async application passes). Their ledger is
    this process's memory (a warning is logged). After a restart, replaying the checkpoint
    where the payment waited (Studio's time travel, a client resuming an old checkpoint)
    records its approval as pending again, a decision is taken, and the payment runs twice."""
    import asyncio

    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.types import Command

    from tests.helpers import agent_with

    async def scenario() -> list[str]:
        conns: list[Any] = []

        async def open_agent(ran: Any = None) -> Any:
            conn = await aiosqlite.connect(tmp_path / "async.db")
            conns.append(conn)
            return agent_with([turn(call("pay", {"amount": 1, "payee": {"name": "x"}}, "c1")),
                               "ok"], ran, checkpointer=AsyncSqliteSaver(conn), name="billing")

        try:
            agent, ran = await open_agent()
            r = await agent.agenerate("go")
            paused = (await agent.graph.aget_state(config(r.thread_id))).config
            await agent.aapprove_tool_call_generate(run_id=r.run_id)
            assert ran.names() == ["pay"]

            restarted, _ = await open_agent(ran)  # a new process
            with contextlib.suppress(Exception):  # any refusal is fine
                await restarted.graph.ainvoke(
                    Command(resume={"decisions": [{"type": "approve"}]}),
                    {"configurable": {**paused["configurable"], **USER}})
            return ran.names()
        finally:
            for conn in conns:
                await conn.close()

    names = asyncio.run(scenario())
    assert names == ["pay"], f"the payment ran again after a restart: {names}"
