"""The agent graph's state: messages, the request's options, and the approval gate's plan.

Everything here is JSON-shaped so that any checkpointer stores it and another process (or
LangGraph Studio) reads it back unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.messages import AnyMessage
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


Messages = Annotated[list[AnyMessage], DeltaChannel(_messages_delta_reducer)]
"""The conversation, stored as LangGraph's delta channel: each checkpoint keeps the new
messages, not the whole list again, so a long thread grows linearly on disk."""


class AgentState(TypedDict, total=False):
    """The state of an agent graph."""

    messages: Messages
    options: RunOptions
    turn: TurnPlan | None
    reports: Annotated[dict[str, SuspensionReport], merge_reports]


class InputState(TypedDict, total=False):
    """What a caller (or LangGraph Studio) passes to start a run."""

    messages: Messages
    options: RunOptions
