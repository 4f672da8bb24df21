"""Taking a human decision, the one way every door takes it: check, claim, audit.

The Agent API, the inbox, the CLI and the approval gate itself (for a raw
`Command(resume=...)` from the LangGraph server, Studio or Agent Chat UI) all call `judge`.
It checks who decides (the approvers policy, called with the arguments that will run), the
digest of what was reviewed, edited arguments (by the tool's own model where the tool is at
hand), and size bounds; then claims the approval in the ledger, where only a pending,
unexpired approval for exactly those arguments can be claimed, once, together with its audit
entry. A refusal is audited and changes nothing else.

The gate applies a claimed decision only after `verify` has checked it again against the
agent's own policy and the tool's own model: a decision claimed through a door that could not
check everything (the inbox of another process, a CLI) is reopened when it fails, never
stranded.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, assert_never

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from graphkit._ledger import ApprovalRow, AuditRow, Decline, GrantRow, Ledger
from graphkit._limits import MAX_TEXT, check_text, check_value
from graphkit._secrets import (
    MASK,
    PATHS_KEY,
    masked,
    masked_record,
    record_digest,
    record_paths,
    restored,
    scrub_exception,
    secret_values,
    stray_mask,
    unmasked,
    with_secrets,
)
from graphkit._settings import DEFAULT_GRANT_TTL, Approvers
from graphkit._validate import (
    args_json_schema,
    declared_secret_paths,
    now_iso,
    secret_paths_of,
    unknown_args,
    validate_args,
    validate_resume,
)
from graphkit.errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApproverNotAllowedError,
    ArgsDigestMismatchError,
    DecisionNotAllowedError,
    GraphkitError,
    InvalidApprovedArgsError,
)
from graphkit.tools import DEFAULT_DECISIONS
from graphkit.types import ApprovalRecord, DecisionType, PendingApproval

__all__ = [
    "Approvers",
    "Choice",
    "Remember",
    "Taken",
    "audit_row",
    "grant_record",
    "identity_of",
    "named",
    "parse_choice",
    "refuse_unknown",
    "resolved_message",
    "shown",
    "supersede",
    "superseded",
    "taken_by",
    "tool_call_id_of",
    "verify",
]

Remember = Literal["once", "thread"]
ChoiceType = DecisionType
AUTH_USER_KEY = "langgraph_auth_user"
"""Where the LangGraph server puts the authenticated user of a run, in `configurable`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Choice:
    """What a reviewer chose: LangChain's HITL decisions plus `resume` for a suspended tool.

    A closed set: `parse_choice` refuses anything else, and every match over `type` ends in
    `assert_never`.
    """

    type: ChoiceType
    args: dict[str, Any] | None = None
    """The edited arguments (`edit` only)."""
    message: str | None = None
    """The reviewer's words: a rejection's reason, or a `respond`'s answer to the model."""
    data: Any = None
    """Resume data (`resume` only)."""
    digest: str | None = None
    """The `args_digest` the reviewer saw; the decision applies only to those arguments."""
    tool_name: str | None = None
    """An edit's `edited_action.name`: it must be the waiting call's own tool (an edit never
    switches tools)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Taken:
    """A decision that passed every check, as the ledger records it."""

    status: Literal["approved", "rejected"]
    event: str
    decision: dict[str, Any]
    run_args: dict[str, Any] | None
    """The arguments the call runs with (None when it will not run)."""


_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
"""Letters that print as nothing (the Hangul fillers, the blank Braille pattern)."""


def _shows(char: str) -> bool:
    return (not char.isspace() and unicodedata.category(char)[0] not in "CZM"
            and char not in _BLANK_LETTERS)


def named(decided_by: str | None) -> str | None:
    """Who a decision names: a name with nothing to read in it (empty; spaces, controls,
    zero-width or combining characters, blank letters only) names nobody, at every door
    alike, so that an approvers policy refuses it as it refuses a decision without a name
    (`decided_by=""` passed the policy's own test before, helper-49; "\u200b", helper-51)."""
    if isinstance(decided_by, str) and not any(_shows(c) for c in decided_by):
        return None
    return decided_by


def identity_of(config: RunnableConfig) -> str | None:
    """The authenticated user of a LangGraph server run, if any (never from a payload)."""
    user = (config.get("configurable") or {}).get(AUTH_USER_KEY)
    if user is None:
        return None
    identity = user.get("identity") if isinstance(user, Mapping) else getattr(
        user, "identity", None)
    return named(str(identity)) if identity else None


def _text(value: Any, key: str, index: int) -> str | None:
    if value is None or isinstance(value, str):
        return value
    msg = f"decision #{index}: {key!r} must be a string, got {type(value).__name__}"
    raise GraphkitError(msg)


COMMON_FIELDS = frozenset({"type", "tool_call_id", "id", "decided_by", "args_digest"})
"""Fields any decision may carry: which call, who (only checked), the digest reviewed."""
DECISION_FIELDS: dict[str, frozenset[str]] = {
    "approve": frozenset({"message", "comment"}),
    "edit": frozenset({"edited_action", "args", "message", "comment"}),
    "reject": frozenset({"message", "comment"}),
    "respond": frozenset({"message"}),
    "resume": frozenset({"data"}),
}
"""The closed shape of each decision type (LangChain's, plus `resume`)."""


def parse_choice(raw: Any, index: int = 0) -> tuple[Choice, str | None, str | None, str | None]:
    """A raw decision from a resume payload: (choice, tool_call_id, approval id, claimed
    decider). Raises `GraphkitError` on anything outside the closed set. A reviewed
    `args_digest` in the payload travels in `Choice.digest`."""
    if not isinstance(raw, Mapping):
        msg = f"decision #{index} must be an object, got {type(raw).__name__}"
        raise GraphkitError(msg)
    kind = raw.get("type")
    if isinstance(kind, str) and kind in DECISION_FIELDS:
        extra = sorted(str(k) for k in raw if k not in COMMON_FIELDS | DECISION_FIELDS[kind])
        if extra:
            # a closed shape: a stray field is a client's mistake or a probe, never ignored
            msg = (f"decision #{index}: unknown field(s) {extra} in a {kind!r} decision; it "
                   f"takes {sorted(COMMON_FIELDS | DECISION_FIELDS[kind])}")
            raise GraphkitError(msg)
    call_id = _text(raw.get("tool_call_id"), "tool_call_id", index)
    approval_id = _text(raw.get("id"), "id", index)
    claimed = _text(raw.get("decided_by"), "decided_by", index)
    message = _text(raw.get("message"), "message", index) or _text(
        raw.get("comment"), "comment", index)
    digest = _text(raw.get("args_digest"), "args_digest", index)
    if kind == "approve":
        choice = Choice(type="approve", message=message, digest=digest)
    elif kind == "edit":
        action = raw.get("edited_action")
        if action is not None and not isinstance(action, Mapping):
            msg = f"decision #{index}: 'edited_action' must be an object, got {action!r}"
            raise GraphkitError(msg)
        if action is not None and (set(action) - {"name", "args"} or (
                "name" in action and not isinstance(action["name"], str))):
            msg = (f"decision #{index}: 'edited_action' takes 'name' (the tool's) and 'args', "
                   f"got {sorted(str(k) for k in action)}")
            raise GraphkitError(msg)
        if action is not None and "args" in raw:
            msg = f"decision #{index}: give the edited arguments once (edited_action.args)"
            raise GraphkitError(msg)
        args = raw.get("args", (action or {}).get("args"))
        if not isinstance(args, Mapping):
            msg = (f"decision #{index}: an edit needs the edited arguments as an object "
                   "(edited_action.args or args)")
            raise InvalidApprovedArgsError(msg)
        choice = Choice(type="edit", args=dict(args), message=message, digest=digest,
                        tool_name=(action or {}).get("name"))
    elif kind == "reject":
        choice = Choice(type="reject", message=message, digest=digest)
    elif kind == "respond":
        if not message:
            msg = f"decision #{index}: a respond decision needs the answer in 'message'"
            raise GraphkitError(msg)
        choice = Choice(type="respond", message=message, digest=digest)
    elif kind == "resume":
        choice = Choice(type="resume", data=raw.get("data"))
    else:
        msg = (f"decision #{index}: unknown decision type {kind!r}; expected one of "
               "['approve', 'edit', 'reject', 'respond', 'resume']")
        raise GraphkitError(msg)
    return choice, call_id, approval_id, claimed


def resolved_message(record: Mapping[str, Any], decision: Mapping[str, Any] | None = None
                     ) -> str:
    status = (decision or {}).get("status") or record.get("status")
    if (decision or {}).get("event") == "expired":
        status = "expired"
    by = (decision or {}).get("decided_by") or record.get("decided_by")
    comment = (decision or {}).get("comment") or record.get("comment")
    why = f" ({comment})" if comment else ""
    # no name: an anonymous reviewer, or graphkit itself (expiry, a new message), whose
    # comment then says why
    who = f" by {by}" if by else ""
    return (
        f"approval {record['id']!r} for tool call {record['tool_call_id']!r} "
        f"({record['tool_name']}) was already {status}{who}{why}; a decision is final"
    )


def audit_row(event: str, record: Mapping[str, Any] | None, *, thread_id: str,
              run_id: str | None, decided_by: str | None = None, comment: str | None = None,
              args_before: Any = None, args_after: Any = None, detail: str | None = None,
              dedupe: str | None = None, at: str | None = None) -> AuditRow:
    """One audit entry, in the shape of the contract (secret arguments masked)."""
    record = record or {}
    paths = record_paths(record)
    args_before, args_after = masked(args_before, paths), masked(args_after, paths)
    entry = {
        "event": event, "at": at or now_iso(), "thread_id": thread_id, "run_id": run_id,
        "approval_id": record.get("id"), "tool_name": record.get("tool_name"),
        "tool_call_id": record.get("tool_call_id"), "agent_path": record.get("agent_path"),
        "decided_by": decided_by, "comment": comment, "args_before": args_before,
        "args_after": args_after, "detail": detail,
    }
    return AuditRow(thread_id=thread_id, approval_id=record.get("id"), entry=entry,
                    dedupe=dedupe)


def _policy(approvers: Approvers | None, decided_by: str | None, record: ApprovalRecord,
            run_args: Mapping[str, Any] | None, choice: Choice) -> None:
    """Raise `ApproverNotAllowedError` unless the policy allows this decider, for the
    arguments that will run; with a policy, a decision without identity is refused."""
    if approvers is None:
        return
    shown = {**record, "args": dict(run_args) if run_args is not None else record["args"]}
    pending = PendingApproval.from_record({**shown, "metadata": {
        **record["metadata"], "decision": choice.type}})
    reason = "the approvers policy refused"
    if decided_by is None:
        allowed, reason = False, "no authenticated identity (the agent has an approvers policy)"
    else:
        try:
            allowed = bool(approvers(decided_by, pending))
        except Exception as exc:  # a policy that cannot decide has allowed nothing
            # (its kind only: its message may hold an argument it read, a secret in any
            # form, upper-cased or encoded, that no scrub would find: helper-79)
            allowed, reason = False, f"the approvers policy raised {type(exc).__name__}"
    if allowed:
        return
    who = repr(decided_by) if decided_by is not None else "a decider without a name"
    msg = (f"{who} may not {choice.type} approval {record['id']!r} "
           f"({record['tool_name']} in {'/'.join(record['agent_path'])}): {reason}")
    raise ApproverNotAllowedError(msg)


ArgsCheck = Callable[[Mapping[str, Any]], dict[str, Any]]


def _checker(tool: BaseTool | None) -> ArgsCheck | None:
    if tool is None:
        return None
    return lambda args: validate_args(tool, args)


def refuse_unknown(tool_name: str, schema: Mapping[str, Any] | None, args: Any) -> None:
    """Refuse an edit that names an argument the tool does not take: validation would drop
    it, and a misspelt `ammount` would leave the amount the reviewer meant to lower as the
    model wrote it."""
    if unknown := unknown_args(schema, args):
        msg = (f"tool {tool_name!r} takes no argument {', '.join(map(repr, unknown))}: an edit "
               "names only arguments the tool takes, by the keys they are shown under; "
               "nothing was decided")
        raise InvalidApprovedArgsError(msg)


def check(record: ApprovalRecord, choice: Choice, *, decided_by: str | None,
          comment: str | None, approvers: Approvers | None, tool: BaseTool | None,
          check_args: ArgsCheck | None = None, identity_required: bool = False) -> Taken:
    """Every check that needs no database; the decision as the ledger will record it.

    The policy decides approvals always (without an identity it refuses), and a suspension's
    answer whenever the decider is known or must be (`identity_required`: a client's resume);
    the trusted in-process API may answer a suspension without naming anyone.

    A refusal never shows the call's secret values, nor those an edit typed where they go:
    its message is audited, raised to whoever decided, and shown in the next interrupt, and
    what made it may quote them (a validator's, the approvers policy's error: helper-78).
    """
    try:
        return _checked(record, choice, decided_by=decided_by, comment=comment,
                        approvers=approvers, tool=tool, check_args=check_args,
                        identity_required=identity_required)
    except GraphkitError as exc:
        paths = record_paths(record)
        # (an edit's own secrets where the tool declares them: one the model's call left out
        # has no path in the record; helper-79)
        typed = declared_secret_paths(tool, choice.args) if tool is not None else []
        scrub_exception(exc, sorted({*secret_values(record.get("args"), paths),
                                     *secret_values(choice.args, [*(paths or []), *typed])},
                                    key=lambda t: (-len(t), t)))
        raise


def _checked(record: ApprovalRecord, choice: Choice, *, decided_by: str | None,
             comment: str | None, approvers: Approvers | None, tool: BaseTool | None,
             check_args: ArgsCheck | None, identity_required: bool) -> Taken:
    decided_by = named(decided_by)
    recorded = record.get("args_digest")
    if (not isinstance(record.get("args"), Mapping)
            or record_digest(record, record["args"]) != recorded):
        # the record is a copy (a run's state, an inbox entry) a client may have rewritten:
        # what is judged and run must be what its digest, bound to the ledger's, says
        msg = (f"the arguments of approval {record.get('id')!r} are not the ones it was "
               "recorded with; nothing was decided")
        raise ArgsDigestMismatchError(msg)
    check_text(comment, what="comment", error=GraphkitError, limit=MAX_TEXT)
    check_text(decided_by, what="decided_by", error=GraphkitError, limit=1_000)
    check_text(choice.message, what="message", error=GraphkitError, limit=MAX_TEXT)
    check_args = check_args or _checker(tool)
    suspension = record["kind"] == "suspension"
    if not suspension and choice.type != "resume" and choice.type not in _allowed_of(record):
        # the ledger's claim binds the same list (its own copy, written when it was planned)
        raise DecisionNotAllowedError(not_allowed(record, choice.type, _allowed_of(record)))
    run_args: dict[str, Any] | None = None
    data: Any = None
    status: Literal["approved", "rejected"]
    match choice.type:
        case "approve":
            if suspension:
                msg = (f"tool call {record['tool_call_id']!r} is a suspended tool waiting for "
                       "input; resume it with resume data, or decline it")
                raise GraphkitError(msg)
            run_args = dict(record["args"])
            status, event = "approved", "approved"
        case "edit":
            if suspension:
                msg = f"tool call {record['tool_call_id']!r} is suspended; it cannot be edited"
                raise GraphkitError(msg)
            if check_args is None:
                msg = f"tool {record['tool_name']!r} is not available to check edited arguments"
                raise InvalidApprovedArgsError(msg)
            if not isinstance(choice.args, Mapping):
                msg = (f"edited args must be a mapping of argument names, got "
                       f"{type(choice.args).__name__}")
                raise InvalidApprovedArgsError(msg)
            if choice.tool_name is not None and choice.tool_name != record["tool_name"]:
                msg = (f"an edit of a {record['tool_name']!r} call names tool "
                       f"{choice.tool_name!r}; an edit changes arguments, never the tool")
                raise InvalidApprovedArgsError(msg)
            check_value(choice.args, what=f"edited arguments for tool {record['tool_name']!r}",
                        error=InvalidApprovedArgsError)
            if tool is not None:  # (a door without the tool checks by the recorded schema)
                refuse_unknown(record["tool_name"], args_json_schema(tool), choice.args)
            # a secret the reviewer saw masked, and left so, keeps its real value
            # (and long text the interrupt withheld, left as shown, keeps its text)
            kept = unmasked(choice.args, record["args"], record_paths(record))
            if record_paths(record) and stray_mask(kept, record["args"]):
                # (a mask moved, added or renamed, or in a list item changed or moved: no
                # secret stands behind it, and the tool got the mask itself, or another item's
                # secret: helper-114, helper-116; a call that holds no secret takes the text)
                msg = (f"the edited arguments for tool {record['tool_name']!r} show the mask "
                       f"{MASK!r} where no secret of the call stands behind it (a masked value "
                       "moved or added, or in a list an item changed, or one before it dropped "
                       "or moved): type the secret, or leave each masked one as it was shown")
                raise InvalidApprovedArgsError(msg)
            run_args = check_args(restored(kept, record["args"]))
            # what runs, as read for the tool, is held to the same bounds as what was given
            # (1e20 given for an integer is an int no checkpoint holds: the gate refused it
            # after the inbox recorded it approved, helper-104 F3)
            check_value(run_args, what=f"edited arguments for tool {record['tool_name']!r}",
                        error=InvalidApprovedArgsError)
            status, event = "approved", "edited"
        case "reject":
            status, event = "rejected", "cancelled" if suspension else "rejected"
        case "respond":
            if suspension:
                msg = f"tool call {record['tool_call_id']!r} is suspended; resume or decline it"
                raise GraphkitError(msg)
            if named(str(choice.message or "")) is None:  # (every door's: helper-78, -79)
                msg = ("a respond decision needs the answer the model is to read in 'message'; "
                       "nothing was decided")
                raise GraphkitError(msg)
            status, event = "rejected", "responded"
        case "resume":
            if not suspension:
                msg = (f"tool call {record['tool_call_id']!r} ({record['tool_name']}) waits "
                       "for approval, not resume data; use approve_tool_call or "
                       "decline_tool_call")
                raise GraphkitError(msg)
            data = validate_resume(tool, choice.data)
            status, event = "approved", "resumed"
        case _:
            assert_never(choice.type)
    if not suspension or decided_by is not None or identity_required:
        _policy(approvers, decided_by, record, run_args, choice)
    decision: dict[str, Any] = {
        "type": choice.type, "event": event, "status": status, "decided_by": decided_by,
        "comment": comment or choice.message,
    }
    if choice.type == "edit":
        decision["args"] = run_args
        # the edit's own secrets (a new one, another shape): masked in every view of it too
        edited_secrets = (secret_paths_of(tool, run_args) or []) if run_args is not None else []
        if edited_secrets:
            decision[PATHS_KEY] = edited_secrets
    if choice.type == "respond":
        decision["message"] = choice.message
    if choice.type == "resume":
        decision["data"] = data
    if run_args is not None:  # an approval as is runs what the digest above was checked for
        decision["run_digest"] = (recorded if choice.type == "approve"
                                  else record_digest(record, run_args))
    return Taken(status=status, event=event, decision=decision, run_args=run_args)


def _allowed_of(record: Mapping[str, Any]) -> tuple[str, ...]:
    allowed = record.get("allowed_decisions")
    if isinstance(allowed, list | tuple) and allowed and all(isinstance(a, str) for a in allowed):
        return tuple(allowed)
    return DEFAULT_DECISIONS


def not_allowed(record: Mapping[str, Any], kind: str, allowed: Sequence[str]) -> str:
    return (f"a {kind!r} decision is not allowed for tool {record.get('tool_name')!r} "
            f"(approval {record.get('id')!r}); it allows {list(allowed)}")


def taken_by(row: ApprovalRow, choice: Choice, decided_by: str | None) -> bool:
    """Whether the decision the ledger holds is this one, taken by a client's resume already
    (a pass LangGraph retried reads its resume again): its type, decider and words."""
    decision = row.decision or {}
    return (decision.get("source") == "resume" and decision.get("type") == choice.type
            and decision.get("decided_by") == decided_by
            and decision.get("comment") == choice.message)


def _explain_lost(ledger: Ledger, record: ApprovalRecord, reviewed: str, *, thread_id: str,
                  run_id: str | None, kind: str | None = None) -> GraphkitError:
    """Why a claim did not win: unknown, decided, other arguments, or expired (then expire
    it now)."""
    row = ledger.approval(record["id"])
    if row is None or row.thread_id != thread_id:
        return ApprovalNotFoundError(f"no approval with id {record['id']!r} in this storage")
    if not same_call(row, record):
        return ArgsDigestMismatchError(
            f"approval {record['id']!r} in the ledger is for another call than the one shown "
            "(its tool, kind or agent differ); nothing was decided")
    if row.decided:
        return ApprovalAlreadyResolvedError(resolved_message(record, row.decision))
    allowed = row.allowed or DEFAULT_DECISIONS
    if row.kind == "approval" and kind is not None and kind not in allowed:
        return DecisionNotAllowedError(not_allowed(record, kind, allowed))
    if row.args_digest != reviewed:
        return ArgsDigestMismatchError(
            f"approval {record['id']!r} holds arguments with digest {row.args_digest!r}, not "
            f"the reviewed {reviewed!r}; review the current arguments and decide again")
    expire(ledger, record, thread_id=thread_id, run_id=run_id)
    return ApprovalAlreadyResolvedError(
        f"approval {record['id']!r} ({record['tool_name']}) expired before it was decided; "
        "an expired approval is declined, never approved")


def same_call(row: ApprovalRow, record: Mapping[str, Any]) -> bool:
    """Whether a record (a run's state, an inbox entry: copies a client may have written)
    describes the call the ledger's row was recorded for."""
    return (row.kind == record.get("kind") and row.tool_name == record.get("tool_name")
            and list(row.agent_path) == [str(p) for p in record.get("agent_path") or ()]
            and (row.call_key or "") == (record.get("call_key") or ""))


def expire(ledger: Ledger, record: ApprovalRecord, *, thread_id: str,
           run_id: str | None, enqueue: bool = False) -> bool:
    """Decline an approval whose time is up (by the database's clock); never approve one."""
    comment = f"expired: not decided by {record.get('expires_at')}"
    decision = {"type": "reject", "event": "expired", "status": "rejected",
                "decided_by": None, "comment": comment}
    return ledger.expire(record["id"], decision=decision, enqueue=enqueue, audits=[audit_row(
        "expired", record, thread_id=thread_id, run_id=run_id, comment=comment,
        detail="expired")], thread_id=thread_id)


def supersede(ledger: Ledger, record: Mapping[str, Any], *, comment: str, thread_id: str,
              run_id: str | None, detail: str | None = None, decided_by: str | None = None
              ) -> bool:
    """Decline a pending approval or suspension for the system's reason (a new message, a
    result a client wrote); audited as superseded, with who sent the new message where it
    was one (`identity_of` the run that brought it)."""
    decline = superseded(record, comment=comment, thread_id=thread_id, run_id=run_id,
                         detail=detail, decided_by=decided_by)
    return ledger.close(decline.approval_id, decision=decline.decision, audits=decline.audits,
                        thread_id=thread_id, still_waits=False)


def superseded(record: Mapping[str, Any], *, comment: str, thread_id: str, run_id: str | None,
               detail: str | None = None, decided_by: str | None = None) -> Decline:
    """The decline of `supersede`, for the ledger to take with what else goes with it."""
    decision = {"type": "reject", "event": "superseded", "status": "rejected",
                "decided_by": decided_by, "comment": comment}
    return Decline(record["id"], decision, [audit_row(
        "superseded", record, thread_id=thread_id, run_id=run_id, comment=comment,
        decided_by=decided_by, detail=detail)])


THREAD_DELETED = "its thread was deleted"


def withdraw_thread(ledger: Ledger, thread_id: str, *, comment: str = THREAD_DELETED,
                    served_only: bool = False, only: Collection[str] | None = None
                    ) -> list[str]:
    """A thread was deleted from the checkpointer that held it: decline, as superseded, what
    waits on a decision in it (no run will ever take one), revoke the grants its reviewers
    made for it (a new conversation under the same id asks again), and forget its runs
    queued to be continued. `served_only`: only what the LangGraph server's runs wait on (a
    run of graphkit's API on a shared database keeps its thread in its own agent's
    checkpointer). `only`: of what waits, only these (what was seen before the thread was
    found gone: a thread recreated under the same id since asks anew). The ids declined."""
    if not thread_id:
        return []  # names no thread
    withdrawn = [found.row.approval_id for found in ledger.waiting_rows(thread_id=thread_id)
                 if found.row.status == "pending"
                 and (only is None or found.row.approval_id in only)
                 and not (served_only and found.run_id is not None)
                 and supersede(ledger, {**found.record, "id": found.row.approval_id},
                               comment=comment, thread_id=thread_id, run_id=found.run_id)]
    for grant in ledger.grants(thread_id):
        if grant.revoked is None:
            ledger.revoke(grant.grant_id, {"by": None, "at": now_iso(), "reason": comment},
                          [audit_row("revoked", grant_record(ledger, grant),
                                     thread_id=thread_id, run_id=None, comment=comment,
                                     detail=f"grant {grant.grant_id} revoked: {comment}")])
    ledger.forget_ready(thread_id, served_only=served_only)
    return withdrawn


def tool_call_id_of(ledger: Ledger, call_key: str | None) -> str | None:
    """The tool_call_id of a call the ledger planned, for the audit of what only has the
    approval's row (an auditor matches entries to the model's calls by it)."""
    row = ledger.call(call_key) if call_key is not None else None
    return row.tool_call_id if row is not None else None


def grant_record(ledger: Ledger, grant: GrantRow) -> dict[str, Any]:
    """What the audit rows of a grant's revoke (or its refusal) say of it: filed under the
    approval that made it, with that call's tool_call_id (they had none: helper-97)."""
    row = ledger.approval(grant.approval_id) if grant.approval_id else None
    return {"id": grant.approval_id, "tool_name": grant.tool_name,
            "agent_path": list(grant.agent_path),
            "tool_call_id": tool_call_id_of(ledger, row.call_key if row else None)}


def refuse(ledger: Ledger, record: Mapping[str, Any] | None, exc: Exception, *,
           decided_by: str | None, thread_id: str, run_id: str | None) -> None:
    """Audit a refused decision; nothing else changes."""
    ledger.audit([audit_row("refused", record, thread_id=thread_id, run_id=run_id,
                            decided_by=decided_by, detail=f"{type(exc).__name__}: {exc}")])


def judge(
    ledger: Ledger,
    record: ApprovalRecord,
    choice: Choice,
    *,
    decided_by: str | None,
    comment: str | None = None,
    approvers: Approvers | None,
    tool: BaseTool | None,
    thread_id: str,
    run_id: str | None,
    reviewed_digest: str | None = None,
    remember: Remember = "once",
    grant_ttl: timedelta | None = DEFAULT_GRANT_TTL,
    check_args: ArgsCheck | None = None,
    source: str = "api",
    identity_required: bool = False,
    held_by: str | None = None,
) -> Callable[[], Taken]:
    """Check one decision (a refusal is audited and raised) and return what claims it, with
    its audit entry (and a grant), a lost claim audited and raised too: `judge(...)()` takes
    one decision; a door taking several checks them all before it claims any, so that one
    refused changes nothing of the others. The record is judged as the ledger recorded it
    when it was planned (a door's copy is a view: its secrets are masked), with the status
    the door saw. `held_by`: the door resumes the run next, under this owner
    (`Ledger.decide`)."""
    decided_by = named(decided_by)
    recorded = ledger.record(record["id"]) if isinstance(record.get("id"), str) else None
    if recorded is not None:
        record = {**recorded, "status": record.get("status", recorded["status"])}  # type: ignore[typeddict-item]
    try:
        if remember not in ("once", "thread"):
            msg = f"remember must be 'once' or 'thread', got {remember!r}"
            raise GraphkitError(msg)
        if (remember == "thread" and record["kind"] != "suspension"
                and "approve" not in _allowed_of(record)):
            # a grant approves later calls as the model wrote them: never one that must be
            # edited or rejected (it would be recorded, and refused at every later call)
            raise DecisionNotAllowedError(
                f"remember='thread' is a grant that approves later {record['tool_name']!r} "
                "calls as they are, which this tool does not allow; nothing was decided")
        reviewed_digest = reviewed_digest if reviewed_digest is not None else choice.digest
        if reviewed_digest is not None and reviewed_digest != record["args_digest"]:
            msg = (f"approval {record['id']!r} now holds arguments with digest "
                   f"{record['args_digest']!r}, not the reviewed {reviewed_digest!r}; review "
                   "the current arguments and decide again")
            raise ArgsDigestMismatchError(msg)
        taken = check(record, choice, decided_by=decided_by, comment=comment,
                      approvers=approvers, tool=tool, check_args=check_args,
                      identity_required=identity_required)
    except GraphkitError as exc:
        refuse(ledger, record, exc, decided_by=decided_by, thread_id=thread_id, run_id=run_id)
        raise
    decision = {**taken.decision, "source": source, "decided_at": now_iso(),
                "identity_required": identity_required}
    if choice.type == "edit" and tool is None and check_args is not None:
        decision["read_by"] = "schema"  # a door without the tool: see `verify`
    taken = Taken(status=taken.status, event=taken.event, decision=decision,
                  run_args=taken.run_args)
    grant = None
    audits = [audit_row(
        taken.event, with_secrets(record, decision), thread_id=thread_id, run_id=run_id,
        decided_by=decided_by, comment=decision["comment"], args_before=record["args"],
        args_after=taken.run_args if choice.type == "edit" else None)]
    if remember == "thread" and taken.status == "approved" and choice.type != "resume":
        grant = GrantRow(
            grant_id=f"grant_{uuid.uuid4().hex[:20]}", thread_id=thread_id,
            agent_path=record["agent_path"], tool_name=record["tool_name"],
            grantor=decided_by, approval_id=record["id"],
            ttl=grant_ttl.total_seconds() if grant_ttl is not None else None)
        audits.append(audit_row(
            "granted", record, thread_id=thread_id, run_id=run_id, decided_by=decided_by,
            detail=f"{grant.grant_id}: later {record['tool_name']} calls in this thread "
                   "that the grantor may approve need no approval"))

    def claim() -> Taken:
        try:
            if not ledger.decide(record["id"], thread_id=thread_id,
                                 args_digest=record["args_digest"], status=taken.status,
                                 decision=decision, audits=audits, grant=grant,
                                 enqueue=source == "inbox", held_by=held_by,
                                 call=record):
                raise _explain_lost(ledger, record, record["args_digest"], thread_id=thread_id,
                                    run_id=run_id, kind=choice.type)
        except GraphkitError as exc:
            refuse(ledger, record, exc, decided_by=decided_by, thread_id=thread_id,
                   run_id=run_id)
            raise
        return taken

    return claim


def auto_resume(ledger: Ledger, record: ApprovalRecord, data: Any, *, decided_by: str | None,
                approvers: Approvers | None, tool: BaseTool | None, thread_id: str,
                run_id: str | None, identity_required: bool) -> Taken | None:
    """Resume a suspended call with data read from the user's message; None when it is
    refused or was decided elsewhere (the tool then stays suspended and asks again)."""
    if data is None:
        return None
    try:
        return judge(ledger, record, Choice(type="resume", data=data), decided_by=decided_by,
                     approvers=approvers, tool=tool, thread_id=thread_id, run_id=run_id,
                     source="auto_resume", identity_required=identity_required)()
    except GraphkitError:
        return None


def verify(row: ApprovalRow, record: ApprovalRecord, *, approvers: Approvers | None,
           tool: BaseTool | None) -> Taken:
    """Check a decision the ledger holds against this agent's own policy and tool before the
    gate applies it (it may have come through a door that could not check everything)."""
    decision = row.decision or {}
    if (row.args_digest != record["args_digest"] or row.approval_id != record["id"]
            or not same_call(row, record)):
        msg = (f"the decision recorded for approval {row.approval_id!r} was made on another "
               "call or other arguments than the call now waiting")
        raise ArgsDigestMismatchError(msg)
    if decision.get("event") in ("expired", "superseded"):
        return Taken(status="rejected", event=str(decision["event"]), decision=decision,
                     run_args=None)
    kind = decision.get("type")
    choice = Choice(type=kind, args=decision.get("args"), message=decision.get("message"),
                    data=decision.get("data")) if kind in (
        "approve", "edit", "reject", "respond", "resume") else None
    if choice is None:
        msg = f"the decision recorded for approval {row.approval_id!r} has no known type"
        raise GraphkitError(msg)
    allowed = row.allowed or DEFAULT_DECISIONS
    if row.kind == "approval" and choice.type not in allowed:
        raise DecisionNotAllowedError(not_allowed(record, choice.type, allowed))
    taken = check(record, choice, decided_by=decision.get("decided_by"),
                  comment=decision.get("comment"), approvers=approvers, tool=tool,
                  identity_required=bool(decision.get("identity_required")))
    schema_read = decision.get("read_by") == "schema" and kind == "edit"
    if (taken.run_args is not None and not schema_read
            and decision.get("run_digest") != record_digest(record, taken.run_args)):
        # An edit recorded by a door without the tool (checked against its JSON schema; edits
        # of tools that validate in code of their own are refused there) runs as the tool's
        # model reads it: pydantic's own coercions only (2 for a float is 2.0, whitespace a
        # constraint strips), and the policy above judged exactly that.
        paths = record_paths(record)
        msg = (f"the tool's own model reads the approved arguments as "
               f"{masked(taken.run_args, paths)!r}, not as they were approved "
               f"({masked(decision.get('args'), paths)!r}); approve exactly those")
        raise InvalidApprovedArgsError(msg)
    return Taken(status=taken.status, event=taken.event, decision={**decision, **{
        k: v for k, v in taken.decision.items() if k in ("args", "data", "run_digest")}},
        run_args=taken.run_args)


def shown(record: ApprovalRecord, row: ApprovalRow | None) -> ApprovalRecord:
    """The record as a reviewer should see it, with a decision the ledger holds and the graph
    has not applied yet."""
    if row is not None and record.get("kind") == "approval":
        # what a reviewer may decide is the ledger's list, never the state's copy of it
        record = {**record, "allowed_decisions": list(row.allowed or DEFAULT_DECISIONS)}
    if row is None or not row.decided or record["status"] != "pending":
        return record
    decision = row.decision or {}
    decided = {**with_secrets(record, decision), "status": row.status,
               "decided_by": decision.get("decided_by"), "comment": decision.get("comment"),
               "decided_at": decision.get("decided_at"), "approved_args": decision.get("args")}
    return masked_record(decided)  # type: ignore[return-value]

