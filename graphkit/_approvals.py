"""Reading a model turn into the approval gate's plan, and what the paused graph shows.

`plan_turn` reads a model turn once (validating arguments, calling predicates and prompt
functions exactly once per call, giving every call and approval a fresh id) and says what the
ledger must record; `interrupt_value` is the interrupt payload (graphkit's records beside
LangChain's HITL request). Deciding is `graphkit._review`'s; applying decisions, the gate's.
"""

from __future__ import annotations

import copy
import functools
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage, messages_from_dict
from langchain_core.tools import BaseTool
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, Secret, SecretBytes, SecretStr, ValidationError
from pydantic_core import to_jsonable_python

from graphkit._ledger import ApprovalRow, AuditRow, CallRow, GrantRow
from graphkit._limits import check_value
from graphkit._settings import GateSettings
from graphkit._state import CallPlan, RunOptions, TurnPlan
from graphkit.errors import GraphkitError, InvalidApprovedArgsError, ResumeDataError
from graphkit.tools import (
    DEFAULT_DECISIONS,
    DelegationTool,
    GraphkitTool,
    allowed_for,
    render_prompt,
)
from graphkit.types import ApprovalKind, ApprovalRecord, Verdict, args_digest

__all__ = [
    "INTERRUPT_MARKER",
    "Planned",
    "answered_ids",
    "interrupt_value",
    "new_id",
    "now_iso",
    "plan_turn",
    "suspension_record",
    "telemetry",
    "validate_args",
    "validate_resume",
    "waiting_records",
]

logger = logging.getLogger("graphkit")

INTERRUPT_MARKER = "graphkit"
"""Key present in every interrupt value graphkit raises (value: the payload version)."""

NOT_A_TOOL = "{name!r} is not a valid tool, try one of {available}."
INVALID_ARGS = "Error: invalid arguments for tool {name!r}: {errors}. The call did not run."
DUPLICATE_ID = (
    "Error: tool call id {id!r} of {name!r} is not unique in this turn; every call needs its "
    "own id. None of the calls with that id ran."
)


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_iso() -> str:
    """Now, as every timestamp graphkit writes: ISO 8601, milliseconds, UTC with Z."""
    return _iso(datetime.now(UTC))


def new_id(prefix: str) -> str:
    """A fresh id for an approval, a suspension or a planned call: never derived from ids a
    model (or a client) controls, so a reused message or tool-call id cannot inherit an old
    decision."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


_SERDE = JsonPlusSerializer()


def storable(value: Any, what: str, error: type[GraphkitError]) -> None:
    """Refuse a value the checkpointer could not store (e.g. an integer beyond 64 bits)
    before it is written anywhere: LangGraph would fail on it mid-run."""
    try:
        _SERDE.dumps_typed(value)
    except (TypeError, ValueError, OverflowError) as exc:
        msg = f"{what} cannot be stored in a checkpoint: {exc}"
        raise error(msg) from exc


def validation_runs_code(tool: BaseTool) -> bool:
    """Whether parsing the tool's arguments (`validate_args`) may run the application's code:
    a validator, serializer, default factory or custom type in its pydantic schema."""
    schema = tool.args_schema
    if not isinstance(schema, type) or not issubclass(schema, BaseModel):
        return False  # a JSON schema, or none: the arguments are taken as they are
    return _schema_runs_code(schema)


@functools.lru_cache(maxsize=1024)
def _schema_runs_code(schema: type[BaseModel]) -> bool:
    return _has_code(getattr(schema, "__pydantic_core_schema__", None))


def _has_code(node: Any) -> bool:
    if isinstance(node, dict):
        if (str(node.get("type", "")).startswith("function-")
                or node.get("default_factory") is not None or node.get("missing") is not None
                or node.get("post_init") or node.get("custom_init")):
            return True
        return any(_has_code(value) for value in node.values())
    if isinstance(node, list | tuple):
        return any(_has_code(value) for value in node)
    return False


_SECRETS = (SecretStr, SecretBytes, Secret)
_MASK = "**********"
"""What pydantic writes for a non-empty secret in a JSON dump."""


def _masked(dumped: Any) -> bool:
    """Whether a JSON dump holds pydantic's mask (a secret, or a value that looks like one:
    revealing then finds nothing to change)."""
    if isinstance(dumped, str):
        return dumped == _MASK
    if isinstance(dumped, dict):
        return any(_masked(v) for v in dumped.values())
    if isinstance(dumped, list):
        return any(_masked(v) for v in dumped)
    return False


def _plain(python: Any) -> Any:
    """A Python-mode value with every secret replaced by what it holds."""
    if isinstance(python, _SECRETS):
        return _plain(python.get_secret_value())
    if isinstance(python, Mapping):
        return {k: _plain(v) for k, v in python.items()}
    if isinstance(python, list | tuple | set | frozenset):
        return [_plain(v) for v in python]
    return python


def _revealed(python: Any, dumped: Any) -> Any:
    """`dumped` (a JSON dump, where pydantic masks secrets as '**********') with each secret
    of `python` (the same model dumped in Python mode) given as its value: the tool must run
    with the value the model sent, and reviewers judge that value (the model's own message
    holds it in the clear anyway). Where the two dumps do not line up, `dumped` stays as it
    is (and a masked value is then refused as unstable, never run)."""
    if isinstance(python, _SECRETS):
        return to_jsonable_python(_plain(python), by_alias=True)
    if isinstance(python, Mapping) and isinstance(dumped, dict):
        pairs = list(zip(python.items(), dumped.items(), strict=False))
        if len(python) == len(dumped) and all(jk in (pk, str(pk)) for (pk, _), (jk, _) in pairs):
            return {jk: _revealed(pv, jv) for (_, pv), (jk, jv) in pairs}
        return {k: _revealed(python[k], v) if k in python else v for k, v in dumped.items()}
    if isinstance(python, set | frozenset) and isinstance(dumped, list):
        # unordered: each member as it is, in the set's own order (the tool gets a set again)
        return to_jsonable_python(_plain(python), by_alias=True)
    if (isinstance(python, list | tuple) and isinstance(dumped, list)
            and len(python) == len(dumped)):
        return [_revealed(p, d) for p, d in zip(python, dumped, strict=True)]
    return dumped


def validate_args(tool: BaseTool, args: Mapping[str, Any]) -> dict[str, Any]:
    """Parse `args` with the tool's schema; raises `InvalidApprovedArgsError` when they fail.

    The result is exactly what runs, is shown and is digested: the validated fields only
    (extra keys a permissive schema lets through are dropped), as JSON.
    """
    if not isinstance(args, Mapping):
        msg = f"arguments for tool {tool.name!r} must be an object, got {type(args).__name__}"
        raise InvalidApprovedArgsError(msg)
    check_value(args, what=f"arguments for tool {tool.name!r}", error=InvalidApprovedArgsError)
    schema = tool.args_schema
    if not isinstance(schema, type) or not issubclass(schema, BaseModel):
        storable(dict(args), f"arguments for tool {tool.name!r}", InvalidApprovedArgsError)
        return dict(args)
    parsed, result = _parsed(tool, schema, args)
    storable(result, f"arguments for tool {tool.name!r}", InvalidApprovedArgsError)
    if validation_runs_code(tool):
        # The tool parses what it is given once more: it must get the values shown, decided
        # and digested (not a validator's second conversion, say dollars to cents again).
        again, shown_again = _parsed(tool, schema, result)
        if again != parsed:
            msg = (f"tool {tool.name!r} changes its arguments each time they are validated "
                   f"({result!r} becomes {shown_again!r}): the values approved would not be "
                   "the values it runs with; make its validators idempotent")
            raise InvalidApprovedArgsError(msg)
    return result


def _parsed(tool: BaseTool, schema: type[BaseModel], args: Mapping[str, Any]
            ) -> tuple[BaseModel, dict[str, Any]]:
    """The validated model, and its fields as JSON."""
    try:
        parsed = schema.model_validate(dict(args))
    except ValidationError as exc:
        msg = (
            f"arguments {dict(args)!r} are not valid for tool {tool.name!r}: "
            f"{exc.errors(include_url=False, include_context=False)}"
        )
        raise InvalidApprovedArgsError(msg) from exc
    # By alias: the names the model (and the tool's own validation) use, not Python's
    # (`from_` is `from`).
    dumped: dict[str, Any] = parsed.model_dump(mode="json", by_alias=True)
    if _masked(dumped):
        try:
            dumped = _revealed(parsed.model_dump(by_alias=True), dumped)
        except ValueError as exc:  # UnicodeDecodeError too: secret bytes that are not text
            msg = f"arguments for tool {tool.name!r} cannot be stored as JSON: {exc}"
            raise InvalidApprovedArgsError(msg) from exc
    # Keep only what was given or has a default, without the injected context.
    names = {field.alias or name for name, field in schema.model_fields.items()}
    return parsed, {k: v for k, v in dumped.items() if k in names}


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


def _needs(tool: BaseTool, args: dict[str, Any], required: bool) -> tuple[bool, Verdict]:
    """Whether the call needs a human, and why. Calls a predicate exactly once."""
    # Request-level approval is about actions: a delegation is not one, the subagent's own
    # tool calls are, and they inherit the request's options.
    requested = required and not isinstance(tool, DelegationTool)
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
) -> Planned:
    """Read one model turn: which calls run, which wait for a human, which are malformed.

    `grants` are tools a reviewer approved for the rest of the thread (`remember="thread"`):
    a call that would ask runs instead, as an approval by the grantor, if the agent's
    approvers policy lets the grantor approve this very call (a predicate is consulted first).
    """
    from graphkit._review import Choice, audit_row, check

    required = settings.require_tool_approval or bool(options.get("require_tool_approval"))
    moment = datetime.now(UTC)
    created = _iso(moment)
    planned = Planned(TurnPlan(ai_message_id=ai.id or "", calls=[], error=None), [])
    ids = [call.get("id") or "" for call in ai.tool_calls]
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
        try:
            args = validate_args(tool, call.get("args") or {})
        except InvalidApprovedArgsError as exc:
            planned.errors.append(_error(INVALID_ARGS.format(name=name, errors=exc), call_id,
                                         name))
            continue
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
                metadata={"prompt": _prompt(tool, args), "defaults": copy.deepcopy(defaults)},
                verdict=verdict, agent_path=agent_path,
                expires_at=_iso(moment + timedelta(seconds=ttl)) if ttl is not None else None,
            )
            approval["call_key"] = key
            allowed = allowed_for(tool, settings.allowed_decisions)  # type: ignore[arg-type]
            approval["allowed_decisions"] = list(allowed)
            metadata["approval.verdict"] = verdict
            row = ApprovalRow(approval_id=approval["id"], thread_id=thread_id, kind="approval",
                              call_key=key, agent_path=agent_path, tool_name=name,
                              args_digest=approval["args_digest"], ttl=ttl, run_id=run_id,
                              allowed=allowed)
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
                                     approval_id=approval["id"] if approval else None))
        planned.plan["calls"].append(
            CallPlan(
                tool_call_id=call_id,
                tool_name=name,
                key=key,
                args=args,
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
    return planned


def _fields(row: ApprovalRow) -> dict[str, Any]:
    return {name: getattr(row, name) for name in row.__dataclass_fields__}


def suspension_record(
    call: CallPlan, payload: dict[str, Any], *, agent_path: Sequence[str],
) -> ApprovalRecord:
    """The pending entry of a tool that suspended itself."""
    record = _pending_record(
        id=new_id("sus"), created_at=now_iso(), kind="suspension", tool_name=call["tool_name"],
        tool_call_id=call["tool_call_id"], args=call["args"],
        metadata={"suspend_payload": payload, "prompt": payload.get("message"), "defaults": None},
        verdict="required", agent_path=agent_path, expires_at=None,
    )
    record["call_key"] = call["key"]
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
            {"action_name": r["tool_name"],
             "allowed_decisions": list(r.get("allowed_decisions") or DEFAULT_DECISIONS)}
            for r in undecided
        ],
        "error": plan.get("error"),
    }


def validate_resume(tool: BaseTool | None, data: Any) -> Any:
    schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    check_value(data, what="resume data", error=ResumeDataError)
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


Extractor = Callable[[CallPlan, list[BaseMessage]], Any]
"""Reads resume data for a suspended call from the user's new message(s); None if it cannot."""


def queued_messages(plan: TurnPlan) -> list[BaseMessage]:
    """The superseding user message(s) held by the plan, as messages."""
    return parsed_messages(plan.get("queued") or [], what="the queued messages")


def parsed_messages(data: Sequence[Any], *, what: str) -> list[BaseMessage]:
    """Serialised messages (`messages_to_dict`) as messages; a typed error for anything else
    (they may come from a client)."""
    try:
        return list(messages_from_dict(list(data)))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        msg = f"{what} must be serialised messages (messages_to_dict): {exc!r}"
        raise GraphkitError(msg) from exc
