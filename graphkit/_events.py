"""Turning LangGraph stream parts and graph state into graphkit's chunks and results."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langgraph.types import Interrupt

from graphkit._approvals import (
    ARGS_WITHHELD,
    INTERRUPT_MARKER,
    answered_ids,
    last_turn_plan,
    waiting_records,
)
from graphkit._context import EVENT_KEY
from graphkit._ledger import Ledger, WaitingRow
from graphkit._secrets import masked_record
from graphkit.types import ApprovalRecord, FinishReason, PendingApproval, StreamChunk

__all__ = [
    "ChunkTranslator",
    "finish_reason",
    "pending_chunks",
    "pending_from_interrupts",
    "run_text",
    "suspend_payload",
]


def _text(message: BaseMessage) -> str:
    return str(message.text)


ArgsView = Callable[[Sequence[str], str, dict[str, Any]], dict[str, Any]]


class ChunkTranslator:
    """Maps `(namespace, mode, data)` parts of `graph.stream(..., subgraphs=True)` to chunks."""

    def __init__(self, run_id: str, root: str | None = None,
                 shown_args: ArgsView | None = None) -> None:
        self.run_id = run_id
        self.root = root
        """The agent whose graph streams: a subagent's chunks carry its `agent_path` below it."""
        self.shown_args = shown_args
        """A call's arguments as a view shows them (secrets masked), by agent path and tool."""

    def chunk(self, type_: Any, payload: dict[str, Any]) -> StreamChunk:
        """A chunk of its own: what it holds (a call's arguments, a result's content) is the
        run's, and a reader that changed it would change the run (helper-60)."""
        return StreamChunk(type_, copy.deepcopy(payload), self.run_id)

    def _path(self, namespace: tuple[str, ...]) -> dict[str, Any]:
        """`{"agent_path": [...]}` for a subagent's part (LangGraph names each subgraph call
        `node:task` in the namespace; a delegation's node is its subagent's key), else {}."""
        if not namespace:
            return {}
        return {"agent_path": [*([self.root] if self.root else []),
                               *(segment.partition(":")[0] for segment in namespace)]}

    def feed(self, namespace: tuple[str, ...], mode: str, data: Any) -> Iterator[StreamChunk]:
        if mode == "custom":
            if isinstance(data, dict) and data.get(EVENT_KEY) == "tool-approval":
                yield self.chunk("tool-approval", {k: v for k, v in data.items() if k != EVENT_KEY})
            return
        where = self._path(namespace)
        if mode == "messages":
            message, metadata = data
            if metadata.get("langgraph_node") != "model":
                return
            if isinstance(message, AIMessageChunk | AIMessage):
                text = _text(message)
                if text:
                    yield self.chunk("text-delta", {"text": text, **where})
            return
        if mode == "updates":
            for node, update in (data or {}).items():
                if not isinstance(update, dict):
                    continue
                for message in update.get("messages") or []:
                    yield from self._message(node, message, where)

    def _message(self, node: str, message: Any, where: dict[str, Any]) -> Iterator[StreamChunk]:
        if node == "model" and isinstance(message, AIMessage):
            path = where.get("agent_path") or ([self.root] if self.root else [])
            for call in message.tool_calls:
                args = (self.shown_args(path, call["name"], call["args"]) if self.shown_args
                        else call["args"])
                yield self.chunk(
                    "tool-call",
                    {"tool_call_id": call.get("id"), "tool_name": call["name"],
                     "args": args, **where},
                )
        elif isinstance(message, ToolMessage):
            yield self.chunk(
                "tool-result",
                {
                    "tool_call_id": message.tool_call_id,
                    "tool_name": message.name,
                    "result": message.content,
                    "status": message.status,
                    **where,
                },
            )


def pending_from_interrupts(interrupts: Sequence[Interrupt], ledger: Ledger | None = None
                            ) -> list[tuple[str, ApprovalRecord]]:
    """(interrupt id, record) for every approval or suspension waiting in these interrupts;
    with `ledger`, long text the interrupt withheld is read back (secrets still masked)."""
    found: list[tuple[str, ApprovalRecord]] = []
    for item in interrupts:
        value = item.value
        if isinstance(value, dict) and INTERRUPT_MARKER in value:
            found.extend((item.id, in_full(record, ledger))
                         for record in value.get("approvals") or [])
    return found


def with_waiting_beside(found: list[tuple[str, ApprovalRecord]], ledger: Ledger | None,
                        thread_id: str, agent: str | None) -> list[tuple[str, ApprovalRecord]]:
    """`found` (a paused run's interrupts' records) and what else the agent's gates wait on,
    as the ledger marks it (with no interrupt id): a supervisor's own approval, asked in the
    turn that delegated, is asked by its gate only once the subagent it delegated to is
    done; while that subagent waits, its approval was the run's only interrupt, so the API
    listed it alone, took a decision without a tool_call_id (or by a tool_call_id both
    shared) as the subagent's, and a new message did not supersede the supervisor's own
    (helper-77)."""
    # Only a gate that delegated to an agent whose approval is an interrupt waits so: one of
    # an agent above it in the chain (a subagent's own marks beside its interrupt are those
    # of a run of it that a client's task re-dispatched, which no gate waits on any more).
    above = {tuple(record.get("agent_path") or [])[:depth] for _, record in found
             for depth in range(1, len(record.get("agent_path") or []))}
    if not above or ledger is None or agent is None:
        return found
    seen = {record.get("id") for _, record in found}
    return [*found, *marked_waiting(ledger, thread_id, lambda w: (
        tuple(w.row.agent_path) in above and w.row.agent_path[0] == agent
        and w.record.get("id") not in seen))]


def marked_waiting(ledger: Ledger, thread_id: str, keep: Callable[[WaitingRow], bool]
                   ) -> list[tuple[str, ApprovalRecord]]:
    """What the ledger marks the thread's gates as waiting on (`keep`: which of it), in each
    turn's order, as views (secrets masked), with no interrupt id."""
    return [("", cast(ApprovalRecord, masked_record(w.record)))
            for w in sorted(ledger.waiting_rows(thread_id=thread_id), key=lambda w: w.place)
            if w.waiting and keep(w)]


def in_full(record: ApprovalRecord, ledger: Ledger | None) -> ApprovalRecord:
    """An interrupt's record with the arguments it withheld, as the ledger planned them."""
    if ledger is None or not (isinstance(record, Mapping) and record.get(ARGS_WITHHELD)):
        return record
    planned = ledger.record(str(record.get("id")))
    if planned is None:
        return record
    full = masked_record({**record, "args": planned["args"]})
    return {k: v for k, v in full.items() if k != ARGS_WITHHELD}  # type: ignore[return-value]


def suspend_payload(record: PendingApproval) -> dict[str, Any]:
    """The `suspend_payload` of a result or chunk, in the seed's shape."""
    if record.kind == "suspension":
        payload = dict(record.metadata.get("suspend_payload") or {})
        return {**payload, "tool_call_id": record.tool_call_id, "tool_name": record.tool_name,
                "id": record.id, "agent_path": record.agent_path}
    return {
        "tool_call_id": record.tool_call_id,
        "tool_name": record.tool_name,
        "args": record.args,
        "prompt": record.prompt,
        "id": record.id,
        "agent_path": record.agent_path,
        "metadata": record.metadata,
        "args_digest": record.args_digest,
    }


def pending_chunks(run_id: str, pending: Sequence[PendingApproval]) -> Iterator[StreamChunk]:
    for record in pending:
        if record.status != "pending":
            continue
        if record.kind == "suspension":
            body = suspend_payload(record)
            yield StreamChunk(
                "tool-call-suspended",
                {"tool_call_id": record.tool_call_id, "tool_name": record.tool_name,
                 "suspend_payload": record.metadata.get("suspend_payload") or {},
                 "id": record.id, "agent_path": record.agent_path, "args": record.args,
                 **{k: v for k, v in body.items() if k not in ("id", "agent_path")}},
                run_id,
            )
        else:
            yield StreamChunk("tool-call-approval", suspend_payload(record), run_id)


def awaiting(values: dict[str, Any], ledger: Ledger | None, thread_id: str,
             agent: str | None) -> list[PendingApproval]:
    """Approvals the gate has planned for the conversation's last turn (the ledger's plan of
    it) and not yet seen decided."""
    if ledger is None or agent is None:
        return []
    plan = last_turn_plan(ledger, thread_id, [agent], values.get("messages") or [])
    if not plan:
        return []
    answered = answered_ids(values.get("messages") or [], plan["ai_message_id"])
    return [PendingApproval.from_record(masked_record(r)) for r in waiting_records(plan, answered)]


def run_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The messages since the last user message."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return list(messages[index + 1 :])
    return list(messages)


def run_text(messages: Sequence[BaseMessage]) -> str:
    """The final text of the run: the last AI reply, when nothing came after it."""
    recent = run_messages(messages)
    if recent and isinstance(recent[-1], AIMessage):
        return _text(recent[-1])
    return ""


class RunView(Protocol):
    """What a finished run looks like: a `StateSnapshot`, or what its stream showed."""

    @property
    def values(self) -> Any: ...

    @property
    def interrupts(self) -> tuple[Interrupt, ...]: ...

    @property
    def next(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class Observed:
    """The end of a run as its stream showed it: the last values and the interrupts raised,
    so a result needs no extra read of the checkpoint."""

    values: dict[str, Any]
    interrupts: tuple[Interrupt, ...]
    next: tuple[str, ...] = ()


def finish_reason(snapshot: RunView, *, stopped: bool) -> FinishReason:
    if snapshot.interrupts:
        return "suspended"
    if stopped:
        return "checkpoint"
    messages = snapshot.values.get("messages") or []
    if messages and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls:
        return "stop"
    if snapshot.next:
        return "checkpoint"
    return "max_steps"
