"""Forged state is harmless: arbitrary client writes to the graph's state (`update_state` on
any channel, `Command(update=..., goto=...)`, `Send` to any node with any payload), mixed with
decisions, new messages and replays of old checkpoints, never

- run a gated call without an approved decision for exactly its arguments,
- run an approved call more than once,
- lose a message the user sent,

and the thread stays usable: a new message afterwards starts a turn (or a typed error says
why not). Bounded for CI; GRAPHKIT_LONG_TESTS=1 runs many more examples.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, Send

from graphkit import Agent, Inbox, create_tool
from graphkit.errors import GraphkitError
from graphkit.testing import ScriptedChatModel
from graphkit.types import args_digest

LONG = os.environ.get("GRAPHKIT_LONG_TESTS") == "1"

junk = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(
        ["", "approved", "pending", "rejected", "tools", "c1", "call_x", "apr_x", "pay"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["status", "id", "key", "args", "answer", "approval", "calls",
                         "tool_call_id", "tool_name", "node", "amount", "kind"]),
        inner, max_size=3),
    max_leaves=8)
"""Values a client might write anywhere."""

FIELDS = ["status", "id", "key", "args", "answer", "approval", "suspension", "tool_call_id",
          "tool_name", "node", "allowed_decisions", "args_digest", "call_key", "metadata"]
CHANNELS = ["turn", "messages", "options", "reports"]
NODES = ["model", "approval_gate", "tools"]

operation = st.one_of(
    st.tuples(st.just("say"), st.integers(1, 9)),
    st.tuples(st.just("approve"), st.booleans()),
    st.tuples(st.just("edit"), st.integers(1, 9)),
    st.tuples(st.just("decline"), st.booleans()),
    st.tuples(st.just("inbox"), st.booleans()),
    st.tuples(st.just("forge_field"), st.sampled_from(FIELDS), junk),
    st.tuples(st.just("forge_channel"), st.sampled_from(CHANNELS), junk,
              st.sampled_from([*NODES, None])),
    st.tuples(st.just("goto"), st.sampled_from(NODES), st.sampled_from(CHANNELS), junk),
    st.tuples(st.just("send"), st.sampled_from(NODES), junk),
    st.tuples(st.just("replay"), st.integers(0, 6)),
)


class World:
    """One agent on one thread, the calls that really ran, and what the user said."""

    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []
        self.said: list[str] = []

        @create_tool(needs_approval=True)
        def pay(amount: int) -> str:
            """Pay."""
            self.ran.append({"amount": amount})
            return f"paid {amount}"

        @create_tool
        def lookup(key: str) -> str:
            """Look up."""
            return f"value of {key}"

        def reply(messages: list[Any]) -> Any:
            last = messages[-1]
            if isinstance(last, HumanMessage):
                amount = int(str(last.content).rsplit(" ", 1)[-1]) if str(
                    last.content).rsplit(" ", 1)[-1].isdigit() else 1
                return AIMessage("", tool_calls=[  # the model reuses its ids every turn
                    {"name": "pay", "args": {"amount": amount}, "id": "c1"},
                    {"name": "lookup", "args": {"key": "k"}, "id": "c2"}])
            return "ok"

        self.agent = Agent(name="billing", tools=[pay, lookup], model=ScriptedChatModel(reply))
        self.thread_id: str | None = None
        self.run_id: str | None = None

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}}

    def plan(self) -> dict[str, Any] | None:
        values = self.agent.graph.get_state(self.config).values
        plan = values.get("turn") if isinstance(values, dict) else None
        return plan if isinstance(plan, dict) else None

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        agent = self.agent
        if kind == "say":
            text = f"pay {op[1]}"
            result = agent.generate(text, thread_id=self.thread_id)
            self.said.append(text)
            self.thread_id, self.run_id = result.thread_id, result.run_id
            return
        if self.thread_id is None or self.run_id is None:
            return
        if kind == "approve":
            agent.approve_tool_call_generate(run_id=self.run_id, tool_call_id="c1",
                                             decided_by="ops",
                                             remember="thread" if op[1] else "once")
        elif kind == "edit":
            agent.approve_tool_call_generate(run_id=self.run_id, tool_call_id="c1",
                                             args={"amount": op[1]}, decided_by="ops")
        elif kind == "decline":
            agent.decline_tool_call_generate(run_id=self.run_id, decided_by="ops")
        elif kind == "inbox":
            inbox = Inbox(agent._storage, agents=[agent])
            for pending in inbox.pending():
                if op[1]:
                    inbox.approve(pending.id, decided_by="ops")
                else:
                    inbox.decline(pending.id, decided_by="ops")
        elif kind == "forge_field":
            plan = self.plan()
            if plan:
                for call in plan.get("calls") or []:
                    if isinstance(call, dict):
                        target = call.get("approval") if isinstance(
                            call.get("approval"), dict) else call
                        target[op[1]] = op[2]
                agent.graph.update_state(self.config, {"turn": plan})
        elif kind == "forge_channel":
            agent.graph.update_state(self.config, {op[1]: op[2]}, as_node=op[3])
        elif kind == "goto":
            agent.graph.invoke(Command(update={op[2]: op[3]}, goto=op[1]), self.config)
        elif kind == "send":
            agent.graph.invoke(Command(goto=[Send(op[1], op[2])]), self.config)
        elif kind == "replay":
            history = list(agent.graph.get_state_history(self.config))
            if history:
                old = history[min(op[1], len(history) - 1)].config
                try:
                    agent.graph.invoke(None, old)
                finally:
                    # a replay forks the thread at an older checkpoint (LangGraph's time
                    # travel): what the user said after it lives on in the older branch
                    values = agent.graph.get_state(self.config).values
                    self.said = [str(m.content) for m in values.get("messages") or []
                                 if isinstance(m, HumanMessage)]

    def approved_digests(self) -> Counter[str]:
        """How many times the ledger let each argument digest of `pay` run: approved or
        edited decisions and grants, each good for one execution."""
        allowed: Counter[str] = Counter()
        if self.thread_id is None:
            return allowed
        for entry in self.agent._storage.ledger.read_audit(thread_id=self.thread_id):
            if entry.get("tool_name") != "pay":
                continue
            if entry.get("event") in ("approved", "auto_approved"):
                allowed[args_digest(entry.get("args_before") or {})] += 1
            elif entry.get("event") == "edited":
                allowed[args_digest(entry.get("args_after") or {})] += 1
        return allowed

    def check(self) -> None:
        allowed = self.approved_digests()
        ran = Counter(args_digest(args) for args in self.ran)
        for digest, times in ran.items():
            assert times <= allowed[digest], (
                f"pay ran {times}x with digest {digest} but was approved {allowed[digest]}x; "
                f"ran={self.ran}")


@settings(max_examples=150 if LONG else 25, deadline=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=st.lists(operation, min_size=1, max_size=8))
def test_forged_state_never_runs_an_unapproved_call_or_loses_the_thread(
        ops: list[tuple[Any, ...]]) -> None:
    world = World()
    world.apply(("say", 5))
    for op in ops:
        with contextlib.suppress(GraphkitError):
            try:
                world.apply(op)
            except GraphkitError:
                raise
            except Exception:
                if op[0] in ("say", "approve", "edit", "decline", "inbox"):
                    raise  # a legitimate door never fails with an untyped error
                # a forged write the graph itself refuses (LangGraph's own checks) is fine
        world.check()
    # the thread is still usable: a new message starts a turn, and nothing said is lost
    result = world.agent.generate("pay 7", thread_id=world.thread_id)
    world.said.append("pay 7")
    assert result.finish_reason in ("suspended", "stop")
    messages = world.agent.graph.get_state(world.config).values["messages"]
    heard = [m.content for m in messages if isinstance(m, HumanMessage)]
    for text in world.said:
        assert text in heard, (text, heard)
    assert not any(isinstance(m, ToolMessage) and m.content == "paid 7" for m in messages) \
        or world.approved_digests()[args_digest({"amount": 7})] > 0
    world.check()


def test_a_queued_message_survives_a_well_typed_write_of_the_plan() -> None:
    """Attack (adversary review): a reply queued for after the turn (beside a suspended tool)
    was kept only in the plan's `queued` list, in client-writable state; a well-typed write
    of `turn` (None) dropped it. The ledger keeps the queue too."""
    from tests.test_replies import _said, weather_agent

    log: list[str] = []
    agent = weather_agent(log, auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    config = {"configurable": {"thread_id": first.thread_id}}
    agent.generate("my name is Bob, and", thread_id=first.thread_id)
    agent.graph.update_state(config, {"turn": None})
    later = agent.generate("Paris", thread_id=first.thread_id)
    if later.finish_reason == "suspended":  # the tool asks again: answer it, the turn settles
        later = agent.resume_generate({"city": "Oslo"}, run_id=later.run_id)
    said = _said(agent.graph.get_state(config).values["messages"])
    assert "my name is Bob, and" in said and said.count("my name is Bob, and") == 1


def test_queued_messages_keep_their_order_when_a_client_drops_one_from_the_plan() -> None:
    """Attack (adversary review): of two queued replies the client kept only the first in
    the plan; the gate delivered it and the ledger's copy of the second came in front of it.
    The queue is the ledger's alone now: the client's write is not taken, and the gate
    delivers in the ledger's order."""
    from tests.test_replies import _said, weather_agent

    agent = weather_agent([], auto_resume_suspended_tools=True)
    first = agent.generate("weather?")
    config = {"configurable": {"thread_id": first.thread_id}}
    agent.generate("M1 hmm not sure", thread_id=first.thread_id)
    agent.generate("M2 still thinking", thread_id=first.thread_id)
    queue = [m for _, m in agent._storage.ledger.queue_of(first.thread_id, agent.name)]
    plan = {**agent.graph.get_state(config).values["turn"],
            "queued": [q for q in queue if q["data"]["content"].startswith("M1")]}
    agent.graph.invoke(Command(update={"turn": plan}, goto="approval_gate"), config)
    done = agent.generate("Paris", thread_id=first.thread_id)
    if done.finish_reason == "suspended":
        agent.resume_generate({"city": "Paris"}, run_id=done.run_id)
    said = _said(agent.graph.get_state(config).values["messages"])
    assert said == ["weather?", "M1 hmm not sure", "M2 still thinking", "Paris"]


def test_a_plan_pointing_at_a_settled_turn_never_shows_the_model_an_unanswered_call() -> None:
    """Attack (adversary review): a well-typed plan naming an older, answered AI message; the
    open turn's calls were left unanswered before the next user message (a conversation an
    LLM API refuses). The turn the plan no longer accounts for is swept and answered."""
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn
    from tests.test_suspension import city_from_reply, weather_tool

    received: list[list[Any]] = []

    def replies(messages: list[Any]) -> Any:
        received.append(list(messages))
        last = [m for m in messages if isinstance(m, HumanMessage)][-1]
        if last.content == "hi":
            return "hello"
        results = [m for m in messages if isinstance(m, ToolMessage)]
        return f"done: {results[-1].content}" if results else turn(call("weather", {}, "w1"))

    agent = Agent(name="wx", tools=[weather_tool([])], auto_resume_suspended_tools=True,
                  model=ScriptedChatModel(replies, structured=city_from_reply))
    first = agent.generate("hi")
    config = {"configurable": {"thread_id": first.thread_id}}
    hello = [m for m in agent.graph.get_state(config).values["messages"]
             if isinstance(m, AIMessage)][-1]
    agent.generate("weather?", thread_id=first.thread_id)
    agent.generate("M1 not sure yet", thread_id=first.thread_id)
    agent.graph.update_state(config, {"turn": {"ai_message_id": hello.id, "calls": []}})
    agent.generate("M2 Paris", thread_id=first.thread_id)
    for conversation in received:
        for index, message in enumerate(conversation):
            if isinstance(message, AIMessage) and message.tool_calls:
                after = conversation[index + 1:]
                results = {m.tool_call_id for m in after[:len(message.tool_calls)]
                           if isinstance(m, ToolMessage)}
                assert {c["id"] for c in message.tool_calls} <= results, conversation
    said = [m.content for m in agent.graph.get_state(config).values["messages"]
            if isinstance(m, HumanMessage)]
    assert said == ["hi", "weather?", "M1 not sure yet", "M2 Paris"]
