"""Property tests: random conversations of tool calls, decisions, resumes, new messages and
process restarts keep graphkit's promises.

Invariants, checked after every operation: a declined call never runs; an approved call runs
exactly once; an edited call runs with the edited arguments; a pending approval never
disappears undecided; the message history is valid after every completed step.
GRAPHKIT_LONG_TESTS=1 runs many more examples.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from pydantic import BaseModel

from graphkit import Agent, GenerateResult, PendingApproval, ToolContext, create_tool
from graphkit.testing import ScriptedChatModel

LONG = os.environ.get("GRAPHKIT_LONG_TESTS") == "1"

Call = tuple[str, int]  # (tool kind, argument)
calls = st.tuples(st.sampled_from(["static", "predicate", "plain", "suspend"]),
                  st.integers(0, 9))
turns = st.lists(st.lists(calls, min_size=0, max_size=4), min_size=1, max_size=5)
operations = st.lists(
    st.tuples(st.sampled_from(["approve", "decline", "edit", "resume", "message", "restart"]),
              st.integers(0, 3)),
    min_size=1, max_size=12)


class Answer(BaseModel):
    value: int


class World:
    """One thread on a real SQLite file, and everything that really ran."""

    def __init__(self, script: list[list[Call]], directory: Path) -> None:
        self.script = script
        self.url = f"sqlite:///{directory / 'prop.db'}"
        self.ran: list[tuple[str, str, dict[str, Any]]] = []  # (tool_call_id, tool, args)
        self.declined: set[str] = set()
        self.approved: set[str] = set()
        self.edited: dict[str, dict[str, Any]] = {}
        self.run_id: str | None = None
        self.thread = "prop-thread"
        self.messages_sent = 0
        self.agent = self.build()

    def build(self) -> Agent:
        world = self

        def record(ctx_id: str | None, name: str, args: dict[str, Any]) -> str:
            world.ran.append((str(ctx_id), name, args))
            return f"{name} ran"

        @create_tool(needs_approval=True)
        def static(n: int, ctx: ToolContext) -> str:
            """Always asks."""
            return record(ctx.tool_call_id, "static", {"n": n})

        @create_tool(needs_approval=lambda a: a["n"] % 2 == 0)
        def predicate(n: int, ctx: ToolContext) -> str:
            """Asks for even n."""
            return record(ctx.tool_call_id, "predicate", {"n": n})

        @create_tool
        def plain(n: int, ctx: ToolContext) -> str:
            """Never asks."""
            return record(ctx.tool_call_id, "plain", {"n": n})

        @create_tool(resume_schema=Answer)
        def suspend(n: int, ctx: ToolContext) -> Any:
            """Asks the user for a value while running."""
            if ctx.resume_data is None:
                return ctx.suspend({"message": f"value for {n}?"})
            return record(ctx.tool_call_id, "suspend", {"n": n, "value": ctx.resume_data.value})

        def reply(messages: list[BaseMessage]) -> AIMessage:
            index = sum(isinstance(m, AIMessage) for m in messages)
            if index >= len(world.script) or (isinstance(messages[-1], ToolMessage) and \
                    index >= len(world.script)):
                return AIMessage("end")
            turn = world.script[index]
            return AIMessage(f"turn {index}", tool_calls=[
                {"name": kind, "args": {"n": arg}, "id": f"c{index}-{k}"}
                for k, (kind, arg) in enumerate(turn)])

        return Agent(name="prop", model=ScriptedChatModel(reply),
                     tools=[static, predicate, plain, suspend], checkpointer=self.url)

    def pending(self) -> list[PendingApproval]:
        if self.run_id is None:
            return []
        return [p for p in self.agent.pending_approvals(run_id=self.run_id)
                if p.status == "pending"]

    def apply(self, op: str, pick: int) -> tuple[GenerateResult | None, str | None]:
        """Do `op`; returns the result and the tool call it decided (if any)."""
        if op == "restart":
            self.agent = self.build()  # a new process opening the same file
            return None, None
        if op == "message" or self.run_id is None:
            self.messages_sent += 1
            result = self.agent.generate(f"message {self.messages_sent}", thread_id=self.thread)
            self.run_id = result.run_id
            return result, None
        waiting = self.pending()
        approvals = [p for p in waiting if p.kind == "approval"]
        suspensions = [p for p in waiting if p.kind == "suspension"]
        if op in ("approve", "decline", "edit") and approvals:
            target = approvals[pick % len(approvals)]
            if op == "decline":
                self.declined.add(target.tool_call_id)
                return self.agent.decline_tool_call_generate(
                    run_id=self.run_id, tool_call_id=target.tool_call_id), target.tool_call_id
            args = {"n": target.args["n"] + 100} if op == "edit" else None
            self.approved.add(target.tool_call_id)
            if args is not None:
                self.edited[target.tool_call_id] = args
            return self.agent.approve_tool_call_generate(
                run_id=self.run_id, tool_call_id=target.tool_call_id, args=args), \
                target.tool_call_id
        if op == "resume" and suspensions:
            target = suspensions[pick % len(suspensions)]
            return self.agent.resume_generate({"value": pick}, run_id=self.run_id,
                                              tool_call_id=target.tool_call_id), \
                target.tool_call_id
        return None, None


def check_history(messages: list[BaseMessage]) -> None:
    """Every tool call is answered once, before the conversation moves on."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            assert not open_calls, f"AI message while {open_calls} are unanswered"
            open_calls = {c["id"] for c in message.tool_calls if c.get("id")}
        elif isinstance(message, ToolMessage):
            assert message.tool_call_id in open_calls, f"stray answer {message.tool_call_id}"
            open_calls.discard(message.tool_call_id)
        elif isinstance(message, HumanMessage):
            assert not open_calls, f"user message while {open_calls} are unanswered"


@settings(max_examples=120 if LONG else 12, deadline=None, derandomize=not LONG,
          suppress_health_check=[HealthCheck.too_slow])
@given(script=turns, ops=operations)
def test_random_conversations_keep_every_promise(script: list[list[Call]],
                                                 ops: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        world = World(script, Path(tmp))
        world.apply("message", 0)
        for op, pick in ops:
            before = {p.tool_call_id for p in world.pending()}
            result, decided = world.apply(op, pick)
            after = {p.tool_call_id for p in world.pending()}
            if op != "message":  # only a new message supersedes what waits
                assert before - {decided} <= after, "a pending approval vanished undecided"
            ran = Counter(call_id for call_id, _, _ in world.ran)
            assert not world.declined & set(ran), "a declined call ran"
            for call_id in world.approved:
                assert ran[call_id] == 1, f"approved {call_id} ran {ran[call_id]} times"
            for call_id, args in world.edited.items():
                assert next(a for c, _, a in world.ran if c == call_id)["n"] == args["n"]
            assert all(count == 1 for count in ran.values()), "a call ran twice"
            if result is not None:
                check_history(result.messages)
