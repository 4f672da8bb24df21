"""The vocabulary graphkit speaks: pending approvals, decisions, stream chunks and results.

Values that live in the graph's checkpoints (approval records, decisions, interrupt payloads)
are plain JSON-shaped `TypedDict`s, so any checkpointer serialises them and LangGraph Studio
shows them as they are. Values handed to users are frozen dataclasses.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

from langchain_core.messages import BaseMessage

from graphkit._digest import args_digest

__all__ = [
    "ApprovalKind",
    "ApprovalRecord",
    "ApprovalStatus",
    "ApproveDecision",
    "AuditTrail",
    "ChunkType",
    "Decision",
    "DecisionType",
    "EditDecision",
    "FinishReason",
    "GateResume",
    "GenerateResult",
    "PendingApproval",
    "PendingList",
    "RejectDecision",
    "RespondDecision",
    "ResumeDecision",
    "RunState",
    "StreamChunk",
    "Verdict",
    "args_digest",
]

ApprovalKind = Literal["approval", "suspension"]
ApprovalStatus = Literal["pending", "approved", "rejected"]
Verdict = Literal["required", "conditional"]
"""`required`: the tool (or the request) always asks. `conditional`: a predicate asked."""
DecisionType = Literal["approve", "edit", "reject", "respond", "resume"]
"""LangChain's HITL decisions, plus `resume` (with `data`) for a suspended tool."""
FinishReason = Literal["stop", "suspended", "checkpoint", "max_steps"]
ChunkType = Literal[
    "start",
    "text-delta",
    "tool-call",
    "tool-result",
    "tool-call-approval",
    "tool-call-suspended",
    "tool-approval",
    "finish",
]




class ApprovalRecord(TypedDict):
    """A pending approval as stored in the checkpoint and in interrupt payloads."""

    id: str
    created_at: str
    kind: ApprovalKind
    tool_name: str
    tool_call_id: str
    args: dict[str, Any]
    metadata: dict[str, Any]
    verdict: Verdict
    agent_path: list[str]
    status: ApprovalStatus
    decided_by: str | None
    comment: str | None
    decided_at: str | None
    approved_args: dict[str, Any] | None
    args_digest: str
    expires_at: NotRequired[str | None]
    call_key: NotRequired[str]
    """The planned call's key in the ledger (for recording it again after a restart)."""
    allowed_decisions: NotRequired[list[str]]
    """What a reviewer may decide (an approval's): some of approve, edit, reject, respond."""
    policy: NotRequired[bool]
    """Whether its agent judged its deciders with an approvers policy when it was asked (an
    inbox without the agent reads this, as the ledger keeps it)."""
    grant_ttl: NotRequired[float | None]
    """How long, in seconds, a grant its approval makes lasts (its agent's `grant_ttl`; None:
    no end), for an inbox without the agent to write the grant's end as the gate counts it."""


class ApproveDecision(TypedDict):
    """Run the call as the reviewer saw it."""

    type: Literal["approve"]
    tool_call_id: NotRequired[str]
    """Which pending call; without it, decisions go to the pending calls in order."""
    id: NotRequired[str]
    """The approval id, where a model reused a tool_call_id."""
    message: NotRequired[str]
    decided_by: NotRequired[str]
    """Only checked: it must be the authenticated user, never trusted for identity."""


class EditDecision(TypedDict):
    """Run the call with other arguments, validated by the tool's own model."""

    type: Literal["edit"]
    edited_action: NotRequired[dict[str, Any]]
    """LangChain's shape: `{"name": ..., "args": {...}}`."""
    args: NotRequired[dict[str, Any]]
    tool_call_id: NotRequired[str]
    id: NotRequired[str]
    message: NotRequired[str]
    decided_by: NotRequired[str]


class RejectDecision(TypedDict):
    """Do not run the call; the model is told who declined it and why."""

    type: Literal["reject"]
    message: NotRequired[str]
    tool_call_id: NotRequired[str]
    id: NotRequired[str]
    decided_by: NotRequired[str]


class RespondDecision(TypedDict):
    """Do not run the call; `message` is the result the model sees."""

    type: Literal["respond"]
    message: str
    tool_call_id: NotRequired[str]
    id: NotRequired[str]
    decided_by: NotRequired[str]


class ResumeDecision(TypedDict):
    """Resume a suspended tool with `data` (validated by its `resume_schema`)."""

    type: Literal["resume"]
    data: Any
    tool_call_id: NotRequired[str]
    id: NotRequired[str]


Decision = ApproveDecision | EditDecision | RejectDecision | RespondDecision | ResumeDecision
"""A reviewer's decision as a resume payload carries it: LangChain's HITL decisions plus
`resume`. The gate parses it into `graphkit._review.Choice` and refuses anything else."""


class GateResume(TypedDict, total=False):
    """The value the approval gate accepts when its interrupt is resumed."""

    decisions: list[Decision]
    """Decisions to take now, as the run's authenticated user. Without `decisions` (and
    without `supersede`) the gate applies what the ledger holds (the Agent API and the inbox
    take decisions there first)."""
    supersede: list[dict[str, Any]]
    """A new user message (as message dicts, `messages_to_dict`; the user's, "human", each
    with an id new to the conversation, and content): decline what is pending, as
    superseded by the run's authenticated user, and go on with it. Each decision is judged
    by the approvers policy; a message is not a decision, so the policy does not judge it,
    but only a user's message declines."""
    auto_resume: bool
    """With `supersede`: read suspended tools' resume data from the message instead."""
    queue: bool
    """With `supersede`: append the message to this agent's history (False for a subagent,
    whose supervisor receives the message). Defaults to True."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingApproval:
    """A tool call waiting for a human: an approval before it runs, or a suspended tool."""

    id: str
    """Stable id of this approval; pass it to `resolve_tool_approval`."""
    created_at: str
    """When the call was paused, ISO 8601 in UTC."""
    kind: ApprovalKind
    """`approval` (paused before running) or `suspension` (the tool called `ctx.suspend`)."""
    tool_name: str
    tool_call_id: str
    args: dict[str, Any]
    """The arguments the model proposed, parsed and validated."""
    metadata: dict[str, Any]
    """`{"prompt": ..., "defaults": ...}` for a review card; a suspension adds its payload."""
    verdict: Verdict
    agent_path: list[str]
    """Agent names from the outermost supervisor to the agent that owns the tool."""
    status: ApprovalStatus = "pending"
    decided_by: str | None = None
    comment: str | None = None
    decided_at: str | None = None
    approved_args: dict[str, Any] | None = None
    args_digest: str = ""
    """Digest of `args`, for binding a decision to what the reviewer saw."""
    expires_at: str | None = None
    """When an undecided approval is declined as expired (`approval_ttl`), ISO 8601 UTC."""
    thread_id: str | None = None
    """The thread of the paused run (set in inbox listings)."""
    run_id: str | None = None
    """The paused run (set in inbox listings); pass it to `agent.resume`."""
    allowed_decisions: list[str] = field(default_factory=lambda: ["approve", "edit", "reject"])
    """What a reviewer may decide on this approval (LangChain's `allowed_decisions`). A
    suspension lists only `reject`: it is answered with resume data (not one of LangChain's
    decisions) or declined."""

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PendingApproval:
        """A view of its own: user code handed it (a policy, `may_view`, a state hook) may
        change it, and nothing it changes is what runs (helper-58: a policy that set a nested
        argument changed the call an edit ran)."""
        fields = cls.__dataclass_fields__
        values = {k: copy.deepcopy(v) for k, v in record.items() if k in fields}
        if values.get("kind") == "suspension":  # (a suspension's record has no such field)
            values["allowed_decisions"] = ["reject"]
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    @property
    def prompt(self) -> str | None:
        value = self.metadata.get("prompt")
        return value if isinstance(value, str) else None

    def _repr_html_(self) -> str:
        from graphkit import _html

        return _html.card(self)

    def _repr_markdown_(self) -> str:
        from graphkit import _html

        return _html.card_markdown(self)


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One event of an agent stream."""

    type: ChunkType
    payload: dict[str, Any]
    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class GenerateResult:
    """What a run returned: its text, why it stopped, and what (if anything) waits on a human."""

    text: str
    finish_reason: FinishReason
    run_id: str
    thread_id: str
    suspend_payload: dict[str, Any] | None = None
    """For an approval: `tool_call_id`, `tool_name`, `args`, `prompt`, `id`. For a suspension:
    the tool's payload plus `tool_call_id`, `tool_name`. The first of `pending_approvals`."""
    pending_approvals: list[PendingApproval] = field(default_factory=list)
    messages: list[BaseMessage] = field(default_factory=list)

    def _repr_html_(self) -> str:
        from graphkit import _html

        return _html.result(self)

    def _repr_markdown_(self) -> str:
        from graphkit import _html

        return _html.result_markdown(self)


class PendingList(list[PendingApproval]):
    """The inbox's listing: a plain list that Jupyter shows as a table."""

    def _repr_html_(self) -> str:
        from graphkit import _html

        return _html.listing(self)


class AuditTrail(list[dict[str, Any]]):
    """Audit entries, oldest first: a plain list that Jupyter shows as a table."""

    def _repr_html_(self) -> str:
        from graphkit import _html

        return _html.audit_table(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunState:
    """The run's state as seen by an `on_state_change` hook after each step."""

    run_id: str
    thread_id: str
    step: int
    node: str | None
    messages: Sequence[BaseMessage]
    pending_approvals: list[PendingApproval]
    awaiting_approval: bool
    """True while a call waits for a decision (the seed's `ctx.__awaitingApproval`)."""
