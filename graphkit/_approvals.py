"""Reading a model turn into the approval gate's plan, and what the paused graph shows.

`plan_turn` reads a model turn once (validating arguments, calling predicates and prompt
functions exactly once per call, giving every call and approval a fresh id) and says what the
ledger must record; `interrupt_value` is the interrupt payload (graphkit's records beside
LangChain's HITL request). Deciding is `graphkit._review`'s; applying decisions, the gate's.
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, messages_from_dict
from langchain_core.tools import BaseTool

from graphkit._context import last_ai
from graphkit._ledger import DONE, ApprovalRow, AuditRow, CallRow, GrantRow, Ledger
from graphkit._review import Choice, audit_row, check
from graphkit._secrets import (
    PATHS_KEY,
    SALT_KEY,
    copy_secrets,
    holds_secret,
    masked,
    masked_record,
    new_salt,
    record_digest,
    scrubbed,
    secret_values,
    shows_masked,
    withheld,
)
from graphkit._settings import GateSettings
from graphkit._state import CallPlan, RunOptions, TurnPlan, turn_key
from graphkit._validate import (
    as_received,
    declared_secret_paths,
    iso_time,
    now_iso,
    under_every_name,
    validated_args,
)
from graphkit.errors import GraphkitError, InvalidApprovedArgsError
from graphkit.tools import (
    DEFAULT_DECISIONS,
    DelegationTool,
    GraphkitTool,
    allowed_for,
    render_prompt,
)
from graphkit.types import ApprovalKind, ApprovalRecord, Verdict, args_digest

__all__ = [
    "ARGS_WITHHELD",
    "INTERRUPT_MARKER",
    "Planned",
    "answered_ids",
    "interrupt_value",
    "new_id",
    "plan_turn",
    "same_content",
    "suspension_record",
    "telemetry",
    "turn_results",
    "waiting_records",
]

logger = logging.getLogger("graphkit")

INTERRUPT_MARKER = "graphkit"
ARGS_WITHHELD = "args_withheld"
"""In an interrupt's record: long text of its arguments is withheld (the ledger has it)."""
"""Key present in every interrupt value graphkit raises (value: the payload version)."""

NOT_A_TOOL = "{name!r} is not a valid tool, try one of {available}."
INVALID_ARGS = "Error: invalid arguments for tool {name!r}: {errors}. The call did not run."
LOST_SECRET = ("Error: the secret arguments of this call to {name!r} are kept only with the "
               "run that planned it, and this thread does not have them (it was copied, or "
               "its record is gone). The call did not run; call the tool again.")
COPIED_SECRET = (
    "Error: the arguments of this call to {name!r} hold, outside the arguments its tool keeps "
    "secret, a secret that a call of this reply (this one or another) was given. A secret "
    "goes only where a tool declares one: shown here, reviewers would read it. The call did "
    "not run; call the tool again without it.")
"""Refused rather than masked: a masked payment or shell command is one a reviewer approves
unseen (helper-67), and a mask cannot hide a key."""
DUPLICATE_ID = (
    "Error: tool call id {id!r} of {name!r} is not unique in this turn; every call needs its "
    "own id. None of the calls with that id ran."
)


def new_id(prefix: str) -> str:
    """A fresh id for an approval, a suspension or a planned call: never derived from ids a
    model (or a client) controls, so a reused message or tool-call id cannot inherit an old
    decision."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _prompt(tool: BaseTool, args: dict[str, Any], secrets: Sequence[Sequence[str | int]]
            ) -> str:
    """The reviewer's question, rendered from the arguments as a view shows them: secrets
    masked, long text withheld (the prompt is shown wherever the arguments are)."""
    args = withheld(masked(args, secrets))[0]
    default = f"Approve {tool.name}?"
    template = tool.approval_prompt if isinstance(tool, GraphkitTool) else None
    if template is None:
        return default
    if isinstance(template, str):
        return render_prompt(template, under_every_name(tool, args))
    try:
        return str(template(copy.deepcopy(args)))  # (its own: nothing it changes runs)
    except Exception:  # the pause still happens; only the wording is lost
        logger.warning("approval_prompt of %s raised; using the default prompt", tool.name,
                       exc_info=True)
        return default


def _needs(tool: BaseTool, args: dict[str, Any], required: bool) -> tuple[bool, Verdict]:
    """Whether the call needs a human, and why. Calls a predicate exactly once."""
    # Request-level approval is about actions: a delegation is not one, the subagent's own
    # tool calls are, and they inherit the request's options.
    requested = required and not isinstance(tool, DelegationTool)
    rule = tool.needs_approval if isinstance(tool, GraphkitTool) else False
    if callable(rule):
        try:  # (a copy its own: nothing it changes runs)
            asked = bool(rule(copy.deepcopy(as_received(tool, args))))
        except Exception as exc:  # fail closed: a gate that cannot decide has granted nothing
            # (its kind only, as an approvers policy's: its message, or its traceback's, may
            # hold the secret argument it read in clear: helper-113)
            logger.warning("needs_approval predicate of %s raised %s; asking a human",
                           tool.name, type(exc).__name__)
            asked = True
        return requested or asked, "required" if requested else "conditional"
    return requested or bool(rule), "required"


def _ttl(tool: BaseTool, settings: GateSettings) -> float | None:
    ttl = tool.approval_ttl if isinstance(tool, GraphkitTool) else None
    ttl = ttl if ttl is not None else settings.approval_ttl
    return ttl.total_seconds() if ttl is not None else None


@dataclass(slots=True)
class Planned:
    """A model turn read by the gate: the plan, error answers, and what the ledger records."""

    plan: TurnPlan
    errors: list[ToolMessage]
    calls: list[CallRow] = field(default_factory=list)
    approvals: list[ApprovalRow] = field(default_factory=list)
    audits: list[AuditRow] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)
    """The secret values the turn's calls hold (`_reply_secrets`)."""
    written: dict[str, list[list[str | int]]] = field(default_factory=dict)
    """Where each call (by id), as the model wrote it, holds the secrets its tool declares:
    a key an alias or the field's name gives, a refused call's too (what the conversation
    masks)."""
    copied: set[str] = field(default_factory=set)
    """The ids of the calls refused for holding a secret of the reply (`COPIED_SECRET`),
    whatever else refuses them: the conversation keeps none of their arguments."""


def _error(content: str, call_id: str, name: str) -> ToolMessage:
    return ToolMessage(content, tool_call_id=call_id, name=name, status="error")


def plan_turn(
    ai: AIMessage,
    tools: Mapping[str, BaseTool],
    settings: GateSettings,
    options: RunOptions,
    *,
    agent_path: Sequence[str],
    thread_id: str,
    run_id: str | None,
    grants: Mapping[str, GrantRow] | None = None,
    plan_key: str,
    conversation: str | None = None,
) -> Planned:
    """Read one model turn: which calls run, which wait for a human, which are malformed.

    `grants` are tools a reviewer approved for the rest of the thread (`remember="thread"`):
    a call that would ask runs instead, as an approval by the grantor, if the agent's
    approvers policy lets the grantor approve this very call (a predicate is consulted first).
    `plan_key` files the plan and its calls (`graphkit._state.turn_key` of the stored
    message).
    """
    required = settings.require_tool_approval or bool(options.get("require_tool_approval"))
    moment = datetime.now(UTC)
    created = iso_time(moment)
    planned = Planned(TurnPlan(ai_message_id=ai.id or "", turn_key=plan_key, calls=[],
                               error=None), [])
    ids = [call.get("id") or "" for call in ai.tool_calls]
    read = _read_calls(ai, tools)
    written = [declared_secret_paths(tools.get(c["name"]), c.get("args")) for c in ai.tool_calls]
    planned.secrets, every_secret = _reply_secrets(ai, read, written)
    for call, paths in zip(ai.tool_calls, written, strict=True):
        key = str(call.get("id"))
        known = planned.written.setdefault(key, [])
        known += [p for p in paths if p not in known]
        # (as written: a key validation would drop holds it too; past the call's own secrets)
        if planned.secrets and holds_secret(masked(call.get("args"), paths), planned.secrets):
            planned.copied.add(key)
    for call in ai.tool_calls:
        call_id = call.get("id") or ""
        name = call["name"]
        tool = tools.get(name)
        if ids.count(call_id) > 1 or not call_id:
            planned.errors.append(_error(DUPLICATE_ID.format(name=name, id=call_id), call_id,
                                         name))
            continue
        if tool is None:
            content = "Error: " + NOT_A_TOOL.format(name=name, available=sorted(tools))
            planned.errors.append(_error(content, call_id, name))
            continue
        if shows_masked(ai, call):
            planned.errors.append(_error(LOST_SECRET.format(name=name), call_id, name))
            continue
        if call_id in planned.copied:
            planned.errors.append(_error(COPIED_SECRET.format(name=name), call_id, name))
            continue
        outcome = read[id(call)]
        if isinstance(outcome, InvalidApprovedArgsError):  # (where: a key may be a secret)
            errors = scrubbed(str(outcome), every_secret)
            planned.errors.append(_error(INVALID_ARGS.format(name=name, errors=errors),
                                         call_id, name))
            continue
        args, secrets = outcome
        predicate = isinstance(tool, GraphkitTool) and callable(tool.needs_approval)
        needed, verdict = _needs(tool, args, required)
        metadata: dict[str, Any] = (
            {"approval.conditional": True} if predicate else {"approval.required": needed}
        )
        key = new_id("call")
        approval: ApprovalRecord | None = None
        if needed:
            defaults = tool.approval_defaults if isinstance(tool, GraphkitTool) else None
            ttl = _ttl(tool, settings)
            approval = _pending_record(
                id=new_id("apr"), created_at=created, kind="approval", tool_name=name,
                tool_call_id=call_id, args=args,
                metadata={"prompt": _prompt(tool, args, secrets),
                          "defaults": copy.deepcopy(defaults),
                          **({PATHS_KEY: secrets, SALT_KEY: new_salt()} if secrets else {})},
                verdict=verdict, agent_path=agent_path,
                expires_at=iso_time(moment + timedelta(seconds=ttl)) if ttl is not None else None,
            )
            approval["call_key"] = key
            allowed = allowed_for(tool, settings.allowed_decisions)  # type: ignore[arg-type]
            approval["allowed_decisions"] = list(allowed)
            approval["policy"] = settings.approvers is not None
            approval["grant_ttl"] = (settings.grant_ttl.total_seconds()
                                     if settings.grant_ttl is not None else None)
            metadata["approval.verdict"] = verdict
            row = ApprovalRow(approval_id=approval["id"], thread_id=thread_id, kind="approval",
                              call_key=key, agent_path=agent_path, tool_name=name,
                              args_digest=approval["args_digest"], ttl=ttl, run_id=run_id,
                              allowed=allowed, record=approval)
            grant = (grants or {}).get(name)
            taken = None
            if grant is not None:
                try:
                    taken = check(approval, Choice(type="approve"), decided_by=grant.grantor,
                                  comment=f"remembered grant {grant.grant_id}",
                                  approvers=settings.approvers, tool=tool)
                except GraphkitError as exc:  # the grantor may not approve this one: ask
                    planned.audits.append(audit_row(
                        "refused", approval, thread_id=thread_id, run_id=run_id,
                        decided_by=grant.grantor, detail=f"grant {grant.grant_id} does not "
                        f"cover this call: {exc}", dedupe=f"{approval['id']}:grant"))
            if taken is not None and grant is not None:
                decision = {**taken.decision, "event": "auto_approved", "source": "grant",
                            "grant_id": grant.grant_id, "decided_at": created}
                approval = {**approval, "status": "approved", "decided_by": grant.grantor,
                            "comment": decision["comment"], "decided_at": created}
                row = ApprovalRow(**{**_fields(row), "status": "approved", "decision": decision})
                metadata["approval.granted"] = True
                planned.audits.append(audit_row(
                    "auto_approved", approval, thread_id=thread_id, run_id=run_id,
                    decided_by=grant.grantor, args_before=args, at=created,
                    detail=f"remembered grant {grant.grant_id} for this thread",
                    dedupe=f"{approval['id']}:auto"))
            planned.approvals.append(row)
            planned.audits.insert(0, audit_row(
                "requested", approval, thread_id=thread_id, run_id=run_id, args_before=args,
                at=created, dedupe=f"{approval['id']}:requested"))
        planned.calls.append(CallRow(call_key=key, thread_id=thread_id, agent_path=agent_path,
                                     tool_name=name, args_digest=args_digest(args),
                                     approval_id=approval["id"] if approval else None,
                                     turn_key=plan_key, args=args, tool_call_id=call_id,
                                     conversation=conversation))
        planned_call = CallPlan(
            tool_call_id=call_id,
            tool_name=name,
            key=key,
            args=args,
            sequential=predicate,
            approval=approval,
            suspension=None,
            resume_values=[],
            metadata=metadata,
            node=name if isinstance(tool, DelegationTool) else "tools",
            answer=None,
        )
        if secrets:
            planned_call["secrets"] = secrets
        planned.plan["calls"].append(planned_call)
    # the answers refused calls got, recorded as a tools node's are: a client rewrote them
    # under their ids, and the model read its words as the tool's (helper-102)
    planned.calls += [CallRow(call_key=new_id("call"), thread_id=thread_id,
                              agent_path=agent_path, tool_name=error.name or "", args_digest="",
                              approval_id=None, executed=DONE,
                              outcome={"content": error.content, "status": "error"},
                              turn_key=plan_key, tool_call_id=error.tool_call_id,
                              conversation=conversation) for error in planned.errors]
    return planned


def _read_calls(ai: AIMessage, tools: Mapping[str, BaseTool]) -> dict[
        int, tuple[dict[str, Any], list[list[str | int]]] | InvalidApprovedArgsError]:
    """Each call of a known tool, validated once (by `id()` of the call): its arguments and
    where they hold the secrets its tool declares, or why they are refused."""
    read: dict[int, Any] = {}
    ids = [call.get("id") for call in ai.tool_calls]
    for call in ai.tool_calls:
        tool = tools.get(call["name"])
        if tool is None or not call.get("id") or ids.count(call.get("id")) > 1 or shows_masked(
                ai, call):
            continue  # (refused unread: `plan_turn` says why)
        try:
            read[id(call)] = validated_args(tool, call.get("args") or {})
        except InvalidApprovedArgsError as exc:
            read[id(call)] = exc
    return read


def _reply_secrets(ai: AIMessage, read: Mapping[int, Any],
                   written: Sequence[Sequence[Sequence[str | int]]]
                   ) -> tuple[list[str], list[str]]:
    """The secrets of every call of the reply to a known tool, refused ones too (a repeated
    id, invalid arguments): those no plain argument of the reply may hold (`copy_secrets`;
    a call that does is refused, `COPIED_SECRET`: helper-65 saw it shown in clear
    everywhere), and all of them (taken out of what an error message says)."""
    copied: set[str] = set()
    every: set[str] = set()
    for call, as_written in zip(ai.tool_calls, written, strict=True):
        outcome = read.get(id(call))
        args, paths = outcome if isinstance(outcome, tuple) else (call.get("args"), as_written)
        copied.update(copy_secrets(args, paths))
        every.update(secret_values(args, paths))
    return (sorted(copied, key=lambda t: (-len(t), t)),
            sorted(every, key=lambda t: (-len(t), t)))


def _fields(row: ApprovalRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__dataclass_fields__}


def suspension_record(
    call: CallPlan, payload: dict[str, Any], *, agent_path: Sequence[str], policy: bool,
) -> ApprovalRecord:
    """The pending entry of a tool that suspended itself (`policy`: whether its agent has an
    approvers policy, which decides who may answer it)."""
    record = _pending_record(
        id=new_id("sus"), created_at=now_iso(), kind="suspension", tool_name=call["tool_name"],
        tool_call_id=call["tool_call_id"], args=call["args"],
        metadata={"suspend_payload": payload, "prompt": payload.get("message"), "defaults": None,
                  **({PATHS_KEY: call["secrets"], SALT_KEY: new_salt()}
                     if call.get("secrets") else {})},
        verdict="required", agent_path=agent_path, expires_at=None,
    )
    record["call_key"] = call["key"]
    record["policy"] = policy
    return record


def _pending_record(
    *, id: str, created_at: str, kind: ApprovalKind, tool_name: str, tool_call_id: str,
    args: dict[str, Any], metadata: dict[str, Any], verdict: Verdict,
    agent_path: Sequence[str], expires_at: str | None,
) -> ApprovalRecord:
    return ApprovalRecord(
        id=id, created_at=created_at, kind=kind, tool_name=tool_name,
        tool_call_id=tool_call_id, args=args, metadata=metadata, verdict=verdict,
        agent_path=list(agent_path), status="pending", decided_by=None, comment=None,
        decided_at=None, approved_args=None, args_digest=record_digest({"metadata": metadata},
                                                                       args),
        expires_at=expires_at,
    )


def last_turn_key(messages: Sequence[BaseMessage], scope: str = "") -> str | None:
    """The ledger's key of the conversation's last model turn (None: it has no tool calls)."""
    ai = last_ai(messages)  # type: ignore[arg-type]
    return turn_key(ai, scope) if ai is not None and ai.tool_calls else None


def last_turn_plan(ledger: Ledger, thread_id: str, agent_path: Sequence[str],
                   messages: Sequence[BaseMessage], scope: str = "") -> TurnPlan | None:
    """The ledger's plan of the conversation's last model turn (None: it has no tool calls,
    or no gate of this agent planned it in this thread)."""
    key = last_turn_key(messages, scope)
    return ledger.turn(thread_id, agent_path, key) if key is not None else None


def turn_results(messages: Sequence[BaseMessage], ai_message_id: str
                 ) -> dict[str, list[ToolMessage]]:
    """The ToolMessages after the turn of `ai_message_id` (up to the next model message), by
    tool call id, in their order."""
    seen = False
    results: dict[str, list[ToolMessage]] = {}
    for message in messages:
        if not seen:
            seen = message.id == ai_message_id
            continue
        if isinstance(message, ToolMessage):
            results.setdefault(message.tool_call_id, []).append(message)
        elif isinstance(message, AIMessage):
            break
    return results


def answered_ids(messages: Sequence[BaseMessage], ai_message_id: str) -> set[str]:
    """Tool call ids of the turn that already have their ToolMessage (ran, refused or failed)."""
    return set(turn_results(messages, ai_message_id))


def same_content(a: Any, b: Any) -> bool:
    """Whether two results' contents are the same (a tool's content may be a list of blocks)."""
    if isinstance(a, str) and isinstance(b, str):  # (the common case: every result, each turn)
        return a == b
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                      default=str)


def waiting_records(plan: TurnPlan, answered: set[str]) -> list[ApprovalRecord]:
    """Approvals and suspensions of the turn that hold the run (undecided, or a suspension)."""
    records: list[ApprovalRecord] = []
    for call in plan["calls"]:
        if call["tool_call_id"] in answered or call["answer"]:
            continue
        if call["suspension"] is not None:
            records.append(call["suspension"])
        elif call["approval"] is not None and (
            call["approval"]["status"] == "pending"
        ):
            records.append(call["approval"])
    return records


def interrupt_value(
    plan: TurnPlan, answered: set[str], *, agent_path: Sequence[str],
    ledger: Any = None, rows: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The interrupt payload: graphkit's records beside LangChain's HITL request shape. What
    a reviewer may decide comes from the ledger's rows (the plan is client-writable): `rows`
    the caller read already, the others read here."""
    records = waiting_records(plan, answered)
    if ledger is not None:
        known = dict(rows or {})
        rows = {**known, **ledger.approvals(
            r["id"] for r in records if r["kind"] == "approval" and r["id"] not in known)}
        records = [{**r, "allowed_decisions": ["reject"] if r["kind"] == "suspension" else
                    list(rows[r["id"]].allowed or DEFAULT_DECISIONS)}
                   if r["id"] in rows else r for r in records]  # type: ignore[misc]
    # a view of the calls: their secret arguments masked (the plan keeps them, and runs them),
    # long text withheld (the ledger keeps it once; `_events.in_full` reads it back)
    records = [_withheld(masked_record(r)) for r in records]  # type: ignore[misc]
    undecided = [r for r in records if r["kind"] == "approval" and r["status"] == "pending"]
    return {
        INTERRUPT_MARKER: 1,
        "agent_path": list(agent_path),
        "approvals": records,
        "action_requests": [
            {"name": r["tool_name"], "args": r["args"], "description": r["metadata"]["prompt"]}
            for r in undecided
        ],
        "review_configs": [
            {"action_name": r["tool_name"],
             "allowed_decisions": list(r.get("allowed_decisions") or DEFAULT_DECISIONS)}
            for r in undecided
        ],
        "error": plan.get("error"),
    }



def _withheld(record: dict[str, Any]) -> dict[str, Any]:
    args, any_withheld = withheld(record.get("args"))
    if not any_withheld:
        return record
    return {**record, "args": args, ARGS_WITHHELD: True}


def telemetry(record: ApprovalRecord, status: str) -> dict[str, Any]:
    """The payload of a `tool-approval` stream chunk."""
    return {
        "status": status,
        "id": record["id"],
        "tool_name": record["tool_name"],
        "tool_call_id": record["tool_call_id"],
        "decided_by": record["decided_by"],
        "comment": record["comment"],
        "agent_path": record["agent_path"],
    }


Extractor = Callable[[CallPlan, list[BaseMessage]], Any]
"""Reads resume data for a suspended call from the user's new message(s); None if it cannot."""


def parsed_messages(data: Sequence[Any], *, what: str) -> list[BaseMessage]:
    """Serialised messages (`messages_to_dict`) as messages; a typed error for anything else
    (they may come from a client)."""
    try:
        return list(messages_from_dict(list(data)))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        msg = f"{what} must be serialised messages (messages_to_dict): {exc!r}"
        raise GraphkitError(msg) from exc
