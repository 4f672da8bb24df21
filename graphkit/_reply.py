"""A user's reply that comes as graph input while a tool of the turn is suspended.

The Agent API hands a new message to the paused gate in its resume value. A LangGraph server
client (Studio, Agent Chat UI) sends it as plain graph input, which LangGraph runs from the
model node. With auto-resume on, the model node answers the suspension here, in the same node
execution: from that input alone, as its authenticated sender, in the ledger (`judge`; the gate
verifies the decision again before it applies it). What else waits is declined as superseded,
as the API's message declines it. The reply is queued in the same write that takes it out of
the conversation, and the gate appends it once every call of the turn has its answer.

The same door takes a message that comes while a call of the paused turn was decided since
the pause (in the inbox, say), with or without auto-resume: the decision stands, as it does
when the message comes through the Agent API. What still waits is declined as superseded, the
message is queued, and the gate applies the decision, runs the call, and appends the message.

The plan is the ledger's, and the ledger's rows must also say that no call of the turn was
claimed or ran, and that each waits on a pending record or was decided since the pause.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig

from graphkit._approvals import Extractor, parsed_messages
from graphkit._input import brought_by_this_run
from graphkit._ledger import DONE, ApprovalRow, WaitingRow, queued_id, same_queued
from graphkit._new_message import (
    BY_NEW_MESSAGE,
    asked_unseen,
    says_nothing,
    stop_delegations,
)
from graphkit._planner import GateContext, Planner
from graphkit._review import auto_resume, identity_of, supersede
from graphkit._state import CallPlan, TurnPlan
from graphkit.errors import GraphkitError
from graphkit.tools import GraphkitTool

__all__ = ["Reply", "answer_reply", "left_queued", "reply_to_suspension",
           "turn_settled", "turn_span"]


@dataclass(frozen=True, slots=True)
class Reply:
    """The user's new messages, and the calls of the paused turn that wait on them."""

    messages: list[AnyMessage]
    waiting: list[CallPlan]
    pending: frozenset[str]
    """Ids of the waiting records the ledger holds as pending for their call."""
    auto: bool = False
    """Whether auto-resume may read a suspended tool's data from the reply."""
    dropped: tuple[AnyMessage, ...] = ()
    """Words a client wrote around the reply, as the model's or the system's (no model wrote
    them over a call without its result): taken out of the conversation with the reply."""
    below: tuple[tuple[tuple[str, ...], Mapping[str, Any]], ...] = ()
    """What waits beneath the turn's delegations: (the delegations it works for, its
    record) each. The reply supersedes what of it is pending (a decision taken there since
    runs first), then stops the delegations no decision beneath works for."""


def turn_span(messages: list[AnyMessage], ai_message_id: Any) -> tuple[int, int] | None:
    """Where a turn (its AI message) is in the conversation, and where the messages after
    its results start; None when it is not there."""
    turn = next((i for i, m in enumerate(messages) if m.id == ai_message_id), None)
    if turn is None or not isinstance(messages[turn], AIMessage):
        return None
    later = turn + 1
    while later < len(messages) and isinstance(messages[later], ToolMessage):
        later += 1
    return turn, later


def reply_to_suspension(plan: TurnPlan | None, messages: list[AnyMessage],
                        options: Mapping[str, Any], planner: Planner, ctx: GateContext,
                        config: RunnableConfig) -> Reply | None:
    """The user's messages after a turn paused at the gate that the gate is to settle: with a
    suspended tool auto-resume may read its data from, or with a call someone decided since
    the pause (in the inbox, say: that decision stands, as it does when the message comes
    through the Agent API); None otherwise (a turn stopped any other way is superseded as
    before, by `_client_writes.stopped_turn`, with the ledger's fence for calls in flight)."""
    auto = bool(planner.settings.auto_resume_suspended_tools
                or options.get("auto_resume_suspended_tools") is True)
    where = turn_span(messages, plan["ai_message_id"]) if plan is not None else None
    if plan is None or where is None:
        return None
    turn, later = where
    # Words a client wrote over the paused turn (a `Command(update=...)`, `update_state`,
    # graph input) around the user's message, as the model's or the system's: no model wrote
    # them over a call without its result, and they end nothing; the decision taken since
    # still runs first (they stood in its way, and it was superseded: helper-81, helper-83).
    tail = messages[later:]
    words = tuple(m for m in tail if _words(m))
    newer = [m for m in tail if not _words(m)]
    if (not newer or not all(isinstance(m, HumanMessage) and m.id is not None for m in newer)
            or any(m.id is None for m in words) or all(says_nothing(m) for m in newer)):
        return None  # (no words at all: no user message, dropped as a client's write is)
    queued = {queued_id(q.message): q.message for q in ctx.queue_rows()}
    if not all(same_queued(queued.get(m.id), m) for m in newer):
        return None  # the queue keeps the message it holds under that id: this one is not taken
    answered = {m.tool_call_id for m in messages[turn + 1:later] if isinstance(m, ToolMessage)}
    waiting = [c for c in plan["calls"] if c["tool_call_id"] not in answered]
    asked = {c.get("id") for c in getattr(messages[turn], "tool_calls", [])} - answered
    if {c["tool_call_id"] for c in waiting} != asked or len(waiting) != len(asked):
        return None  # the plan does not account for every call of the turn
    records = [r for c in waiting for r in (c["approval"], c["suspension"]) if r is not None]
    if not waiting or not all(c.get("answer") is None for c in waiting):
        return None
    # a delegation's: what its subagents wait on (a state write ended the task they waited
    # in: the decision taken there was lost, the payment dropped, and the run listed as
    # ready for good: helper-91)
    below = {c["key"]: _beneath(c, ctx) for c in waiting if c["node"] != "tools"}
    rows = ctx.ledger.approvals(r["id"] for r in records)
    # What the ledger holds as pending, and what it holds as decided since the pause (the
    # gate has not applied it: the plan still says pending).
    pending: set[str] = set()
    decided: set[str] = set()
    for call in waiting:
        for record in (call["approval"], call["suspension"]):
            held = rows.get(record["id"]) if record is not None else None
            if record is None or held is None or not _of_call(held, record, call, ctx):
                continue
            if not held.decided:
                pending.add(record["id"])
            elif record.get("status") == "pending":
                decided.add(record["id"])
    for waits in below.values():
        for w, _ in waits:
            (decided if w.row.decided else pending).add(w.row.approval_id)
    for call in waiting:
        row = ctx.ledger.call(call["key"])
        if row is not None and row.thread_id == ctx.thread_id and row.executed == DONE:
            # a delegation an earlier reply stopped, whose gate has not answered it yet: its
            # node answers so (a second message then swept the turn, and a decided call
            # below the other delegation never ran: helper-93); or a call that ran beside
            # the calls that wait, its result in the step they interrupted: its node
            # answers it as recorded (the turn was swept, and the payment a reviewer
            # approved below never ran: helper-97)
            continue
        if row is None or row.thread_id != ctx.thread_id or row.executed is not None:
            return None  # unknown, claimed, or ran
        if not (below.get(call["key"]) or any(
                r is not None and r["id"] in pending | decided
                for r in (call["approval"], call["suspension"]))) and not (
                # a tool that suspended itself beside the calls that wait, in the step they
                # interrupted: its gate asks once the turn goes on (the turn was swept, and
                # the payment a reviewer approved below never ran: helper-98)
                call["suspension"] is None and ctx.ledger.asked(call["key"], ctx.thread_id)):
            return None  # waits on nothing the ledger knows
    # Resume data is read from one user message and nothing else, the input of the run that
    # reads it: messages that piled up unread (a run stopped before the model read them, a
    # state write) came from nobody this run can name.
    reads = auto and len(newer) == 1 and any(
        c["suspension"] is not None and c["suspension"]["id"] in pending
        and _resumable(planner, c) for c in waiting)
    reads = reads and brought_by_this_run(config, newer[0])
    if not (reads or decided):
        return None
    return Reply(messages=newer, waiting=waiting, pending=frozenset(pending), auto=reads,
                 dropped=words, below=tuple((tuple(chain), w.record)
                                            for waits in below.values() for w, chain in waits))


def _beneath(call: CallPlan, ctx: GateContext) -> list[tuple[WaitingRow, list[str]]]:
    """What the subagents of a delegation call (at any depth) wait on, each with the
    delegations it works for up to that call (its own first)."""
    depth = len(ctx.path)
    rows = [w for w in ctx.ledger.waiting_rows(thread_id=ctx.thread_id)
            if w.waiting and w.row.call_key is not None and len(w.row.agent_path) > depth
            and list(w.row.agent_path[:depth]) == list(ctx.path)]
    links = ctx.ledger.call_links(str(w.row.call_key) for w in rows)
    found: list[tuple[WaitingRow, list[str]]] = []
    for w in rows:
        link = links.get(str(w.row.call_key))
        chain = ctx.ledger.delegations_of(link.turn_key) if link is not None else []
        if call["key"] in chain:
            found.append((w, chain[:chain.index(call["key"]) + 1]))
    return found


def _words(message: AnyMessage) -> bool:
    """Words that are not a user's: the model's (without calls) or the system's."""
    return (isinstance(message, AIMessage) and not message.tool_calls) or isinstance(
        message, SystemMessage)


def answer_reply(reply: Reply, ctx: GateContext, planner: Planner, extract: Extractor | None,
                 config: RunnableConfig) -> None:
    """Take what the reply answers, in the ledger, as its sender: resume data for suspended
    tools auto-resume may read it for (`Reply.auto`; an approvers policy judges the sender;
    anything refused or unreadable leaves the tool suspended, asking again), and decline the
    rest that is pending as superseded (a decision taken since the pause stands). A message
    never approves."""
    said: list[BaseMessage] = list(reply.messages)
    for call in reply.waiting:
        suspension = call["suspension"]
        if reply.auto and suspension is not None and suspension["id"] in reply.pending and (
                _resumable(planner, call)):
            auto_resume(ctx.ledger, suspension,
                        extract(call, said) if extract is not None else None,
                        decided_by=identity_of(config), approvers=planner.settings.approvers,
                        tool=planner.tools.get(call["tool_name"]), thread_id=ctx.thread_id,
                        run_id=ctx.run_id, identity_required=True)
            continue
        for record in (call["approval"], suspension):
            if record is not None and record["id"] in reply.pending:
                supersede(ctx.ledger, record, comment=BY_NEW_MESSAGE, thread_id=ctx.thread_id,
                          run_id=ctx.run_id, decided_by=identity_of(config))
    for _, below in reply.below:
        if below["id"] in reply.pending:
            supersede(ctx.ledger, below, comment=BY_NEW_MESSAGE, thread_id=ctx.thread_id,
                      run_id=ctx.run_id, decided_by=identity_of(config))
    # a question a tool asked in the step its gate has not ended (beside a delegation that
    # waits) was asked of nobody: superseded too (left, it was asked again: helper-146)
    ctx.ledger.settle(asked_unseen(ctx.ledger, ctx.thread_id), thread_id=ctx.thread_id)
    stop_delegations(ctx.ledger, ((chain, record["id"]) for chain, record in reply.below),
                     thread_id=ctx.thread_id)


def left_queued(messages: list[AnyMessage], kept: Sequence[tuple[str, dict[str, Any]]] = ()
                ) -> tuple[list[AnyMessage], list[BaseMessage]]:
    """The user's messages queued for after a turn's answers that no gate appended (the run
    stopped before the gate did, then other input settled the turn): they go right after the
    turn's answers, before newer messages, so nothing the user said is lost. `kept` is the
    ledger's queue ((turn's AI message id, serialised message)); only user messages, each as
    it parses, are taken. A turn not yet settled is still the gate's: it appends its own
    when it settles. Returns the conversation and the writes."""
    present = {m.id for m in messages}
    by_turn: dict[str, list[dict[str, Any]]] = {}
    for ai_id, message in kept:  # (one the conversation has costs no parse, no turn lookup)
        if queued_id(message) not in present:
            by_turn.setdefault(ai_id, []).append(message)
    result = list(messages)
    first: int | None = None
    for ai_id, entries in by_turn.items():
        span = turn_span(result, ai_id)
        if span is not None and turn_settled(result, span):  # never inside an unanswered turn
            result, first = _insert(result, span[1], entries, first)
    if first is None:
        return messages, []
    tail = result[first:]
    writes: list[BaseMessage] = [*(RemoveMessage(id=str(m.id)) for m in messages[first:]),
                                 *tail]
    return result, writes


def turn_settled(messages: list[AnyMessage], span: tuple[int, int]) -> bool:
    """Whether every call of the turn at `span` (`turn_span`) has its result."""
    turn, later = span
    answered = {m.tool_call_id for m in messages[turn + 1:later] if isinstance(m, ToolMessage)}
    return all(c.get("id") in answered for c in getattr(messages[turn], "tool_calls", []) or [])


def _insert(messages: list[AnyMessage], at: int, entries: Sequence[Any], first: int | None
            ) -> tuple[list[AnyMessage], int | None]:
    """`messages` with the queued user messages among `entries` that it lacks inserted at
    `at`; and the earliest index changed so far."""
    present = {m.id for m in messages}
    missing: list[AnyMessage] = []
    for entry in entries:
        with contextlib.suppress(GraphkitError):
            (message,) = parsed_messages([entry], what="a queued message")
            if (isinstance(message, HumanMessage) and message.id is not None
                    and message.id not in present):
                missing.append(message)
                present.add(message.id)
    if not missing:
        return messages, first
    return [*messages[:at], *missing, *messages[at:]], at if first is None else min(first, at)


def _of_call(row: ApprovalRow, record: Mapping[str, Any], call: CallPlan,
             ctx: GateContext) -> bool:
    """Whether the ledger's row is this record's, of this call, in this thread."""
    return (row.thread_id == ctx.thread_id and row.call_key == call["key"]
            and row.kind == record["kind"])


def _resumable(planner: Planner, call: CallPlan) -> bool:
    tool = planner.tools.get(call["tool_name"])
    return isinstance(tool, GraphkitTool) and tool.resume_schema is not None
