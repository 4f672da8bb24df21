"""From a paused run's state and a human request to the `Command` that resumes it.

Pure functions of a `StateSnapshot` plus the ledger: they find what waits (graphkit's interrupt
payloads, at any depth), pick the approval a request means, and address each decision to the
interrupt that holds it. `Agent` calls them with the thread's lease held.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.messages import BaseMessage, messages_to_dict
from langchain_core.tools import BaseTool
from langgraph.types import Command, StateSnapshot

from graphkit.approvals import validate_args, validate_resume
from graphkit.decisions import (
    Approvers,
    audited_refusal,
    claim,
    expire_overdue,
    human_decision,
    resolved_message,
    with_decision,
)
from graphkit.errors import (
    AmbiguousApprovalError,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApprovalsPendingError,
    GraphkitError,
)
from graphkit.events import pending_from_interrupts
from graphkit.journal import APPROVALS, SCAN_LIMIT, audit, grant
from graphkit.ledger import Ledger
from graphkit.state import RunOptions
from graphkit.types import ApprovalRecord, Decision, GateResume, PendingApproval

__all__ = [
    "Request",
    "Waiting",
    "continue_command",
    "decision_command",
    "resume_data_command",
    "start_payload",
    "waiting",
]

ToolFinder = Callable[[Sequence[str], str], BaseTool | None]


@dataclass(frozen=True, slots=True)
class Waiting:
    """One approval or suspension the run waits on."""

    interrupt_id: str
    record: ApprovalRecord
    """As the graph holds it."""
    decision: dict[str, Any] | None
    """Claimed in the ledger and not yet applied by the graph (from the inbox, or expiry)."""

    @property
    def shown(self) -> ApprovalRecord:
        """The record with the ledger's decision, if any, as a reviewer should see it."""
        return with_decision(self.record, self.decision)

    def pending(self) -> PendingApproval:
        return PendingApproval.from_record(self.shown)


def waiting(snapshot: StateSnapshot, ledger: Ledger) -> list[Waiting]:
    found = pending_from_interrupts(snapshot.interrupts)
    decided = ledger.decisions(r["id"] for _, r in found if r["status"] == "pending")
    return [
        Waiting(i, r, decided.get(r["id"]) if r["status"] == "pending" else None)
        for i, r in found
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Who asks, for which run, with which storage and policy."""

    run_id: str
    thread_id: str
    ledger: Ledger
    store: Any
    approvers: Approvers | None
    find_tool: ToolFinder
    dry_run: bool = False
    """Check only (at call time, before the lease): no claims, no grants."""


def _select(
    items: list[Waiting],
    snapshot: StateSnapshot,
    req: Request,
    *,
    tool_call_id: str | None,
    approval_id: str | None,
    kind: Literal["approval", "suspension"] | None,
) -> Waiting:
    if tool_call_id is not None or approval_id is not None:
        for item in items:
            record = item.shown
            if record["tool_call_id"] == tool_call_id or record["id"] == approval_id:
                if record["status"] != "pending":
                    raise ApprovalAlreadyResolvedError(resolved_message(record))
                return item
        _raise_decided(snapshot, req, tool_call_id, approval_id)
        given = (f"tool_call_id {tool_call_id!r}" if tool_call_id is not None
                 else f"id {approval_id!r}")
        open_ids = [i.record["tool_call_id"] for i in items if i.shown["status"] == "pending"]
        msg = f"no pending approval with {given} in run {req.run_id!r}; pending: {open_ids}"
        raise ApprovalNotFoundError(msg)
    candidates = [i for i in items if i.shown["status"] == "pending"
                  and (kind is None or i.record["kind"] == kind)]
    if len(candidates) == 1:
        return candidates[0]
    decided = [i for i in items if kind is None or i.record["kind"] == kind]
    if not candidates and len(decided) == 1:
        raise ApprovalAlreadyResolvedError(resolved_message(decided[0].shown))
    if not candidates:
        what = f"{kind}s" if kind else "approvals or suspensions"
        raise ApprovalNotFoundError(f"run {req.run_id!r} has no pending {what}")
    ids = [i.record["tool_call_id"] for i in candidates]
    msg = f"run {req.run_id!r} has {len(ids)} pending tool calls; pass tool_call_id, one of {ids}"
    raise AmbiguousApprovalError(msg, pending_ids=ids)


def _raise_decided(snapshot: StateSnapshot, req: Request, tool_call_id: str | None,
                   approval_id: str | None) -> None:
    """A call decided earlier: say so, rather than 'not found'. The current turn's plan knows;
    for an earlier turn, the inbox index of this thread does."""
    plan = snapshot.values.get("turn") or {}
    known: list[Any] = [r for call in plan.get("calls") or []
                        for r in (call.get("approval"), call.get("suspension")) if r]
    if req.store is not None:
        wanted = {"tool_call_id": tool_call_id} if tool_call_id else {"id": approval_id}
        known += [item.value for item in req.store.search(
            APPROVALS, filter={"thread_id": req.thread_id, **wanted}, limit=SCAN_LIMIT)]
    for record in known:
        if record["status"] == "pending":
            continue
        if record["tool_call_id"] == tool_call_id or record["id"] == approval_id:
            raise ApprovalAlreadyResolvedError(resolved_message(record))


def _commands(items: list[Waiting], new: Mapping[str, Decision],
              *, record_only: bool = False) -> Command[Any]:
    """One resume value per interrupt: the new decisions plus those the ledger holds."""
    by_interrupt: dict[str, list[Decision]] = {}
    for item in items:
        decisions = by_interrupt.setdefault(item.interrupt_id, [])
        if item.record["id"] in new:
            decisions.append(new[item.record["id"]])
        elif item.decision is not None:
            keys = ("type", "tool_call_id", "args", "data", "decided_by", "comment", "audited")
            held: Any = {k: item.decision[k] for k in keys if k in item.decision}
            decisions.append(held)
    touched = {i.interrupt_id for i in items if i.record["id"] in new} or set(by_interrupt)
    resume = {
        interrupt_id: GateResume(decisions=decisions, record_only=record_only)
        for interrupt_id, decisions in by_interrupt.items()
        if interrupt_id in touched or decisions
    }
    return Command(resume=resume)


def _expire(items: list[Waiting], snapshot: StateSnapshot, req: Request) -> list[Waiting]:
    """Touching a run declines what waited past its expiry (even on a check-only pass: an
    expiry is a fact, not a choice)."""
    if expire_overdue([i.shown for i in items], req.ledger, req.store,
                      thread_id=req.thread_id, run_id=req.run_id):
        return waiting(snapshot, req.ledger)
    return items


def decision_command(
    snapshot: StateSnapshot,
    req: Request,
    *,
    tool_call_id: str | None,
    approval_id: str | None = None,
    approve: bool,
    decided_by: str | None,
    comment: str | None,
    args: Mapping[str, Any] | None,
    args_digest: str | None = None,
    remember: Literal["once", "thread"] = "once",
    record_only: bool = False,
) -> tuple[Command[Any], ApprovalRecord]:
    """Approve (or edit) or decline one waiting call; claims it in the ledger."""
    if remember not in ("once", "thread"):
        msg = f"remember must be 'once' or 'thread', got {remember!r}"
        raise GraphkitError(msg)
    items = _expire(waiting(snapshot, req.ledger), snapshot, req)
    try:
        item = _select(items, snapshot, req, tool_call_id=tool_call_id,
                       approval_id=approval_id, kind="approval" if approve else None)
    except ApprovalAlreadyResolvedError as exc:
        known = next((i.shown for i in items if tool_call_id in (i.record["tool_call_id"],)
                      or approval_id == i.record["id"]), None)
        audit(req.store, "refused", thread_id=req.thread_id, run_id=req.run_id,
              record=dict(known) if known else {"id": approval_id, "tool_call_id": tool_call_id},
              by=decided_by, detail=f"{type(exc).__name__}: {exc}")
        raise
    with audited_refusal(req.store, item.record, by=decided_by, thread_id=req.thread_id,
                         run_id=req.run_id):
        return _decide(items, item, req, approve=approve, decided_by=decided_by,
                       comment=comment, args=args, args_digest=args_digest, remember=remember,
                       record_only=record_only)


def _decide(
    items: list[Waiting],
    item: Waiting,
    req: Request,
    *,
    approve: bool,
    decided_by: str | None,
    comment: str | None,
    args: Mapping[str, Any] | None,
    args_digest: str | None,
    remember: Literal["once", "thread"],
    record_only: bool,
) -> tuple[Command[Any], ApprovalRecord]:
    record = item.record
    tool = req.find_tool(record["agent_path"], record["tool_name"])

    def check_args(edited: Mapping[str, Any]) -> object:
        return validate_args(tool, edited) if tool is not None else None

    decision, event = human_decision(
        record, approve=approve, approvers=req.approvers, decided_by=decided_by,
        comment=comment, args=args, args_digest=args_digest, check_args=check_args)
    if not req.dry_run:
        claim(req.ledger, req.store, record, decision, thread_id=req.thread_id,
              run_id=req.run_id, event=event)
        if remember == "thread" and approve and req.store is not None:
            grant(req.store, thread_id=req.thread_id, agent_path=record["agent_path"],
                  tool_name=record["tool_name"], by=decided_by, approval_id=record["id"])
            audit(req.store, "granted", thread_id=req.thread_id, run_id=req.run_id,
                  record=record, by=decided_by,
                  detail=f"later {record['tool_name']} calls in this thread need no approval")
    return _commands(items, {record["id"]: decision}, record_only=record_only), record


def resume_data_command(
    snapshot: StateSnapshot, req: Request, *, tool_call_id: str | None, data: Any
) -> Command[Any]:
    """Resume one suspended tool with `data` (validated by its resume_schema)."""
    items = waiting(snapshot, req.ledger)
    item = _select(items, snapshot, req, tool_call_id=tool_call_id, approval_id=None,
                   kind="suspension")
    record = item.record
    if record["kind"] != "suspension":
        msg = (f"tool call {record['tool_call_id']!r} waits for an approval, not resume data; "
               "use approve_tool_call or decline_tool_call")
        raise GraphkitError(msg)
    checked = validate_resume(req.find_tool(record["agent_path"], record["tool_name"]), data)
    decision = Decision(type="resume", tool_call_id=record["tool_call_id"], data=checked,
                        audited=True)
    if not req.dry_run:
        claim(req.ledger, req.store, record, decision, thread_id=req.thread_id,
              run_id=req.run_id, event="resumed")
    return _commands(items, {record["id"]: decision})


def continue_command(snapshot: StateSnapshot, req: Request) -> Any:
    """Continue once every waiting call is decided (in the graph or in the ledger)."""
    items = _expire(waiting(snapshot, req.ledger), snapshot, req)
    undecided = [i.record["tool_call_id"] for i in items if i.shown["status"] == "pending"]
    if undecided:
        msg = (f"run {req.run_id!r} still has undecided tool calls {undecided}; decide them "
               "(resolve_tool_approval / approve_tool_call / resume_stream / the inbox) first")
        raise ApprovalsPendingError(msg)
    if items:
        return _commands(items, {})
    return None  # continue a run stopped by on_state_change (or a finished one: no-op)


def start_payload(snapshot: StateSnapshot, messages: list[BaseMessage],
                  options: RunOptions) -> Any:
    """The graph input for a new user message, superseding whatever waits."""
    found = pending_from_interrupts(snapshot.interrupts)
    if not messages and not snapshot.values:
        msg = "nothing to run: pass a message to start a new thread"
        raise GraphkitError(msg)
    if not (found and messages):
        return {"messages": messages, "options": options} if messages else None
    # A message never approves anything, whatever it says: what waits is declined as
    # superseded, except suspensions that auto-resume can read their data for.
    said = messages_to_dict(messages)
    auto = bool(options.get("auto_resume_suspended_tools"))
    resume: dict[str, GateResume] = {}
    nested = False
    for interrupt_id, record in found:
        inner = len(record["agent_path"]) > 1  # the message is for the supervisor
        nested = nested or inner
        resume[interrupt_id] = GateResume(supersede=said, auto_resume=auto, queue=not inner)
    plan = snapshot.values.get("turn")
    if nested and plan:
        queued = [*(plan.get("queued") or []), *said]
        return Command(resume=resume, update={"turn": {**plan, "queued": queued}})
    return Command(resume=resume)
