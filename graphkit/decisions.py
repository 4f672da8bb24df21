"""Taking a human decision, the same way from the agent's API and from the operator inbox.

A decision is checked (who may decide, the digest of what was reviewed, edited arguments),
then claimed in the ledger, where exactly one claim per approval wins, and written to the audit
log. Refusals are audited too, and change nothing else. The graph applies claimed decisions the
next time the run is resumed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from langgraph.store.base import BaseStore

from graphkit.errors import (
    ApprovalAlreadyResolvedError,
    ApproverNotAllowedError,
    ArgsDigestMismatchError,
    GraphkitError,
)
from graphkit.journal import audit, now_iso
from graphkit.ledger import Ledger
from graphkit.types import ApprovalRecord, Decision, PendingApproval

__all__ = [
    "Approvers",
    "ArgsDigestMismatchError",
    "audited_refusal",
    "check_decider",
    "check_digest",
    "claim",
    "expire_overdue",
    "human_decision",
    "overdue",
    "overlay",
    "resolved_message",
    "with_decision",
]

Approvers = Callable[[str | None, PendingApproval], bool]
Remember = Literal["once", "thread"]


def resolved_message(record: Mapping[str, Any], decision: Mapping[str, Any] | None = None
                     ) -> str:
    status = (decision or {}).get("status") or record.get("status")
    by = (decision or {}).get("decided_by") or record.get("decided_by")
    comment = (decision or {}).get("comment") or record.get("comment")
    why = f" ({comment})" if comment else ""
    return (
        f"approval {record['id']!r} for tool call {record['tool_call_id']!r} "
        f"({record['tool_name']}) was already {status} by {by or 'nobody in particular'}{why}; "
        "a decision is final"
    )


@contextlib.contextmanager
def audited_refusal(store: BaseStore | None, record: Mapping[str, Any] | None, *,
                    by: str | None, thread_id: str, run_id: str | None) -> Iterator[None]:
    """Audit any refusal raised in the body (then let it propagate): refused attempts are part
    of the record."""
    try:
        yield
    except GraphkitError as exc:
        audit(store, "refused", thread_id=thread_id, run_id=run_id,
              record=dict(record) if record else None, by=by,
              detail=f"{type(exc).__name__}: {exc}")
        raise


def check_decider(
    approvers: Approvers | None, decided_by: str | None, record: ApprovalRecord
) -> None:
    """Raise `ApproverNotAllowedError` unless the policy allows this decider."""
    if approvers is None:
        return
    try:
        allowed = bool(approvers(decided_by, PendingApproval.from_record(record)))
        reason = "the approvers policy refused"
    except Exception as exc:  # a policy that cannot decide has allowed nothing
        allowed, reason = False, f"the approvers policy raised {exc!r}"
    if allowed:
        return
    msg = (
        f"{decided_by!r} may not decide approval {record['id']!r} ({record['tool_name']} in "
        f"{'/'.join(record['agent_path'])}): {reason}"
    )
    raise ApproverNotAllowedError(msg)


def check_digest(record: ApprovalRecord, digest: str | None) -> None:
    """A decision bound to a digest applies only to exactly those arguments."""
    if digest is None or digest == record["args_digest"]:
        return
    msg = (
        f"approval {record['id']!r} now holds arguments with digest {record['args_digest']!r}, "
        f"not the reviewed {digest!r}; review the current arguments and decide again"
    )
    raise ArgsDigestMismatchError(msg)


def human_decision(
    record: ApprovalRecord,
    *,
    approve: bool,
    approvers: Approvers | None,
    decided_by: str | None,
    comment: str | None,
    args: Mapping[str, Any] | None,
    args_digest: str | None,
    check_args: Callable[[Mapping[str, Any]], object],
) -> tuple[Decision, str]:
    """Check a reviewer's decision on `record`; the `Decision` and its audit event.

    Shared by the agent (which checks edited args with the tool's pydantic schema) and the
    inbox (which has only the schema's JSON), so both refuse exactly the same things.
    """
    if record["kind"] == "suspension" and approve:
        msg = (f"tool call {record['tool_call_id']!r} is a suspended tool waiting for input; "
               "resume it with resume data (agent.resume_stream), or decline it")
        raise GraphkitError(msg)
    check_decider(approvers, decided_by, record)
    check_digest(record, args_digest)
    decision = Decision(type="approve" if approve else "reject",
                        tool_call_id=record["tool_call_id"], decided_by=decided_by,
                        comment=comment, audited=True)
    if approve and args is not None:
        check_args(args)
        decision["type"] = "edit"
        decision["args"] = dict(args)
    if record["kind"] == "suspension":
        return decision, "cancelled"
    return decision, {"approve": "approved", "edit": "edited"}.get(decision["type"], "rejected")


def claim(
    ledger: Ledger,
    store: BaseStore | None,
    record: ApprovalRecord,
    decision: Decision,
    *,
    thread_id: str,
    run_id: str | None,
    event: str,
) -> dict[str, Any]:
    """Record the decision if nobody did before; else audit and raise."""
    status = "approved" if decision.get("type") in ("approve", "edit", "resume") else "rejected"
    entry: dict[str, Any] = {**decision, "status": status, "decided_at": now_iso(),
                             "audited": True}
    if not ledger.claim(record["id"], thread_id, entry):
        earlier = ledger.decision(record["id"])
        raise ApprovalAlreadyResolvedError(resolved_message(record, earlier))
    edited = decision.get("args")
    audit(store, event, thread_id=thread_id, run_id=run_id, record=record,  # type: ignore[arg-type]
          by=decision.get("decided_by"), comment=decision.get("comment"),
          args_before=record["args"], args_after=edited if edited is not None else None,
          detail="expired" if event == "expired" else None)
    return entry


def with_decision(record: ApprovalRecord, decision: Mapping[str, Any] | None
                  ) -> ApprovalRecord:
    """The record as a reviewer should see it, with a claimed decision the graph has not
    applied yet."""
    if decision is None or record["status"] != "pending":
        return record
    return {**record, "status": decision["status"],  # type: ignore[typeddict-item]
            "decided_by": decision.get("decided_by"), "comment": decision.get("comment"),
            "decided_at": decision.get("decided_at"), "approved_args": decision.get("args")}


def overlay(records: Iterable[ApprovalRecord], ledger: Ledger) -> list[ApprovalRecord]:
    """Records with the ledger's decisions shown on those the graph has not applied yet."""
    items = list(records)
    decided = ledger.decisions(r["id"] for r in items if r["status"] == "pending")
    return [with_decision(record, decided.get(record["id"])) for record in items]


def overdue(record: ApprovalRecord, now: datetime | None = None) -> bool:
    expires = record.get("expires_at")
    if not expires or record["status"] != "pending" or record["kind"] != "approval":
        return False
    moment = now or datetime.now(UTC)
    return datetime.fromisoformat(str(expires).replace("Z", "+00:00")) <= moment


def expire_overdue(
    records: Iterable[ApprovalRecord],
    ledger: Ledger,
    store: BaseStore | None,
    *,
    thread_id: str,
    run_id: str | None,
) -> list[ApprovalRecord]:
    """Decline, as expired, every undecided approval past its `expires_at`; never approve."""
    expired: list[ApprovalRecord] = []
    for record in records:
        if not overdue(record):
            continue
        decision = Decision(type="reject", tool_call_id=record["tool_call_id"],
                            decided_by=None,
                            comment=f"expired: not decided by {record.get('expires_at')}")
        try:
            claim(ledger, store, record, decision, thread_id=thread_id, run_id=run_id,
                  event="expired")
        except GraphkitError:
            continue  # decided (or expired) by someone else first
        expired.append(record)
    return expired
