"""The ledger's rows as Python values, and how they are read from a query's tuples."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from graphkit._ledger._sql import iso_ms, loads

__all__ = ["APPROVAL_COLUMNS", "APPROVAL_READ", "GRANT_COLUMNS", "ApprovalRow", "AuditRow",
           "CallLink", "CallRow", "Claimed", "Clearance", "GrantRow", "OutboxEvent", "Start",
           "allowed_text", "allowed_types", "approval_row", "grant_row"]

@dataclass(frozen=True, slots=True, kw_only=True)
class CallRow:
    """One planned tool call: what may run, and whether it already did."""

    call_key: str
    thread_id: str
    agent_path: Sequence[str]
    tool_name: str
    args_digest: str
    """Digest of the arguments planned (an edit's arguments are bound by its decision)."""
    approval_id: str | None
    """Set when the call needs a decision before it runs."""
    executed: str | None = None
    outcome: dict[str, Any] | None = None
    once_results: dict[str, Any] | None = None
    cleared: str | None = None
    """The digest of the arguments an approval gate verified and let run (gated calls)."""
    turn_key: str | None = None
    """The plan's key (`graphkit._state.turn_key`): which version of that message."""
    args: Mapping[str, Any] | None = None
    """The arguments it runs with: as planned, or (gated calls) as a gate cleared them."""
    tool_call_id: str | None = None
    """The model's id of the call (None in rows written before the ledger kept it)."""
    conversation: str | None = None
    """The conversation it was planned in (`AgentState.conversation`): a grant its approval
    gives holds there alone."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claimed:
    """A call whose one execution this process just claimed, and what it runs with."""

    once: dict[str, Any]
    """Its `ctx.once` results so far."""
    resumed: bool
    """Whether it has resume data to read (a suspension answered)."""
    args: Any
    """The arguments it runs with: as planned, or as its approval was cleared."""
    digest: str
    """Their digest as the gate recorded it (the tools node checks it)."""


class Clearance(NamedTuple):
    """What a gate verified for an approval: the digest of the arguments that run, and them
    (None: the call's planned arguments, already in its row)."""

    run_digest: str
    run_args: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRow:
    """An approval (or a suspension's request for input) and its decision, if any."""

    approval_id: str
    thread_id: str
    kind: str
    call_key: str | None
    agent_path: Sequence[str]
    tool_name: str
    args_digest: str
    ttl: float | None = None
    """Seconds until an undecided approval expires, counted by the database's clock."""
    status: str = "pending"
    decision: dict[str, Any] | None = None
    expires_at: float | None = None
    run_id: str | None = None
    """The run that waits on it: once a run has nothing pending, workers may resume it."""
    allowed: tuple[str, ...] | None = None
    """The decision types a reviewer may claim (an approval's; None: approve, edit, reject)."""
    record: Mapping[str, Any] | None = None
    """The approval record as planned (its real arguments): what every door judges."""

    @property
    def decided(self) -> bool:
        return self.status != "pending"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRow:
    thread_id: str
    approval_id: str | None
    entry: dict[str, Any]
    dedupe: str | None = None
    """A key that makes a repeated write (a node re-run after a crash) a no-op."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GrantRow:
    grant_id: str
    thread_id: str
    agent_path: Sequence[str]
    tool_name: str
    grantor: str | None
    approval_id: str | None
    ttl: float | None
    created_at: float = 0.0
    expires_at: float | None = None
    revoked: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The grant as listed: its times as every record shows one (ISO 8601, UTC)."""
        return {"id": self.grant_id, "thread_id": self.thread_id,
                "agent_path": list(self.agent_path), "tool_name": self.tool_name,
                "grantor": self.grantor, "approval_id": self.approval_id,
                "created_at": iso_ms(self.created_at),
                "expires_at": None if self.expires_at is None else iso_ms(self.expires_at),
                "revoked": self.revoked, "state": self.state()}

    def state(self) -> Literal["active", "expired", "revoked"]:
        """Whether the grant still approves: a lapsed one read as "active" in listings."""
        if self.revoked:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= time.time():
            return "expired"
        return "active"


APPROVAL_COLUMNS = ("approval_id, thread_id, kind, call_key, agent_path, tool_name, "
                     "args_digest, expires_at, status, decision, allowed")
APPROVAL_READ = APPROVAL_COLUMNS + ", run_id"


def allowed_types(text: str | None) -> tuple[str, ...] | None:
    """The `allowed` column (",approve,reject,": each type between commas, so that a claim
    can match one with LIKE) as decision types; NULL is the default set."""
    return tuple(t for t in text.split(",") if t) if text else None


def allowed_text(allowed: Sequence[str] | None) -> str | None:
    return "," + ",".join(allowed) + "," if allowed else None


def approval_row(row: tuple[Any, ...]) -> ApprovalRow:
    return ApprovalRow(approval_id=str(row[0]), thread_id=str(row[1]), kind=str(row[2]),
                       call_key=row[3], agent_path=[p for p in str(row[4]).split("/") if p],
                       tool_name=str(row[5]), args_digest=str(row[6]), expires_at=row[7],
                       status=str(row[8]), decision=loads(row[9]), allowed=allowed_types(row[10]),
                       run_id=row[11])


class PendingTurn(NamedTuple):
    """What an agent waits on in a thread, with the turn that asked, or a call approved (or a
    suspended call resumed) that has not run since (`pending` False), which a turn the
    conversation lost leaves behind."""

    approval_id: str
    kind: str
    tool_name: str
    turn_key: str | None
    pending: bool = True
    call_key: str | None = None
    agent_path: str | None = None
    """The path (as text) of the agent that asked: this one, or one of its subagents."""
    declined: bool = False
    """Declined since its gate asked, and not applied yet (its gate still waits on it)."""


class CallLink(NamedTuple):
    """Where a call was planned, and whether it has its outcome (`Ledger.call_links`)."""

    agent_path: str
    turn_key: str | None
    done: bool


PENDING_TURNS = ("a.approval_id, a.kind, a.tool_name, c.turn_key, a.status, c.call_key, "
                 "a.agent_path FROM graphkit_approvals a LEFT JOIN graphkit_calls c ON "
                 "c.call_key = a.call_key WHERE a.thread_id = ? AND (a.agent_path = ? OR "
                 "substr(a.agent_path, 1, length(?)) = ?) AND "
                 "(a.status = 'pending' OR (a.status = 'approved' AND (c.executed IS NULL "
                 "OR c.executed <> 'done')) OR a.waiting IS NOT NULL)")
"""What one agent and its subagents wait on in one thread, with the turn that asked: what
is pending, what a gate still waits on to apply (decided since it asked), and the calls
approved (or resumed) there that have not run (again) since, or were claimed and have no
outcome (a process that died may have started one: helper-84) (parameters: `beneath`),
after a SELECT: read alone or beside the turn's plan."""


def beneath(thread_id: str, path: str) -> tuple[str, str, str, str]:
    """`PENDING_TURNS`' parameters: the thread, the agent's path and its subagents'."""
    return (thread_id, path, f"{path}/", f"{path}/")


_LAST_RUN = ("FROM graphkit_runs WHERE thread_id = ? AND agent = ? ORDER BY created_at DESC "
             "LIMIT 1")
CURRENT_RUN = f"SELECT run_id, options {_LAST_RUN}"
"""The last run an agent started on a thread (parameters: the thread, the agent's name): the
thread's current run, which calls are filed under and decisions may take anything of, and
the options its request recorded with it (`Leases.run_options`)."""


CURRENT_RUN_OPTIONS = f"SELECT options {_LAST_RUN}"
"""The options the current run's request recorded (`CURRENT_RUN`'s second column)."""


def recorded_options(text: Any) -> dict[str, Any] | None:
    """A run's recorded request options (`CURRENT_RUN`'s second column), None for none."""
    found = loads(text) if text else None
    return found if isinstance(found, dict) else None


def pending_turn(row: Sequence[Any]) -> PendingTurn:
    return PendingTurn(str(row[0]), str(row[1]), str(row[2]), row[3], row[4] == "pending",
                       row[5], row[6], row[4] == "rejected")


GRANT_COLUMNS = ("grant_id, thread_id, agent_path, tool_name, grantor, approval_id, "
                  "created_at, expires_at, revoked")


def grant_row(row: tuple[Any, ...]) -> GrantRow:
    return GrantRow(grant_id=str(row[0]), thread_id=str(row[1]),
                    agent_path=[p for p in str(row[2]).split("/") if p], tool_name=str(row[3]),
                    grantor=row[4], approval_id=row[5], ttl=None, created_at=float(row[6]),
                    expires_at=row[7], revoked=loads(row[8]))


Start = Literal["won", "done", "busy", "unknown"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboxEvent:
    """A notification claimed for delivery to one target."""

    event_id: str
    type: str
    created_at: float
    payload: dict[str, Any]
    """The audit entry (`approval`) and the review card's `link` if one is configured."""
    attempts: int
    """Attempts so far, this one included."""
