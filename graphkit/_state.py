"""The agent graph's state: messages, the request's options, and the approval gate's plan.

Everything here is JSON-shaped so that any checkpointer stores it and another process (or
LangGraph Studio) reads it back unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.messages import AnyMessage, BaseMessage, convert_to_messages
from langgraph.channels.delta import DeltaChannel
from langgraph.graph.message import _messages_delta_reducer

from graphkit.types import ApprovalRecord

__all__ = [
    "AgentState",
    "CallPlan",
    "RunOptions",
    "SuspensionReport",
    "ToolTask",
    "TurnPlan",
    "merge_reports",
]

DEFAULT_MAX_STEPS = 25


class RunOptions(TypedDict, total=False):
    """Per-request options, kept in state so a resume in another process obeys them too."""

    run_id: str
    require_tool_approval: bool
    auto_resume_suspended_tools: bool
    max_steps: int
    approval_ttl: float | None
    """Seconds an approval may wait before it is declined as expired (the agent's default)."""


class CallPlan(TypedDict):
    """What the gate decided about one tool call of the current model turn."""

    tool_call_id: str
    tool_name: str
    key: str
    """The call's own id in the ledger (fresh per planned call, never a model's id)."""
    args: dict[str, Any]
    """The validated arguments the call runs with (edited ones once a reviewer edits)."""
    sequential: bool
    """Predicate-bearing tools run one at a time, never beside another call."""
    approval: ApprovalRecord | None
    """Set when the call needs a decision before it runs."""
    suspension: ApprovalRecord | None
    """Set while the tool is suspended, waiting for resume data."""
    resume_values: list[Any]
    """Resume data given so far, for display: the tools node reads it from the ledger."""
    once: dict[str, Any]
    """Unused: `ctx.once` results live in the ledger, beside the call's execution claim."""
    metadata: dict[str, Any]
    """Tracing metadata for the tool's callback run (`approval.required` / `.conditional`)."""
    node: str
    """The node that runs the call: `tools`, or a subagent's delegation node."""
    answer: str | None
    """Set when the call will not run (rejected, superseded, cancelled, answered by a
    reviewer): what the model is told."""
    answer_status: NotRequired[str]
    """`error` (the default) or `success` (a reviewer's `respond`)."""


class TurnPlan(TypedDict):
    """The gate's plan for the tool calls of one AI message."""

    ai_message_id: str
    calls: list[CallPlan]
    error: NotRequired[str | None]
    """Why the last resume value was refused; shown in the next interrupt."""
    queued: NotRequired[list[dict[str, Any]]]
    """A new user message to append once every call of the turn has its answer."""


class SuspensionReport(TypedDict):
    """What the tools node reports when a tool calls `ctx.suspend(...)`."""

    payload: dict[str, Any]
    key: NotRequired[str]


class ToolTask(TypedDict):
    """The payload of one `Send` to the tools node: exactly one tool call."""

    tool_call_id: str
    tool_name: str
    key: str
    """The planned call's ledger key: the tools node runs nothing the ledger does not allow."""
    args: dict[str, Any]
    metadata: dict[str, Any]
    agent_path: list[str]
    options: RunOptions
    then: str
    """Where the result goes: `model` when this batch finishes the turn, else back to the gate."""


def merge_reports(
    old: dict[str, SuspensionReport] | None, new: dict[str, SuspensionReport] | None
) -> dict[str, SuspensionReport]:
    """Reducer: tools add reports by tool_call_id; the gate clears them with an empty write."""
    if not new:
        return {}
    return {**(old or {}), **new}


def _messages(state: list[AnyMessage], writes: list[Any]) -> list[AnyMessage]:
    """LangGraph's delta reducer of messages, taking only writes that are messages: a write
    a client sent that is not (`update_state(..., {"messages": {}})`) would be kept among the
    thread's writes and fail every later read of its state; it is left out instead. (Each
    write is judged alone, so the reducer stays batching-invariant.)"""
    try:
        return _messages_delta_reducer(state, writes)
    except (ValueError, KeyError, TypeError, NotImplementedError, AttributeError):
        return _messages_delta_reducer(state, [w for w in writes if _messages_or_not(w)])


def _messages_or_not(write: Any) -> bool:
    try:
        convert_to_messages(write if isinstance(write, list) else [write])
    except (ValueError, KeyError, TypeError, NotImplementedError, AttributeError):
        return False
    return True


Messages = Annotated[list[AnyMessage], DeltaChannel(_messages)]
"""The conversation, stored as LangGraph's delta channel: each checkpoint keeps the new
messages, not the whole list again, so a long thread grows linearly on disk."""


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _maybe(check: Any, value: Any) -> bool:
    return value is None or check(value)


def _obj(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


_RECORD: dict[str, Any] = {
    "id": _text, "kind": lambda v: v in ("approval", "suspension"), "tool_name": _text,
    "tool_call_id": _text, "args": _obj, "metadata": _obj, "status": _text,
    "agent_path": _texts, "args_digest": _text, "created_at": _text, "verdict": _text,
    "decided_by": lambda v: _maybe(_text, v), "comment": lambda v: _maybe(_text, v),
    "decided_at": lambda v: _maybe(_text, v), "approved_args": lambda v: _maybe(_obj, v),
}
_RECORD_OPTIONAL: dict[str, Any] = {
    "expires_at": lambda v: _maybe(_text, v), "call_key": _text, "allowed_decisions": _texts,
}
_CALL: dict[str, Any] = {
    "tool_call_id": _text, "tool_name": _text, "key": _text, "args": _obj,
    "sequential": lambda v: isinstance(v, bool), "resume_values": lambda v: isinstance(v, list),
    "once": _obj, "metadata": _obj, "node": _text, "answer": lambda v: _maybe(_text, v),
    "approval": lambda v: _maybe(_record, v), "suspension": lambda v: _maybe(_record, v),
}


def _shaped(value: Any, required: dict[str, Any], optional: dict[str, Any]) -> bool:
    return (isinstance(value, dict) and all(k in value and ok(value[k])
                                            for k, ok in required.items())
            and all(ok(value[k]) for k, ok in optional.items() if k in value))


def _record(value: Any) -> bool:
    return _shaped(value, _RECORD, _RECORD_OPTIONAL)


def well_typed_plan(value: Any) -> bool:
    """A plan of the shape the gate writes, every field of its type (None: no turn)."""
    if value is None:
        return True
    return _shaped(value, {
        "ai_message_id": _text,
        "calls": lambda calls: isinstance(calls, list) and all(
            _shaped(c, _CALL, {"answer_status": _text}) for c in calls),
    }, {"error": lambda v: _maybe(_text, v),
        "queued": lambda v: isinstance(v, list) and all(_obj(m) for m in v)})


def well_typed_task(value: Any) -> bool:
    """A `ToolTask` of the shape the gate sends, every field of its type."""
    return _shaped(value, {
        "tool_call_id": _text, "tool_name": _text, "key": _text, "args": _obj,
        "metadata": _obj, "agent_path": _texts, "options": _well_typed_options,
        "then": _text}, {})


def well_typed_state(value: Any) -> bool:
    """A node's state (or a `Send` payload standing for it) of the graph's shape, with a
    conversation to act on."""
    return isinstance(value, dict) and _shaped(value, {
        "messages": lambda v: isinstance(v, list) and bool(v) and all(
            isinstance(m, BaseMessage) for m in v)}, {
        "options": _well_typed_options, "turn": well_typed_plan,
        "reports": lambda v: isinstance(v, dict)})


def keep_typed_plan(old: TurnPlan | None, new: TurnPlan | None) -> TurnPlan | None:
    """Reducer of `turn`: whoever writes it (a node, `update_state`, a `Command`), a value not
    of the plan's shape is not taken: what graphkit reads from the state is always well
    typed, so no client write can turn into an untyped error that wedges the thread. (What a
    well-typed forgery says is judged against the ledger, as ever.)"""
    return new if well_typed_plan(new) else old


def _well_typed_options(value: Any) -> bool:
    return _shaped(value, {}, {
        "run_id": _text, "require_tool_approval": lambda v: isinstance(v, bool),
        "auto_resume_suspended_tools": lambda v: isinstance(v, bool),
        "max_steps": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "approval_ttl": lambda v: v is None or isinstance(v, int | float)})


def keep_typed_options(old: RunOptions | None, new: RunOptions | None) -> RunOptions | None:
    """Reducer of `options`: a write not of their shape is not taken."""
    return new if _well_typed_options(new) else old


def keep_typed_reports(old: dict[str, SuspensionReport] | None,
                       new: dict[str, SuspensionReport] | None
                       ) -> dict[str, SuspensionReport]:
    """`merge_reports`, taking only reports of their shape."""
    if new is not None and not (isinstance(new, dict) and all(
            isinstance(k, str) and isinstance(v, dict) and _obj(v.get("payload", {}))
            for k, v in new.items())):
        return old or {}
    return merge_reports(old, new)


class AgentState(TypedDict, total=False):
    """The state of an agent graph."""

    messages: Messages
    options: Annotated[RunOptions, keep_typed_options]
    turn: Annotated[TurnPlan | None, keep_typed_plan]
    reports: Annotated[dict[str, SuspensionReport], keep_typed_reports]


class InputState(TypedDict, total=False):
    """What a caller (or LangGraph Studio) passes to start a run."""

    messages: Messages
    options: Annotated[RunOptions, keep_typed_options]
