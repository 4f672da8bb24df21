"""The approval gate's decisions, as pure functions over the turn plan.

`plan_turn` reads a model turn once (validating arguments, calling predicates and prompt
functions exactly once per call); `apply_resume` applies reviewer decisions, resume data or
a superseding message to a plan; `interrupt_value` is what the paused graph shows the world.
The agent's API validates decisions with the same `apply_resume` before resuming anything, so
a refused decision raises a typed error and changes nothing.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, messages_from_dict
from langchain_core.tools import BaseTool
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, ValidationError

from graphkit.errors import (
    AmbiguousApprovalError,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    GraphkitError,
    InvalidApprovedArgsError,
    ResumeDataError,
)
from graphkit.state import CallPlan, RunOptions, TurnPlan
from graphkit.tools import DelegationTool, GraphkitTool, render_prompt
from graphkit.types import (
    ApprovalKind,
    ApprovalRecord,
    Decision,
    GateResume,
    Verdict,
    args_digest,
)

__all__ = [
    "INTERRUPT_MARKER",
    "ResumeOutcome",
    "answered_ids",
    "apply_resume",
    "interrupt_value",
    "plan_turn",
    "suspension_record",
    "telemetry",
    "waiting_records",
]

logger = logging.getLogger("graphkit")

INTERRUPT_MARKER = "graphkit"
"""Key present in every interrupt value graphkit raises (value: the payload version)."""

NOT_A_TOOL = "{name!r} is not a valid tool, try one of {available}."
INVALID_ARGS = "Error: invalid arguments for tool {name!r}: {errors}. The call did not run."
REJECTED = "Tool call {name!r} was rejected by {who}{why}. It did not run."
SUPERSEDED = "Tool call {name!r} was not run: superseded by a new user message."
CANCELLED = "Tool call {name!r} was cancelled by {who}{why} while it waited for input."
DECISION_COUNT = (
    "Number of human decisions ({given}) does not match number of pending tool calls "
    "({expected}); name each call with tool_call_id, or decide all of {ids}."
)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _now() -> str:
    return _iso(datetime.now(UTC))


def _stable_id(prefix: str, *parts: str) -> str:
    digest = hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:20]
    return f"{prefix}_{digest}"


_SERDE = JsonPlusSerializer()


def storable(value: Any, what: str, error: type[GraphkitError]) -> None:
    """Refuse a value the checkpointer could not store (e.g. an integer beyond 64 bits)
    before it is written anywhere: LangGraph would fail on it mid-run."""
    try:
        _SERDE.dumps_typed(value)
    except (TypeError, ValueError, OverflowError) as exc:
        msg = f"{what} cannot be stored in a checkpoint: {exc}"
        raise error(msg) from exc


def validate_args(tool: BaseTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """Parse `args` with the tool's schema; raises `InvalidApprovedArgsError` when they fail."""
    schema = tool.args_schema
    if not isinstance(schema, type) or not issubclass(schema, BaseModel):
        storable(dict(args), f"arguments for tool {tool.name!r}", InvalidApprovedArgsError)
        return dict(args)
    if not isinstance(args, Mapping):
        msg = f"arguments for tool {tool.name!r} must be an object, got {type(args).__name__}"
        raise InvalidApprovedArgsError(msg)
    try:
        parsed = schema.model_validate(dict(args))
    except ValidationError as exc:
        msg = (
            f"arguments {dict(args)!r} are not valid for tool {tool.name!r}: "
            f"{exc.errors(include_url=False, include_context=False)}"
        )
        raise InvalidApprovedArgsError(msg) from exc
    dumped: dict[str, Any] = parsed.model_dump(mode="json")
    storable(dumped, f"arguments for tool {tool.name!r}", InvalidApprovedArgsError)
    # Keep only what was given or has a default, without the injected context.
    return {k: v for k, v in dumped.items() if k in schema.model_fields}


def _prompt(tool: BaseTool, args: dict[str, Any]) -> str:
    default = f"Approve {tool.name}?"
    template = tool.approval_prompt if isinstance(tool, GraphkitTool) else None
    if template is None:
        return default
    if isinstance(template, str):
        return render_prompt(template, args)
    try:
        return str(template(dict(args)))
    except Exception:  # the pause still happens; only the wording is lost
        logger.warning("approval_prompt of %s raised; using the default prompt", tool.name,
                       exc_info=True)
        return default


def _decide(tool: BaseTool, args: dict[str, Any], options: RunOptions) -> tuple[bool, Verdict]:
    """Whether the call needs a human, and why. Calls a predicate exactly once."""
    # Request-level approval is about actions: a delegation is not one, the subagent's own
    # tool calls are, and they inherit the request's options.
    requested = bool(options.get("require_tool_approval")) and not isinstance(
        tool, DelegationTool)
    rule = tool.needs_approval if isinstance(tool, GraphkitTool) else False
    if callable(rule):
        try:
            asked = bool(rule(dict(args)))
        except Exception:  # fail closed: a gate that cannot decide has granted nothing
            logger.warning("needs_approval predicate of %s raised; asking a human", tool.name,
                           exc_info=True)
            asked = True
        return requested or asked, "required" if requested else "conditional"
    return requested or bool(rule), "required"


def _expiry(tool: BaseTool, options: RunOptions, created: datetime) -> str | None:
    ttl = tool.approval_ttl if isinstance(tool, GraphkitTool) else None
    seconds = ttl.total_seconds() if ttl is not None else options.get("approval_ttl")
    if seconds is None:
        return None
    return _iso(created + timedelta(seconds=float(seconds)))


def plan_turn(
    ai: AIMessage,
    tools: Mapping[str, BaseTool],
    options: RunOptions,
    *,
    agent_path: Sequence[str],
    thread_id: str,
    grants: Mapping[str, Any] | None = None,
) -> tuple[TurnPlan, list[ToolMessage]]:
    """Read one model turn: which calls run, which wait for a human, which are malformed.

    `grants` are tools a reviewer approved for the rest of the thread (`remember="thread"`):
    a call that would ask runs instead (a predicate is still consulted first).
    """
    calls: list[CallPlan] = []
    errors: list[ToolMessage] = []
    moment = datetime.now(UTC)
    created = _iso(moment)
    for call in ai.tool_calls:
        call_id = call.get("id") or ""
        name = call["name"]
        tool = tools.get(name)
        if tool is None:
            content = "Error: " + NOT_A_TOOL.format(name=name, available=sorted(tools))
            errors.append(ToolMessage(content, tool_call_id=call_id, name=name, status="error"))
            continue
        try:
            args = validate_args(tool, call.get("args") or {})
        except InvalidApprovedArgsError as exc:
            content = INVALID_ARGS.format(name=name, errors=exc)
            errors.append(ToolMessage(content, tool_call_id=call_id, name=name, status="error"))
            continue
        predicate = isinstance(tool, GraphkitTool) and callable(tool.needs_approval)
        needed, verdict = _decide(tool, args, options)
        metadata: dict[str, Any] = (
            {"approval.conditional": True} if predicate else {"approval.required": needed}
        )
        approval: ApprovalRecord | None = None
        if needed and grants and name in grants:
            needed = False
            metadata = {**metadata, "approval.granted": True}
        if needed:
            defaults = tool.approval_defaults if isinstance(tool, GraphkitTool) else None
            approval = _pending_record(
                id=_stable_id("apr", thread_id, ai.id or "", call_id), created_at=created,
                kind="approval", tool_name=name, tool_call_id=call_id, args=args,
                metadata={"prompt": _prompt(tool, args), "defaults": copy.deepcopy(defaults)},
                verdict=verdict, agent_path=agent_path,
                expires_at=_expiry(tool, options, moment),
            )
            metadata["approval.verdict"] = verdict
        calls.append(
            CallPlan(
                tool_call_id=call_id,
                tool_name=name,
                args=dict(call.get("args") or {}),
                sequential=predicate,
                approval=approval,
                suspension=None,
                resume_values=[],
                once={},
                metadata=metadata,
                node=name if isinstance(tool, DelegationTool) else "tools",
                answer=None,
            )
        )
    plan = TurnPlan(ai_message_id=ai.id or "", calls=calls, held=False, error=None)
    return plan, errors


def suspension_record(
    call: CallPlan, payload: dict[str, Any], *, agent_path: Sequence[str], thread_id: str,
    ai_message_id: str,
) -> ApprovalRecord:
    """The pending entry of a tool that suspended itself."""
    index = str(len(call["resume_values"]))
    return _pending_record(
        id=_stable_id("sus", thread_id, ai_message_id, call["tool_call_id"], index),
        created_at=_now(), kind="suspension", tool_name=call["tool_name"],
        tool_call_id=call["tool_call_id"], args=call["args"],
        metadata={"suspend_payload": payload, "prompt": payload.get("message"), "defaults": None},
        verdict="required", agent_path=agent_path, expires_at=None,
    )


def _pending_record(
    *, id: str, created_at: str, kind: ApprovalKind, tool_name: str, tool_call_id: str,
    args: dict[str, Any], metadata: dict[str, Any], verdict: Verdict,
    agent_path: Sequence[str], expires_at: str | None,
) -> ApprovalRecord:
    return ApprovalRecord(
        id=id, created_at=created_at, kind=kind, tool_name=tool_name,
        tool_call_id=tool_call_id, args=args, metadata=metadata, verdict=verdict,
        agent_path=list(agent_path), status="pending", decided_by=None, comment=None,
        decided_at=None, approved_args=None, args_digest=args_digest(args),
        expires_at=expires_at,
    )


def answered_ids(messages: Sequence[BaseMessage], ai_message_id: str) -> set[str]:
    """Tool call ids of the turn that already have their ToolMessage (ran, refused or failed)."""
    seen = False
    answered: set[str] = set()
    for message in messages:
        if not seen:
            seen = message.id == ai_message_id
            continue
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AIMessage):
            break
    return answered


def waiting_records(plan: TurnPlan, answered: set[str]) -> list[ApprovalRecord]:
    """Approvals and suspensions of the turn that hold the run: undecided, or decided but held."""
    records: list[ApprovalRecord] = []
    for call in plan["calls"]:
        if call["tool_call_id"] in answered or (call["answer"] and not plan["held"]):
            continue
        if call["suspension"] is not None:
            records.append(call["suspension"])
        elif call["approval"] is not None and (
            call["approval"]["status"] == "pending" or plan["held"]
        ):
            records.append(call["approval"])
    return records


def interrupt_value(
    plan: TurnPlan, answered: set[str], *, agent_path: Sequence[str]
) -> dict[str, Any]:
    """The interrupt payload: graphkit's records beside LangChain's HITL request shape."""
    records = waiting_records(plan, answered)
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
            {"action_name": r["tool_name"], "allowed_decisions": ["approve", "edit", "reject"]}
            for r in undecided
        ],
        "error": plan.get("error"),
    }


class ResumeOutcome:
    """The result of applying a resume value: the new plan and what to write with it."""

    def __init__(self, plan: TurnPlan) -> None:
        self.plan = plan
        self.audits: list[tuple[str, ApprovalRecord, dict[str, Any]]] = []
        """(event, record, details) the gate appends to the audit log."""
        self.events: list[dict[str, Any]] = []
        self.edited: dict[str, dict[str, Any]] = {}
        """tool_call_id -> the args it now runs with, for rewriting the AI message."""


def _find(
    calls: list[CallPlan], decision: Decision, answered: set[str]
) -> CallPlan:
    wanted_call = decision.get("tool_call_id")
    wanted_id = decision.get("id")
    for call in calls:
        records = [r for r in (call["approval"], call["suspension"]) if r is not None]
        if wanted_call is not None and call["tool_call_id"] == wanted_call and records:
            return call
        if wanted_id is not None and any(r["id"] == wanted_id for r in records):
            return call
    open_ids = [
        c["tool_call_id"]
        for c in calls
        if c["tool_call_id"] not in answered and (c["approval"] or c["suspension"])
    ]
    given = f"tool_call_id {wanted_call!r}" if wanted_call is not None else f"id {wanted_id!r}"
    msg = f"no pending approval with {given}; pending tool_call_ids: {open_ids}"
    raise ApprovalNotFoundError(msg)


def validate_resume(tool: BaseTool | None, data: Any) -> Any:
    schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
    if schema is None:
        storable(data, "resume data", ResumeDataError)
        return data
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    try:
        return schema.model_validate(data).model_dump(mode="json")
    except ValidationError as exc:
        name = tool.name if tool else "?"
        msg = (
            f"resume data {data!r} does not match resume_schema {schema.__name__} of tool "
            f"{name!r}: {exc.errors(include_url=False, include_context=False)}"
        )
        raise ResumeDataError(msg) from exc


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


def _who_why(decided_by: str | None, comment: str | None) -> tuple[str, str]:
    return (repr(decided_by) if decided_by else "a reviewer", f": {comment}" if comment else "")


Extractor = Callable[[CallPlan, list[BaseMessage]], Any]
"""Reads resume data for a suspended call from the user's new message(s); None if it cannot."""


def apply_resume(
    plan: TurnPlan,
    value: GateResume | Mapping[str, Any],
    answered: set[str],
    tools: Mapping[str, BaseTool],
    extract: Extractor | None = None,
) -> ResumeOutcome:
    """Apply decisions, resume data or a superseding message; raise on anything invalid."""
    _check_shape(value)
    new_plan: TurnPlan = copy.deepcopy(plan)
    new_plan["error"] = None
    outcome = ResumeOutcome(new_plan)
    calls = new_plan["calls"]
    open_calls = [c for c in calls if c["tool_call_id"] not in answered]

    if "supersede" in value:
        said_now = list(value.get("supersede") or [])
        queued = [*(plan.get("queued") or []), *(said_now if value.get("queue", True) else [])]
        auto = bool(value.get("auto_resume")) and extract is not None
        try:
            said = list(messages_from_dict([*(plan.get("queued") or []), *said_now]))
        except (KeyError, TypeError, ValueError) as exc:
            msg = f"'supersede' must hold serialised messages (messages_to_dict): {exc!r}"
            raise GraphkitError(msg) from exc
        for call in open_calls:
            tool = tools.get(call["tool_name"])
            schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
            if call["suspension"] is not None and auto and schema is not None and extract:
                # Only a suspension may be resumed by a message; approvals never are.
                data = extract(call, said)
                if data is not None:
                    call["resume_values"].append(data)
                    call["suspension"] = None
                continue  # unreadable: stays suspended, asks again, the message is kept
            _supersede(call, outcome)
        outcome.plan["held"] = False
        outcome.plan["queued"] = queued
        return outcome

    decisions = list(value.get("decisions") or [])
    undecided = [c for c in open_calls if c["approval"] and c["approval"]["status"] == "pending"]
    if decisions and all("tool_call_id" not in d and "id" not in d for d in decisions):
        if len(decisions) != len(undecided):
            ids = [c["tool_call_id"] for c in undecided]
            msg = DECISION_COUNT.format(given=len(decisions), expected=len(undecided), ids=ids)
            raise AmbiguousApprovalError(msg, pending_ids=ids)
        targets = undecided
    else:
        targets = [_find(calls, d, answered) for d in decisions]

    seen: set[str] = set()
    for call, decision in zip(targets, decisions, strict=True):
        call_id = call["tool_call_id"]
        if call_id in seen:
            msg = f"two decisions for tool_call_id {call_id!r}; give one decision per call"
            raise GraphkitError(msg)
        seen.add(call_id)
        _apply_one(call, decision, answered, tools, outcome)
    outcome.plan["held"] = bool(value.get("record_only"))
    return outcome


_TEXT_FIELDS = ("type", "tool_call_id", "id", "message", "decided_by", "comment")


def _check_shape(value: Any) -> None:
    """Refuse a resume value of the wrong shape with a clear error, before touching anything."""
    if not isinstance(value, Mapping):
        msg = f"resume value must be an object with 'decisions', got {type(value).__name__}"
        raise GraphkitError(msg)
    decisions = value.get("decisions")
    if decisions is not None and not isinstance(decisions, list):
        msg = f"'decisions' must be a list, got {type(decisions).__name__}"
        raise GraphkitError(msg)
    for index, decision in enumerate(decisions or []):
        if not isinstance(decision, Mapping):
            msg = f"decision #{index} must be an object, got {type(decision).__name__}"
            raise GraphkitError(msg)
        for key in _TEXT_FIELDS:
            if decision.get(key) is not None and not isinstance(decision.get(key), str):
                msg = f"decision #{index}: {key!r} must be a string, got {decision.get(key)!r}"
                raise GraphkitError(msg)
        action = decision.get("edited_action")
        if action is not None and not isinstance(action, Mapping):
            msg = f"decision #{index}: 'edited_action' must be an object, got {action!r}"
            raise GraphkitError(msg)
    supersede = value.get("supersede")
    if supersede is not None and not (
            isinstance(supersede, list) and all(isinstance(m, Mapping) for m in supersede)):
        msg = "'supersede' must be a list of serialised messages"
        raise GraphkitError(msg)


def _apply_one(
    call: CallPlan,
    decision: Decision,
    answered: set[str],
    tools: Mapping[str, BaseTool],
    outcome: ResumeOutcome,
) -> None:
    kind = decision.get("type")
    decided_by = decision.get("decided_by")
    comment = decision.get("comment") or decision.get("message")
    tool = tools.get(call["tool_name"])
    name = call["tool_name"]
    if call["tool_call_id"] in answered:
        msg = f"tool call {call['tool_call_id']!r} ({name}) was already decided and answered"
        raise ApprovalAlreadyResolvedError(msg)

    suspension = call["suspension"]
    if suspension is not None:
        if kind == "resume":
            data = validate_resume(tool, decision.get("data"))
            call["resume_values"].append(data)
            call["suspension"] = None
            if not decision.get("audited"):
                outcome.audits.append(("resumed", suspension, {"by": decided_by}))
            return
        if kind == "reject":
            who, why = _who_why(decided_by, comment)
            call["suspension"] = None
            call["answer"] = CANCELLED.format(name=name, who=who, why=why)
            if not decision.get("audited"):
                outcome.audits.append(("cancelled", suspension,
                                       {"by": decided_by, "comment": comment}))
            return
        msg = (
            f"tool call {call['tool_call_id']!r} ({name}) is suspended waiting for input; "
            f"resume it with resume data or reject it, got decision type {kind!r}"
        )
        raise GraphkitError(msg)

    record = call["approval"]
    if record is None:  # pragma: no cover - _find only returns calls with a record
        msg = f"tool call {call['tool_call_id']!r} does not need a decision"
        raise ApprovalNotFoundError(msg)
    if record["status"] != "pending":
        msg = (
            f"approval {record['id']!r} for tool call {record['tool_call_id']!r} ({name}) was "
            f"already {record['status']} by {record['decided_by']!r}"
        )
        raise ApprovalAlreadyResolvedError(msg)
    if kind == "resume":
        msg = f"tool call {call['tool_call_id']!r} ({name}) waits for approval, not resume data"
        raise GraphkitError(msg)

    record["decided_by"] = decided_by
    record["comment"] = comment
    record["decided_at"] = _now()
    if kind in ("approve", "edit"):
        edited = decision.get("args")
        if kind == "edit" and edited is None:
            edited = (decision.get("edited_action") or {}).get("args")
        if edited is not None:
            if tool is None:  # pragma: no cover - planned calls have tools
                raise InvalidApprovedArgsError(f"tool {name!r} is not available")
            validate_args(tool, edited)
            record["approved_args"] = dict(edited)
            call["args"] = dict(edited)
            outcome.edited[call["tool_call_id"]] = dict(edited)
        elif kind == "edit":
            msg = f"an edit decision for {call['tool_call_id']!r} needs edited_action.args or args"
            raise InvalidApprovedArgsError(msg)
        record["status"] = "approved"
        outcome.events.append(telemetry(record, "approved"))
        if not decision.get("audited"):
            outcome.audits.append(("edited" if record["approved_args"] is not None else
                                   "approved", record, {
                                       "by": decided_by, "comment": comment,
                                       "args_before": record["args"],
                                       "args_after": record["approved_args"]}))
    elif kind == "reject":
        record["status"] = "rejected"
        who, why = _who_why(decided_by, comment)
        call["answer"] = REJECTED.format(name=name, who=who, why=why)
        outcome.events.append(telemetry(record, "rejected"))
        if not decision.get("audited"):
            outcome.audits.append(("rejected", record, {"by": decided_by, "comment": comment}))
    else:
        msg = f"unknown decision type {kind!r}; expected one of ['approve', 'edit', 'reject']"
        raise GraphkitError(msg)


def _supersede(call: CallPlan, outcome: ResumeOutcome) -> None:
    name = call["tool_name"]
    record = call["approval"]
    if record is not None and record["status"] in ("pending", "approved"):
        record["status"] = "rejected"
        record["comment"] = "superseded by a new user message"
        record["decided_at"] = _now()
        outcome.events.append(telemetry(record, "rejected"))
        outcome.audits.append(("superseded", record, {"comment": record["comment"]}))
    if call["suspension"] is not None:
        outcome.audits.append(("superseded", call["suspension"], {}))
    call["suspension"] = None
    call["answer"] = SUPERSEDED.format(name=name)


def queued_messages(plan: TurnPlan) -> list[BaseMessage]:
    """The superseding user message(s) held by the plan, as messages."""
    return list(messages_from_dict(plan.get("queued") or []))
