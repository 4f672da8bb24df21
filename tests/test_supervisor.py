"""Supervisor delegation: approvals and suspensions from any depth surface at the top."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import BaseModel

from graphkit import Agent, Inbox, ToolContext, create_tool
from graphkit.errors import ApproverNotAllowedError
from graphkit.testing import ScriptedChatModel
from tests.helpers import call, turn


class Users:
    """The seed's find-user tool (requireApproval) behind a data agent, with counters."""

    def __init__(self) -> None:
        self.looked_up: list[str] = []

        @create_tool(name="find-user", needs_approval=True)
        def find_user(userId: str) -> dict[str, str]:
            """Finds user by ID in the database."""
            self.looked_up.append(userId)
            return {"id": userId, "name": "John", "email": "john@example.com"}

        self.tool = find_user

    def data_agent(self) -> Agent:
        def reply(messages: list[BaseMessage]) -> Any:
            results = [m for m in messages if isinstance(m, ToolMessage)]
            if not results:
                task = str(messages[-1].content)
                user = task.split()[-1]
                return turn(call("find-user", {"userId": user}, f"fu-{user}"))
            if results[-1].status == "error":
                return "I could not look the user up: the lookup was declined."
            return f"Found: {results[-1].text}"

        self.data_model = ScriptedChatModel(reply)
        return Agent(name="data_agent", description="Handles database queries and user data",
                     model=self.data_model, tools=[self.tool])


def supervisor(users: Users, script: list[Any], **kwargs: Any) -> Agent:
    return Agent(name="supervisor", instructions="Delegate to data_agent for user lookups.",
                 model=ScriptedChatModel(script), agents={"data_agent": users.data_agent()},
                 **kwargs)


FIND = [turn(call("data_agent", {"task": "find user 12345"}, "d1")), "Here is user 12345."]


def test_find_user_approved_at_the_supervisor() -> None:
    users = Users()
    sup = supervisor(users, FIND)
    stream = sup.stream("Find user with ID 12345")
    chunks = list(stream)
    (approval,) = [c for c in chunks if c.type == "tool-call-approval"]
    assert approval.payload["tool_name"] == "find-user"
    assert approval.payload["tool_call_id"] == "fu-12345"
    assert approval.payload["args"] == {"userId": "12345"}
    assert approval.payload["agent_path"] == ["supervisor", "data_agent"]
    assert users.looked_up == []

    resumed = sup.approve_tool_call(run_id=stream.run_id, tool_call_id="fu-12345")
    assert "".join(resumed.text_stream) == "Here is user 12345."
    assert users.looked_up == ["12345"]
    result = resumed.result()
    answer = next(m for m in result.messages if isinstance(m, ToolMessage))
    assert answer.name == "data_agent" and "Found:" in answer.text and "John" in answer.text


def test_find_user_declined_at_the_supervisor() -> None:
    users = Users()
    sup = supervisor(users, [FIND[0], "The lookup was declined."])
    result = sup.generate("Find user with ID 12345")
    assert result.finish_reason == "suspended"
    final = sup.decline_tool_call_generate(run_id=result.run_id, tool_call_id="fu-12345",
                                           decided_by="dpo", comment="privacy")
    assert users.looked_up == []
    assert final.finish_reason == "stop" and final.text == "The lookup was declined."
    answer = next(m for m in final.messages if isinstance(m, ToolMessage))
    assert "declined" in answer.text
    inner_history = users.data_model.calls[-1]
    rejection = next(m for m in inner_history if isinstance(m, ToolMessage))
    assert "dpo" in rejection.text and "privacy" in rejection.text


def test_edited_args_reach_the_inner_tool() -> None:
    users = Users()
    sup = supervisor(users, FIND)
    result = sup.generate("Find user with ID 12345")
    sup.approve_tool_call_generate(run_id=result.run_id, args={"userId": "777"})
    assert users.looked_up == ["777"]


def test_nothing_reruns_on_resume() -> None:
    users = Users()
    sup = supervisor(users, FIND)
    result = sup.generate("Find user with ID 12345")
    assert len(sup.model.calls) == 1 and len(users.data_model.calls) == 1  # type: ignore[attr-defined]
    sup.approve_tool_call_generate(run_id=result.run_id)
    # supervisor: the delegation turn and the answer; data agent: its call and its answer
    assert len(sup.model.calls) == 2  # type: ignore[attr-defined]
    assert len(users.data_model.calls) == 2
    assert users.looked_up == ["12345"]
    # the subagent continued from where it paused: its second call saw its first reply
    second = users.data_model.calls[1]
    assert [type(m).__name__ for m in second] == ["HumanMessage", "AIMessage", "ToolMessage"]


def test_two_delegations_pause_together_and_are_decided_in_any_order() -> None:
    users = Users()
    script = [turn(call("data_agent", {"task": "find user 1"}, "d1"),
                   call("data_agent", {"task": "find user 2"}, "d2")), "Both handled."]
    sup = supervisor(users, script)
    result = sup.generate("find 1 and 2")
    assert sorted(p.tool_call_id for p in result.pending_approvals) == ["fu-1", "fu-2"]
    second = sup.approve_tool_call_generate(run_id=result.run_id, tool_call_id="fu-2")
    assert users.looked_up == ["2"] and second.finish_reason == "suspended"
    assert [p.tool_call_id for p in second.pending_approvals] == ["fu-1"]
    final = sup.decline_tool_call_generate(run_id=result.run_id, tool_call_id="fu-1")
    assert users.looked_up == ["2"] and final.text == "Both handled."
    answers = {m.tool_call_id: m.text for m in final.messages if isinstance(m, ToolMessage)}
    assert "Found" in answers["d2"] and "declined" in answers["d1"]


def three_levels(users: Users) -> tuple[Agent, ScriptedChatModel, ScriptedChatModel]:
    b = users.data_agent()
    b_model = users.data_model
    a_model = ScriptedChatModel(lambda messages: (
        turn(call("records", {"task": "find user 42"}, "a1"))
        if not any(isinstance(m, ToolMessage) for m in messages)
        else f"A relays: {[m for m in messages if isinstance(m, ToolMessage)][-1].text}"))
    a = Agent(name="A", description="Coordinates record work", model=a_model,
              agents={"records": b})
    sup = Agent(name="supervisor", model=ScriptedChatModel(
        [turn(call("team", {"task": "get user 42"}, "s1")), "All the way up."]),
        agents={"team": a})
    return sup, a_model, b_model


def test_three_levels_surface_at_the_top_and_the_decision_reaches_the_tool() -> None:
    users = Users()
    sup, a_model, b_model = three_levels(users)
    result = sup.generate("user 42 please")
    (pending,) = result.pending_approvals
    assert pending.agent_path == ["supervisor", "A", "data_agent"]
    assert pending.tool_name == "find-user" and users.looked_up == []
    final = sup.approve_tool_call_generate(run_id=result.run_id, tool_call_id="fu-42")
    assert users.looked_up == ["42"] and final.text == "All the way up."
    answer = next(m for m in final.messages if isinstance(m, ToolMessage))
    assert answer.text.startswith("A relays: Found:")
    assert len(a_model.calls) == 2 and len(b_model.calls) == 2
    assert len(sup.model.calls) == 2  # type: ignore[attr-defined]

    graph = sup.graph.get_graph(xray=True)
    assert {"team:model", "team:approval_gate", "team:tools", "team:records:model",
            "team:records:approval_gate"} <= set(graph.nodes)


def test_suspension_in_a_subagent_surfaces_and_resumes_from_the_top() -> None:
    class Confirm(BaseModel):
        confirmed: bool

    done: list[str] = []

    @create_tool(resume_schema=Confirm)
    def conditional_operation(operation: str, ctx: ToolContext) -> str:
        """Performs an operation that may require confirmation."""
        if ctx.resume_data is None or not ctx.resume_data.confirmed:
            return ctx.suspend({"message": f"Confirm: {operation}?"})
        done.append(operation)
        return f"did {operation}"

    worker = Agent(name="worker", description="Does operations", tools=[conditional_operation],
                   model=ScriptedChatModel([turn(call("conditional_operation",
                                                      {"operation": "purge"}, "op1")), "Purged."]))
    sup = Agent(name="supervisor", agents={"worker": worker}, model=ScriptedChatModel(
        [turn(call("worker", {"task": "purge the cache"}, "w1")), "The cache is purged."]))
    chunks = list(sup.stream("purge"))
    (suspended,) = [c for c in chunks if c.type == "tool-call-suspended"]
    assert suspended.payload["suspend_payload"] == {"message": "Confirm: purge?"}
    assert suspended.payload["agent_path"] == ["supervisor", "worker"]
    run_id = chunks[0].run_id
    final = sup.resume_generate({"confirmed": True}, run_id=run_id)
    assert done == ["purge"] and final.text == "The cache is purged."


def test_request_level_approval_reaches_subagent_tools() -> None:
    plain: list[str] = []

    @create_tool
    def note(text: str) -> str:
        """Write a note."""
        plain.append(text)
        return "noted"

    worker = Agent(name="worker", tools=[note], model=ScriptedChatModel(
        [turn(call("note", {"text": "hi"}, "n1")), "Noted."]))
    sup = Agent(name="supervisor", agents={"worker": worker}, model=ScriptedChatModel(
        [turn(call("worker", {"task": "note hi"}, "w1")), "ok"]))
    result = sup.generate("note", require_tool_approval=True)
    (pending,) = result.pending_approvals
    assert pending.tool_call_id == "n1" and pending.agent_path == ["supervisor", "worker"]
    assert plain == []
    assert sup.approve_tool_call_generate(run_id=result.run_id).text == "ok"
    assert plain == ["hi"]


def test_new_message_supersedes_nested_approvals_and_reaches_the_supervisor() -> None:
    users = Users()
    sup = supervisor(users, [FIND[0], "Okay, dropping it."])
    result = sup.generate("Find user with ID 12345")
    final = sup.generate("never mind", thread_id=result.thread_id)
    assert users.looked_up == [] and final.text == "Okay, dropping it."
    kinds = [type(m).__name__ for m in final.messages]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "HumanMessage", "AIMessage"]
    assert final.messages[3].text == "never mind"
    assert isinstance(final.messages[3], HumanMessage)


async def test_async_supervisor_round_trip() -> None:
    users = Users()
    sup = supervisor(users, FIND)
    result = await sup.agenerate("Find user with ID 12345")
    assert result.pending_approvals[0].agent_path == ["supervisor", "data_agent"]
    final = await sup.aapprove_tool_call_generate(run_id=result.run_id)
    assert final.text == "Here is user 12345." and users.looked_up == ["12345"]


def test_subagent_keys_may_not_clash() -> None:
    users = Users()
    with pytest.raises(ValueError, match="clash"):
        Agent(name="s", model=ScriptedChatModel(["x"]), agents={"tools": users.data_agent()})


def _payer(name: str, amount: int, ran: list[tuple[str, int]], **kwargs: Any) -> Agent:
    """A subagent whose one tool, `pay`, needs approval; it asks to pay `amount`."""
    @create_tool(name="pay", needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        ran.append((name, amount))
        return "paid"

    return Agent(name=name, description=f"pays from {name}", tools=[pay], model=ScriptedChatModel(
        lambda m: "paid" if isinstance(m[-1], ToolMessage) else turn(
            call("pay", {"amount": amount}, f"p-{name}"))), **kwargs)


def test_subagents_of_one_supervisor_may_not_share_a_name() -> None:
    # an agent path names a subagent by its name: two under one name would share the grants,
    # policies and decisions recorded for it (a grant for one's `pay` ran the other's)
    ran: list[tuple[str, int]] = []
    with pytest.raises(ValueError, match="share the names"):
        Agent(name="sup", model=ScriptedChatModel(["x"]),
              agents={"petty": _payer("worker", 5, ran), "wire": _payer("worker", 90000, ran)})
    with pytest.raises(ValueError, match="share a name"):
        Inbox("memory", agents=[_payer("billing", 5, ran), _payer("billing", 9, ran)])


def test_a_subagent_path_resolves_by_name_never_by_another_subagents_key() -> None:
    # `wire` is named "worker"; the subagent under the key "worker" is another one, whose own
    # lenient policy must not judge wire's calls: wire inherits the supervisor's (cfo only)
    ran: list[tuple[str, int]] = []
    lenient = _payer("petty", 5, ran, approvers=lambda who, _request: who is not None)
    sup = Agent(name="sup", approvers=lambda who, _request: who == "cfo",
                agents={"worker": lenient, "wire": _payer("worker", 90000, ran)},
                model=ScriptedChatModel(lambda m: "done" if isinstance(m[-1], ToolMessage)
                                        else turn(call("wire", {"task": "wire it"}, "d1"))))
    first = sup.generate("go")
    (pending,) = first.pending_approvals
    assert pending.agent_path == ["sup", "worker"] and pending.args == {"amount": 90000}
    with pytest.raises(ApproverNotAllowedError):
        sup.approve_tool_call_generate(run_id=first.run_id, decided_by="bob")
    with pytest.raises(ApproverNotAllowedError):
        Inbox(sup._storage, agents=[sup]).approve(pending.id, decided_by="bob")
    assert [p.status for p in sup.pending_approvals(run_id=first.run_id)] == ["pending"]
    assert sup.approve_tool_call_generate(run_id=first.run_id, decided_by="cfo").text == "done"
    assert ran == [("worker", 90000)]


def test_supervisor_on_sqlite(sqlite_url: str) -> None:
    users = Users()
    sup = supervisor(users, FIND, checkpointer=sqlite_url)
    result = sup.generate("Find user with ID 12345")
    again = supervisor(Users(), FIND, checkpointer=sqlite_url)  # a fresh agent, same file
    assert [p.tool_call_id for p in again.pending_approvals(run_id=result.run_id)] == [
        "fu-12345"]
    final = sup.approve_tool_call_generate(run_id=result.run_id)
    assert final.text == "Here is user 12345."
    assert isinstance(final.messages[-1], AIMessage)


def forecaster_supervisor(log: list[str], **kwargs: Any) -> Agent:
    """A supervisor delegating to a forecaster subagent whose weather tool suspends for the
    city (tests/test_suspension.py's `weather_tool`)."""
    from tests.test_suspension import city_from_reply, weather_tool

    def sub_reply(messages: list[BaseMessage]) -> Any:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        return turn(call("weather", {}, "w1")) if not results else f"sub: {results[-1].text}"

    forecaster = Agent(name="forecaster", description="Weather", tools=[weather_tool(log)],
                       model=ScriptedChatModel(sub_reply, structured=city_from_reply))

    def top_reply(messages: list[BaseMessage]) -> Any:
        results = [m for m in messages if isinstance(m, ToolMessage)]
        return turn(call("forecaster", {"task": "weather"}, "f1")) if not results else \
            f"top: {results[-1].text}"

    return Agent(name="supervisor", agents={"forecaster": forecaster},
                 model=ScriptedChatModel(top_reply), **kwargs)


def test_auto_resume_reaches_a_suspended_tool_in_a_subagent() -> None:
    log: list[str] = []
    sup = forecaster_supervisor(log, auto_resume_suspended_tools=True)
    first = sup.generate("What's the weather like?")
    assert first.suspend_payload is not None
    assert first.suspend_payload["agent_path"] == ["supervisor", "forecaster"]
    final = sup.generate("Paris", thread_id=first.thread_id)
    assert log[-1] == "fetched Paris"
    assert final.text == "top: sub: Paris: sunny, +72F"
    assert [m.text for m in final.messages if isinstance(m, HumanMessage)] == [
        "What's the weather like?", "Paris"]


def test_a_supervisors_stream_carries_its_subagents_chunks_marked_with_their_path() -> None:
    """As LangGraph's subgraph streaming: the subagent's tool calls, results and text, each
    with its `agent_path`; `text_stream` stays the supervisor's own words."""
    from graphkit.examples import supervisor_agent

    sup = supervisor_agent()
    paused = list(sup.stream("find user 42"))
    below = ["supervisor", "data_agent"]
    assert any(c.type == "tool-call" and c.payload["tool_name"] == "find-user"
               and c.payload["agent_path"] == below for c in paused)
    first = next(c for c in paused if c.type == "finish")
    run_id = next(c for c in paused if c.type == "start").payload["run_id"]
    assert first.payload["text"] == ""
    chunks = list(sup.approve_tool_call(run_id=run_id))
    result = next(c for c in chunks if c.type == "tool-result"
                  and c.payload["tool_name"] == "find-user")
    assert result.payload["agent_path"] == below and "John" in result.payload["result"]
    sub_text = "".join(c.payload["text"] for c in chunks if c.type == "text-delta"
                       and c.payload.get("agent_path") == below)
    own_text = "".join(c.payload["text"] for c in chunks if c.type == "text-delta"
                       and "agent_path" not in c.payload)
    assert sub_text.startswith("Found") and own_text.startswith("Here is what the team found")
    delegation = next(c for c in chunks if c.type == "tool-result"
                      and c.payload["tool_name"] == "data_agent")
    assert "agent_path" not in delegation.payload
    again = sup.generate("find user 7")
    assert "".join(sup.approve_tool_call(run_id=again.run_id).text_stream).startswith(
        "Here is what the team found")


def test_a_sent_delegation_never_names_the_subagents_place_in_the_chain(sqlite_url: str
                                                                        ) -> None:
    """A client sends the delegation node the planned delegation's key with another agent
    path (an invented agent, or none: a top-level agent of the same name in the same
    database): the subagent's place is the supervisor's own path, never the task's, so no
    approval is filed under another agent and no other agent's tool schema is rewritten."""
    from langgraph.types import Command, Send

    from graphkit import Inbox
    from tests.helpers import boss_over_billing, config, ledger_plan

    boss = boss_over_billing(sqlite_url, approvers=lambda who, p: who == "cfo")
    result = boss.generate("go")
    delegation = ledger_plan(boss, result.thread_id)["calls"][0]
    ledger = boss._storage.ledger
    schemas = ledger._sql.query("SELECT agent_path, tool_name, tool_schema FROM graphkit_tools")
    for path in (["intruder"], []):
        forged = {"tool_call_id": "d1", "tool_name": "billing", "key": delegation["key"],
                  "metadata": {}, "agent_path": path, "options": {}, "then": "approval_gate"}
        boss.graph.invoke(Command(goto=[Send("billing", forged)]), config(result.thread_id))
    assert [p.agent_path for p in Inbox(sqlite_url).pending()] == [["boss", "billing"]]
    assert ledger._sql.query(
        "SELECT agent_path, tool_name, tool_schema FROM graphkit_tools") == schemas


class _ReusingIds(ScriptedChatModel):
    """A model whose server reuses one completion id (and the model its call ids)."""

    def reply_for(self, messages: list[BaseMessage]) -> AIMessage:
        out = super().reply_for(messages)
        return out.model_copy(update={"id": "reused" if out.tool_calls else "reused-done"})


def test_parallel_delegations_with_reused_ids_never_share_a_plan(sqlite_url: str) -> None:
    """Two delegations of one turn to the same subagent, whose model answers both with the
    same message id, call id and arguments: each has its own approval (its turns are planned
    under the supervisor's call it works for), and each decision applies to its own call only
    (approve one, decline the other: one payment)."""
    paid: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        paid.append(amount)
        return f"paid {amount}"

    def sub_reply(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return turn(call("pay", {"amount": 7}, "p1"))
        return f"sub: {[m for m in messages if isinstance(m, ToolMessage)][-1].text}"

    billing = Agent(name="billing", model=_ReusingIds(sub_reply), tools=[pay])
    boss = Agent(name="boss", agents={"billing": billing}, checkpointer=sqlite_url,
                 model=ScriptedChatModel([turn(call("billing", {"task": "pay"}, "d1"),
                                               call("billing", {"task": "pay"}, "d2")), "ok"]))
    result = boss.generate("go")
    first, second = result.pending_approvals
    assert first.id != second.id
    boss.resolve_tool_approval(run_id=result.run_id, id=first.id, approved=True)
    boss.resolve_tool_approval(run_id=result.run_id, id=second.id, approved=False)
    final = boss.resume(run_id=result.run_id)
    assert paid == [7]
    told = sorted(m.text for m in final.messages if isinstance(m, ToolMessage))
    assert told[1] == "sub: paid 7" and "paid" not in told[0], told


def test_a_tool_call_id_two_subagents_share_is_ambiguous_and_an_approval_id_names_one(tmp_path: Any
                                                                        ) -> None:
    """Parallel subagents whose models wrote the same tool_call_id both suspend: the id alone
    is ambiguous (the refusal is audited on neither call), also once one is answered but
    not yet applied (the caller may mean the answered one); the approval id, given as the
    tool_call_id as the error asks, names one. Each answer reaches its own subagent's tool,
    once."""
    from graphkit.errors import AmbiguousApprovalError

    fetched: list[tuple[str, Any]] = []

    def sub(name: str) -> Agent:
        def weather_body(ctx: ToolContext) -> str:
            city = ctx.suspend({"message": "Which city?"})
            fetched.append((name, city))
            return f"sunny in {city}"

        tool = create_tool(weather_body, name="weather", description="Weather.")
        return Agent(name=name, description=f"{name} agent", tools=[tool],
                     model=ScriptedChatModel([turn(call("weather", {}, "w1")), f"{name} done"]))

    boss = Agent(name="boss", agents={"a": sub("alpha"), "b": sub("beta")},
                 checkpointer=f"sqlite:///{tmp_path / 'runs.db'}",
                 model=ScriptedChatModel([turn(call("a", {"task": "wx"}, "d1"),
                                               call("b", {"task": "wx"}, "d2")), "all done"]))
    first = boss.generate("weather twice")
    by_path = {p.agent_path[-1]: p for p in boss.pending_approvals(run_id=first.run_id)}
    assert set(by_path) == {"alpha", "beta"}
    with pytest.raises(AmbiguousApprovalError, match="as tool_call_id"):
        boss.resume_generate("X", run_id=first.run_id, tool_call_id="w1", decided_by="ops")
    refused = [e for e in Inbox(boss._storage).audit(thread_id=first.thread_id)
               if e["event"] == "refused"]
    assert refused and all(e["approval_id"] is None for e in refused)
    # the inbox answers alpha's (recorded; the run has not gone on): the id still names both
    Inbox(boss._storage, agents=[boss]).resume(by_path["alpha"].id, "Oslo", decided_by="ops")
    with pytest.raises(AmbiguousApprovalError):
        boss.resume_generate("Rome", run_id=first.run_id, tool_call_id="w1", decided_by="ops")
    done = boss.resume_generate("Rome", run_id=first.run_id,
                                tool_call_id=by_path["beta"].id, decided_by="ops")
    assert done.text == "all done"
    assert sorted(fetched) == [("alpha", "Oslo"), ("beta", "Rome")]


def _boss_and_billing(url: str, ran: list[tuple[str, int]]) -> Agent:
    """A supervisor that pays 5 itself and has billing pay 90000 in the same turn, both under
    the tool_call_id `p1` (models reuse ids)."""

    def payer(who: str) -> Any:
        @create_tool(name="pay", needs_approval=True)
        def pay(amount: int) -> str:
            """Pay."""
            ran.append((who, amount))
            return f"paid {amount}"
        return pay

    billing = Agent(name="billing", description="Pays invoices.", tools=[payer("billing")],
                    model=ScriptedChatModel(lambda messages: "billing paid" if isinstance(
                        messages[-1], ToolMessage) else turn(call("pay", {"amount": 90_000},
                                                                  "p1"))))

    def boss_reply(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], HumanMessage) and len(messages) == 1:
            return turn(call("pay", {"amount": 5}, "p1"),
                        call("billing", {"task": "pay the invoice"}, "d1"))
        return "boss done"

    return Agent(name="boss", tools=[payer("boss")], agents={"billing": billing},
                 model=ScriptedChatModel(boss_reply), checkpointer=url)


def test_the_supervisors_own_approval_beside_a_waiting_subagent_is_listed_and_decided_apart(
        sqlite_url: str) -> None:
    """The supervisor's gate asks its own approval once the delegation of the same turn is
    over; while the subagent waited, its approval was the run's only interrupt: the API
    listed it alone, and a decision without a tool_call_id, or by the `p1` both calls bear,
    approved billing's 90000 for a reviewer who meant the supervisor's 5 (the inbox listed
    both) (helper-77). The API lists what the ledger says the agent's gates wait on."""
    from graphkit import AmbiguousApprovalError

    ran: list[tuple[str, int]] = []
    boss = _boss_and_billing(sqlite_url, ran)
    paused = boss.generate("pay")
    listed = {(tuple(p.agent_path), p.args["amount"]): p for p in paused.pending_approvals}
    assert set(listed) == {(("boss",), 5), (("boss", "billing"), 90_000)}
    assert {p.id for p in boss.pending_approvals(run_id=paused.run_id)} == {
        p.id for p in listed.values()}
    for named in ("p1", None):
        with pytest.raises(AmbiguousApprovalError):
            boss.approve_tool_call(run_id=paused.run_id, tool_call_id=named, decided_by="cfo")
    assert ran == []
    own = listed[(("boss",), 5)]
    still = boss.approve_tool_call_generate(run_id=paused.run_id, tool_call_id=own.id,
                                            args={"amount": 4}, decided_by="cfo")
    assert ran == []  # (billing's still waits: nothing of the turn went on)
    # the result shows the decision as the ledger holds it (it said "pending", with the
    # arguments before the edit: helper-108)
    assert [(p.agent_path, p.status, p.approved_args) for p in still.pending_approvals] == [
        (p.agent_path, p.status, p.approved_args)
        for p in boss.pending_approvals(run_id=paused.run_id)]
    assert {p.id: (p.status, p.approved_args) for p in still.pending_approvals}[own.id] == (
        "approved", {"amount": 4})
    done = boss.decline_tool_call_generate(run_id=paused.run_id, decided_by="cfo")
    assert done.finish_reason == "stop" and ran == [("boss", 4)]


def test_resuming_before_every_call_is_decided_names_the_supervisors_own_call_too(
        sqlite_url: str) -> None:
    """The error named only the subagent's waiting call, not the supervisor's own beside it
    (helper-108 L2)."""
    from graphkit import ApprovalsPendingError

    ran: list[tuple[str, int]] = []
    boss = _boss_and_billing(sqlite_url, ran)
    paused = boss.generate("pay")
    with pytest.raises(ApprovalsPendingError, match=r"\['p1', 'p1'\]"):
        boss.resume(run_id=paused.run_id)
    assert ran == []


def test_a_new_message_supersedes_the_supervisors_own_approval_beside_a_waiting_subagent(
        sqlite_url: str) -> None:
    """A new user message declined the subagent's waiting call but not the supervisor's own
    of the same turn: the new message's run paused on it, and approved, it paid, before the
    model read the message that withdrew it (helper-77)."""
    ran: list[tuple[str, int]] = []
    boss = _boss_and_billing(sqlite_url, ran)
    paused = boss.generate("pay")
    after = boss.generate("cancel everything", thread_id=paused.thread_id)
    assert after.finish_reason == "stop" and after.pending_approvals == []
    assert Inbox(sqlite_url).pending() == [] and ran == []


def test_an_approved_call_a_new_message_comes_after_runs_first(sqlite_url: str) -> None:
    """The supervisor's own payment, approved in the inbox while billing's call waited, then a
    new user message as graph input (the LangGraph server's door): the payment was told 'not
    run: superseded by a new user message' while its approval stayed approved, with no
    audit of what became of it (helper-79); then it was declined as superseded, where a
    top-level agent's decision taken before a message runs first. It runs first here too,
    once; billing's undecided call is superseded and its delegation stopped (it never asks
    again), and the message is answered after them."""
    from langchain_core.messages import HumanMessage as Human

    ran: list[tuple[str, int]] = []
    boss = _boss_and_billing(sqlite_url, ran)
    paused = boss.generate("pay")
    inbox = Inbox(sqlite_url, agents=[boss])
    own = next(p for p in inbox.pending() if p.agent_path == ["boss"])
    billing = next(p for p in inbox.pending() if p.agent_path == ["boss", "billing"])
    inbox.approve(own.id, decided_by="cfo")
    out = boss.graph.invoke({"messages": [Human("cancel everything")]},
                            {"configurable": {"thread_id": paused.thread_id}})
    assert ran == [("boss", 5)] and inbox.pending() == [] and inbox.ready() == []
    said = [m.text for m in out["messages"]]
    assert said.index("paid 5") < said.index("cancel everything") and said[-1] == "boss done"
    assert any(t.startswith("Delegation 'billing' was stopped") for t in said)
    assert [e["event"] for e in inbox.audit(id=own.id)] == ["requested", "approved"]
    assert [e["event"] for e in inbox.audit(id=billing.id)] == ["requested", "superseded"]
    import re  # (stamped as every audit entry is: milliseconds, UTC)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", e["at"])
               for e in inbox.audit(id=billing.id))


def test_a_clients_decision_two_levels_down_is_read_once_and_the_run_goes_on() -> None:
    """Agent Chat UI's edit, resuming the supervisor of a call two delegations down: the gate
    that reads a client's resume even where the ledger holds decisions saw LangGraph's plain
    resume again in its next pass, which had been taken already, and paused the run on the
    approval it had just applied (a regression the served graphs' test caught)."""
    from langgraph.types import Command

    from graphkit.examples import supervisor_agent

    agent = supervisor_agent()
    cfg = {"configurable": {"thread_id": "two-down"}}
    agent.graph.invoke({"messages": [{"role": "user", "content": "purge logs older than 90 days"}]},
                       cfg)
    out = agent.graph.invoke(Command(resume={"decisions": [{"type": "edit", "edited_action": {
        "name": "purge_logs", "args": {"days": 120}}}]}), cfg)
    assert "purged logs older than 120 days" in str(out["messages"][-1].content)
    assert agent.graph.get_state(cfg).next == ()


class _Code(BaseModel):
    message: str


def test_a_result_a_client_writes_for_a_delegation_that_went_out_never_says_not_run(
        sqlite_url: str) -> None:
    """A subagent's tool placed a hold, then asked for a code; a client wrote a result for
    the supervisor's delegation, which was told "did not run" (helper-126). It went out, and
    its subagent's tools may have done part of their work: the notice says so."""
    holds: list[str] = []

    @create_tool(suspend_schema=_Code)
    def wire(amount: int, ctx: ToolContext) -> str:
        """Wire money; asks for a one-time code after placing a hold."""
        ctx.once("hold", lambda: holds.append(ctx.tool_call_id) or "hold-1")
        return f"sent {ctx.suspend({'message': 'code?'})}"

    def told(calls: AIMessage) -> Any:
        return lambda messages: (f"said: {messages[-1].text}"
                                 if isinstance(messages[-1], ToolMessage) else calls)

    payer = Agent(name="payer", description="Pays.", tools=[wire],
                  model=ScriptedChatModel(told(turn(call("wire", {"amount": 5}, "w1")))))
    boss = Agent(name="boss", agents={"billing": payer}, checkpointer=sqlite_url,
                 model=ScriptedChatModel(told(turn(call("billing", {"task": "wire 5"}, "d1")))))
    first = boss.generate("wire 5")
    assert first.finish_reason == "suspended" and holds == ["w1"]
    config = {"configurable": {"thread_id": first.thread_id}}
    boss.graph.invoke({"messages": [ToolMessage("done, wired", tool_call_id="d1")]}, config)
    (notice,) = [m for m in boss.graph.get_state(config).values["messages"]
                 if isinstance(m, ToolMessage)]
    assert "did not run" not in str(notice.content)
    assert "may have done part of its work" in str(notice.content)


def test_a_resume_naming_an_approval_of_another_agent_says_where_it_waits(
        sqlite_url: str) -> None:
    """The boss's own payment and billing's wait; only billing's gate asks yet. A resume that
    approves the boss's approval by id reached billing's gate, which refused it as "no
    pending approval with id ...", though the API listed it pending (helper-145 L1): the
    refusal says where it waits. Nothing ran; both still wait."""
    from langgraph.types import Command

    paid: list[str] = []

    def pay_of(who: str) -> Any:
        @create_tool(needs_approval=True, name="pay")
        def pay(amount: int) -> str:
            """Pay."""
            paid.append(who)
            return f"{who} paid {amount}"
        return pay

    sub = Agent(name="billing", tools=[pay_of("billing")], model=ScriptedChatModel(
        lambda m: turn(call("pay", {"amount": 7}, "p1"))
        if not any(isinstance(x, ToolMessage) for x in m) else "sub done"))
    boss = Agent(name="boss", tools=[pay_of("boss")], agents={"billing": sub},
                 checkpointer=sqlite_url, model=ScriptedChatModel(
                     lambda m: turn(call("billing", {"task": "pay"}, "d1"),
                                    call("pay", {"amount": 100}, "p1"))
                     if not any(isinstance(x, ToolMessage) for x in m) else "done"))
    first = boss.generate("go")
    own = next(p for p in first.pending_approvals if p.agent_path == ["boss"])
    config = {"configurable": {"thread_id": first.thread_id}}
    boss.graph.invoke(Command(resume={"decisions": [{"type": "approve", "id": own.id}]}),
                      config)
    (waits,) = boss.graph.get_state(config).interrupts
    assert f"approval {own.id!r} waits at agent 'boss', not at this pause" in waits.value[
        "error"]
    assert paid == [] and [p.status for p in boss.pending_approvals(run_id=first.run_id)] == [
        "pending", "pending"]
