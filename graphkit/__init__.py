"""graphkit: human-in-the-loop tool approval for LangGraph agents.

Tools ask before they run (`needs_approval`), or pause themselves for input
(`ctx.suspend`); runs wait durably in a LangGraph checkpointer until a person decides,
from any process.
"""

from graphkit._notify import Webhook, verify_signature
from graphkit._runs import AgentStream, AsyncAgentStream
from graphkit.agent import Agent
from graphkit.errors import (
    AmbiguousApprovalError,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApprovalsPendingError,
    ApproverNotAllowedError,
    DecisionNotAllowedError,
    GraphkitError,
    InvalidApprovedArgsError,
    ResumeDataError,
    SnapshotNotFoundError,
    SuspendPayloadError,
)
from graphkit.inbox import Inbox
from graphkit.tools import GraphkitTool, ToolContext, create_tool
from graphkit.types import GenerateResult, PendingApproval, RunState, StreamChunk

__all__ = [
    "Agent",
    "AgentStream",
    "AmbiguousApprovalError",
    "ApprovalAlreadyResolvedError",
    "ApprovalNotFoundError",
    "ApprovalsPendingError",
    "ApproverNotAllowedError",
    "AsyncAgentStream",
    "DecisionNotAllowedError",
    "GenerateResult",
    "GraphkitError",
    "GraphkitTool",
    "Inbox",
    "InvalidApprovedArgsError",
    "PendingApproval",
    "ResumeDataError",
    "RunState",
    "SnapshotNotFoundError",
    "StreamChunk",
    "SuspendPayloadError",
    "ToolContext",
    "Webhook",
    "create_tool",
    "verify_signature",
]
