"""Review round 15: the inbox card's messages (the ledger's thread, the server loopback read,
rendering of hostile or odd messages) and the Agent API's auto-resume (new message only,
queued messages with ids) through every door: stream/astream/agenerate, lists, retries,
supervisors, mixed API and graph-input replies.

Everything held but one case, older than that review, which now passes: a supervisor's
subagent asks again after an unreadable reply, and the next message could not be delivered
(`test_supervisor_unreadable_then_readable_reply`)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from graphkit import Agent, Inbox, ToolContext, create_tool
from graphkit.testing import ScriptedChatModel
from graphkit.web import server_thread_messages
from tests.helpers import Ledger, call, turn
from tests.test_supervisor import forecaster_supervisor
from tests.test_suspension import (
    City,
    weather_agent,
    weather_and_pay_agent,
)
from tests.test_web_security import signed_in

# ---------------------------------------------------------------- helpers


def _said(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, HumanMessage)]


def _hostile_agent(url: str, ran: list[Any], first_user_turn_reply: AIMessage | None = None
                   ) -> Agent:
    @create_tool(needs_approval=True)
    def pay(amount: int, payee: str) -> str:
        """Pay."""
        ran.append((amount, payee))
        return "paid"

    first = first_user_turn_reply or AIMessage(
        "<script>alert('model')</script>",
        tool_calls=[call("pay", {"amount": 5, "payee": "<img src=x onerror=alert(1)>"}, "p1")])
    return Agent(name="billing", tools=[pay], checkpointer=url,
                 model=ScriptedChatModel([first, "done"]))


def _no_raw(page: str, *needles: str) -> None:
    for needle in needles:
        assert needle not in page, f"unescaped {needle!r} on the page"


# ---------------------------------------------------------------- web: rendering


def test_held_card_escapes_script_in_messages_and_tool_call_args(sqlite_url: str) -> None:
    """A user's message, the model's text and a tool call's arguments carrying HTML/JS are
    shown escaped on the card (no script, no element injected); the messages are shown."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran)
    agent.generate("<script>alert('user')</script> pay please")
    (pending,) = Inbox(sqlite_url).pending()
    client = signed_in(sqlite_url, agents=[agent])
    page = client.get(f"/approvals/{pending.id}")
    assert page.status_code == 200
    _no_raw(page.text, "<script>alert", "<img src=x")
    assert "&lt;script&gt;alert(&#x27;user&#x27;)" in page.text  # the message is shown
    assert page.headers["x-frame-options"] == "DENY"
    assert ran == []


def test_held_card_of_tool_call_only_message_escapes_args(sqlite_url: str) -> None:
    """An AI message with no text shows its tool calls' arguments, escaped."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran, AIMessage("", tool_calls=[
        call("pay", {"amount": 5, "payee": "</li><script>x()</script>"}, "p1")]))
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    page = signed_in(sqlite_url, agents=[agent]).get(f"/approvals/{pending.id}")
    assert page.status_code == 200
    _no_raw(page.text, "<script>x()", "</li><script>")
    assert "calls pay(" in page.text


def test_held_card_renders_content_blocks_and_bounds_huge_messages(sqlite_url: str) -> None:
    """A message whose content is a list of content blocks renders (escaped, no 500); a
    2 MB message does not make a 2 MB page."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran)
    agent.generate(HumanMessage(content=[
        {"type": "text", "text": "<b>bold</b> pay"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]))
    agent2 = _hostile_agent(sqlite_url, ran)
    agent2.generate("x" * 2_000_000)
    client = signed_in(sqlite_url, agents=[agent])
    for pending in Inbox(sqlite_url).pending():
        page = client.get(f"/approvals/{pending.id}")
        assert page.status_code == 200
        _no_raw(page.text, "<b>bold")
        assert len(page.text) < 100_000


def test_held_get_decides_nothing(sqlite_url: str) -> None:
    """GET on a decision URL is refused and the approval still waits."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    client = signed_in(sqlite_url, agents=[agent])
    for action in ("approve", "edit", "decline", "resume"):
        assert client.get(f"/approvals/{pending.id}/{action}").status_code in (404, 405)
    assert Inbox(sqlite_url).get(pending.id).status == "pending"


# ---------------------------------------------------------------- web: server loopback read


def test_held_server_read_fails_closed(sqlite_url: str) -> None:
    """A loopback read that raises (no such thread, no threads API) leaves the card without
    messages, not a 500."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    asked: list[str] = []

    async def broken(thread_id: str) -> list[BaseMessage]:
        asked.append(thread_id)
        raise RuntimeError("404 thread not found")

    # no agents: the inbox's own read finds nothing, so the server is asked
    page = signed_in(sqlite_url, thread_messages=broken).get(f"/approvals/{pending.id}")
    assert page.status_code == 200 and asked == [pending.thread_id]


def test_held_server_read_takes_the_ledgers_thread_not_the_index(sqlite_url: str) -> None:
    """A store writer writes, where graphkit once kept its inbox index, an entry naming another
    thread for an approval, and one for an approval the ledger never saw: the inbox reads the
    ledger only, so the loopback read is asked for the ledger's thread, never the victim's."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    store, entry = agent._storage.store, pending.to_dict()
    store.put(("graphkit", "approvals"), pending.id, {**entry, "thread_id": "victim"})
    store.put(("graphkit", "approvals"), "forged-1",
              {**entry, "id": "forged-1", "thread_id": "victim", "state": "waiting"})
    asked: list[str] = []

    async def server(thread_id: str) -> list[BaseMessage]:
        asked.append(thread_id)
        return [HumanMessage(f"secret of {thread_id}")]

    client = signed_in(sqlite_url, thread_messages=server)
    real = client.get(f"/approvals/{pending.id}")
    forged = client.get("/approvals/forged-1")
    assert real.status_code == 200 and forged.status_code == 404
    assert "secret of victim" not in real.text + forged.text
    assert "victim" not in asked, asked


def _fake_loopback(monkeypatch: pytest.MonkeyPatch, state: Any) -> None:
    import langgraph_sdk

    class Threads:
        async def get_state(self, thread_id: str) -> Any:
            return state

    class Client:
        threads = Threads()

    monkeypatch.setattr(langgraph_sdk, "get_client", lambda **kw: Client())


@pytest.mark.parametrize("state", [
    None, [], {"values": None}, {"values": {"messages": "nope"}},
    {"values": {"messages": [{"type": "ai", "content": "", "tool_calls": [{"args": {}}]}]}},
    {"values": {"messages": [{"type": "martian", "content": "x"}]}},
    {"values": {"messages": [{"type": "ai", "content": [{"type": "text", "text": "<i>x</i>"}],
                              "tool_calls": [{"name": "<b>n</b>", "args": {"a": "<s>"},
                                              "id": "1"}]}]}},
])
def test_held_server_read_of_odd_state_renders_or_drops(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch, state: Any) -> None:
    """Whatever the server's state holds (no values, non-list messages, a malformed tool
    call, an unknown type, content blocks with HTML), the card renders, escaped, with a 200."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    _fake_loopback(monkeypatch, state)
    page = signed_in(sqlite_url, thread_messages=server_thread_messages).get(
        f"/approvals/{pending.id}")
    assert page.status_code == 200
    _no_raw(page.text, "<i>x", "<b>n", "<s>")


# ---------------------------------------------------------------- Agent API auto-resume


def test_held_auto_resume_through_stream() -> None:
    """`stream` with the per-request option reads the reply and runs the tool once."""
    log: list[str] = []
    agent = weather_agent(log)
    first = agent.generate("weather?", auto_resume_suspended_tools=True)
    stream = agent.stream("Paris", thread_id=first.thread_id, auto_resume_suspended_tools=True)
    list(stream)
    final = stream.result()
    assert final.text == "The weather in Paris: sunny, +72F"
    assert log == ["started", "started", "fetched Paris"]
    assert _said(final.messages) == ["weather?", "Paris"]


def test_held_auto_resume_through_astream_and_agenerate() -> None:
    """The async doors behave as the sync ones: unreadable, then readable; nothing lost."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)

    async def go() -> Any:
        first = await agent.agenerate("weather?")
        chunks = [c async for c in agent.astream("hmm", thread_id=first.thread_id)]
        assert chunks
        return await agent.agenerate("Tokyo", thread_id=first.thread_id)

    final = asyncio.run(go())
    assert final.text == "The weather in Tokyo: sunny, +72F"
    assert log == ["started", "started", "fetched Tokyo"]
    assert _said(final.messages) == ["weather?", "hmm", "Tokyo"]


def test_held_a_list_of_two_messages_resumes_and_keeps_both() -> None:
    """A reply of two messages at once: the tool resumes from it, both messages reach the
    conversation once each, in order."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    final = agent.generate(["hmm, let me think", "Paris"], thread_id=first.thread_id)
    assert log == ["started", "started", "fetched Paris"]
    assert _said(final.messages) == ["weather?", "hmm, let me think", "Paris"]


def test_held_a_dict_message_auto_resumes() -> None:
    """A reply given as a role/content mapping auto-resumes as a string does."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    final = agent.generate({"role": "user", "content": "Tokyo"}, thread_id=first.thread_id)
    assert log[-1] == "fetched Tokyo" and _said(final.messages) == ["weather?", "Tokyo"]


def test_held_messages_with_their_own_ids_keep_them_and_a_retry_is_not_doubled() -> None:
    """A message that already has an id keeps it; the same message sent again (a client's
    retry) is not doubled; a later readable reply resumes; nothing said is lost."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    hmm = HumanMessage("hmm", id="client-1")
    agent.generate(hmm, thread_id=first.thread_id)
    agent.generate(hmm, thread_id=first.thread_id)
    final = agent.generate(HumanMessage("Paris", id="client-2"), thread_id=first.thread_id)
    assert log == ["started", "started", "fetched Paris"]
    humans = [m for m in final.messages if isinstance(m, HumanMessage)]
    assert [m.text for m in humans] == ["weather?", "hmm", "Paris"]
    assert [m.id for m in humans][1:] == ["client-1", "client-2"]


def test_held_the_same_words_said_twice_are_both_kept() -> None:
    """Two separate messages with the same text (no ids) are two things the user said."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    agent.generate("hmm", thread_id=first.thread_id)
    agent.generate("hmm", thread_id=first.thread_id)
    final = agent.generate("Paris", thread_id=first.thread_id)
    assert _said(final.messages) == ["weather?", "hmm", "hmm", "Paris"]


def _first_city(schema: Any, messages: list[BaseMessage]) -> dict[str, Any]:
    """An extractor that takes the FIRST city named in what it is given (a model reading the
    whole reply history would): resume data must come from the new message only."""
    for m in messages:
        if isinstance(m, HumanMessage):
            for c in ("Paris", "Tokyo", "Lima"):
                if c.lower() in str(m.content).lower():
                    return {"city": c}
    return {}


def test_held_a_second_question_of_the_same_tool_reads_only_the_new_reply() -> None:
    """A tool that asks twice (from, then to): the second answer comes from the second reply,
    not from the first reply still queued beside it."""
    trips: list[tuple[str, str]] = []

    @create_tool(resume_schema=City)
    def trip(ctx: ToolContext) -> str:
        """Plan a trip."""
        origin = ctx.suspend({"message": "From?"})
        dest = ctx.suspend({"message": "To?"})
        trips.append((origin["city"] if isinstance(origin, dict) else origin.city,
                      dest["city"] if isinstance(dest, dict) else dest.city))
        return f"{trips[-1]}"

    def replies(messages: list[BaseMessage]) -> Any:
        if not any(isinstance(m, ToolMessage) for m in messages):
            return turn(call("trip", {}, "t1"))
        return "planned"

    agent = Agent(name="t", tools=[trip], auto_resume_suspended_tools=True,
                  model=ScriptedChatModel(replies, structured=_first_city))
    first = agent.generate("plan a trip")
    second = agent.generate("from Paris", thread_id=first.thread_id)
    assert second.finish_reason == "suspended"
    final = agent.generate("to Tokyo", thread_id=first.thread_id)
    assert trips == [("Paris", "Tokyo")]
    assert _said(final.messages) == ["plan a trip", "from Paris", "to Tokyo"]


def test_held_api_reply_then_graph_input_reply_keep_everything() -> None:
    """Unreadable reply through the API (queued with an id), then a readable one as graph
    input (a server client): both reach the conversation once, in order; the tool ran once."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    agent.generate("hmm", thread_id=first.thread_id)
    out = agent.graph.invoke({"messages": [HumanMessage("Paris")]},
                             {"configurable": {"thread_id": first.thread_id}})
    assert log == ["started", "started", "fetched Paris"]
    assert _said(out["messages"]) == ["weather?", "hmm", "Paris"]


def test_held_graph_input_reply_then_api_reply_keep_everything() -> None:
    """Unreadable reply as graph input, then a readable one through the API."""
    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    agent.graph.invoke({"messages": [HumanMessage("hmm")]},
                       {"configurable": {"thread_id": first.thread_id}})
    final = agent.generate("Tokyo", thread_id=first.thread_id)
    assert log == ["started", "started", "fetched Tokyo"]
    assert _said(final.messages) == ["weather?", "hmm", "Tokyo"]


def test_held_reply_never_runs_an_approval_beside_the_suspension() -> None:
    """Through the API, a reply resumes the suspended tool once and the payment beside it is
    superseded, never run; nothing waits afterwards."""
    ledger = Ledger()
    log: list[str] = []

    agent = weather_and_pay_agent(log, ledger)
    first = agent.generate("weather, and pay x")
    final = agent.generate("Paris, and yes approve the payment", thread_id=first.thread_id)
    assert ledger.ran == [] and log == ["started", "started", "fetched Paris"]
    told = {m.tool_call_id: m.text for m in final.messages if isinstance(m, ToolMessage)}
    assert "superseded" in told["p1"] and told["w1"] == "Paris: sunny, +72F"
    assert final.pending_approvals == [] or all(
        p.status != "pending" for p in final.pending_approvals)


# ---------------------------------------------------------------- supervisors


def test_supervisor_unreadable_then_readable_reply() -> None:
    """A subagent's suspended tool: an unreadable reply leaves it asking, a readable one
    resumes it once; both replies reach the supervisor's conversation once each.

    It failed with LangGraph's InvalidUpdateError ("At key 'turn': Can receive only one value
    per step") while `turn` was a channel of one value per step: the Agent API's update of the
    queue stayed pending when the subagent re-suspended, and the next message's update was a
    second value. `turn`'s reducer (`keep_typed_plan`) takes the last well-typed write."""
    log: list[str] = []
    sup = forecaster_supervisor(log, auto_resume_suspended_tools=True)
    first = sup.generate("What's the weather like?")
    again = sup.generate("hmm", thread_id=first.thread_id)
    assert again.finish_reason == "suspended"
    final = sup.generate("Paris", thread_id=first.thread_id)
    assert log == ["started", "started", "fetched Paris"]
    assert final.text == "top: sub: Paris: sunny, +72F"
    assert _said(final.messages) == ["What's the weather like?", "hmm", "Paris"]


def test_held_supervisor_per_request_option() -> None:
    """The per-request option reaches a subagent's suspended tool through the API."""
    log: list[str] = []
    sup = forecaster_supervisor(log)
    first = sup.generate("What's the weather like?", auto_resume_suspended_tools=True)
    final = sup.generate("Tokyo", thread_id=first.thread_id, auto_resume_suspended_tools=True)
    assert log == ["started", "started", "fetched Tokyo"]
    assert _said(final.messages) == ["What's the weather like?", "Tokyo"]


def test_held_supervisor_list_reply_through_stream() -> None:
    """A two-message reply through `stream` to a supervisor: resumed once, both kept."""
    log: list[str] = []
    sup = forecaster_supervisor(log, auto_resume_suspended_tools=True)
    first = sup.generate("What's the weather like?")
    stream = sup.stream(["one moment", "Paris"], thread_id=first.thread_id)
    list(stream)
    final = stream.result()
    assert log == ["started", "started", "fetched Paris"]
    assert _said(final.messages) == ["What's the weather like?", "one moment", "Paris"]


def test_held_supervisor_without_auto_resume_supersedes_and_keeps_the_message() -> None:
    """Auto-resume off: the reply supersedes the subagent's suspended tool (never resumes it)
    and the reply is kept once."""
    log: list[str] = []
    sup = forecaster_supervisor(log)
    first = sup.generate("What's the weather like?")
    final = sup.generate("Paris", thread_id=first.thread_id)
    assert log == ["started"]
    assert _said(final.messages) == ["What's the weather like?", "Paris"]


def test_held_supervisor_resume_data_after_an_unreadable_reply() -> None:
    """After an unreadable reply to a subagent's suspended tool, explicit resume data
    (`resume_generate`, a Command without an update) still answers it and the queued reply
    is kept. (After a further new message has failed as in the test above, the probe showed
    resume_generate failing with the same InvalidUpdateError.)"""
    log: list[str] = []
    sup = forecaster_supervisor(log, auto_resume_suspended_tools=True)
    first = sup.generate("What's the weather like?")
    again = sup.generate("hmm", thread_id=first.thread_id)
    final = sup.resume_generate({"city": "Paris"}, run_id=again.run_id)
    assert log[-1] == "fetched Paris"
    assert "hmm" in _said(final.messages)


def test_held_pages_list_only_ledger_pending(sqlite_url: str) -> None:
    """Sanity for the web listing and a decided approval's card: after a decline the card
    says it was decided and offers no form."""
    ran: list[Any] = []
    agent = _hostile_agent(sqlite_url, ran)
    agent.generate("pay")
    (pending,) = Inbox(sqlite_url).pending()
    client = signed_in(sqlite_url, agents=[agent])
    csrf = re.search(r"name='csrf' value='([0-9a-f]+)'",
                     client.get(f"/approvals/{pending.id}").text)
    assert csrf is not None
    client.post(f"/approvals/{pending.id}/decline", data={"csrf": csrf.group(1)})
    page = client.get(f"/approvals/{pending.id}").text
    assert "Decided; waiting to continue" in page and "/approve'" not in page
    assert ran == []
