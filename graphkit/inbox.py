"""The operator inbox: every waiting approval and suspension across threads and agents, decided
without the agent's process.

The inbox reads what paused runs wait on from the ledger (no checkpoint is read to list; the
gate marks it there as it pauses), and takes decisions through `graphkit._review` into the
ledger, where exactly one decision per approval wins. The next `agent.resume(run_id=...)` (or
a worker polling `ready()`) lets the gate apply them, after it has checked them again against
the agent's own policy and tools: a decision the agent refuses is withdrawn and the call
waits again, never stranded.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import jsonschema
from langchain_core.messages import AIMessage, ToolMessage

from graphkit._control import policy_finder, shared_names
from graphkit._ids import given_id
from graphkit._ledger import WaitingRow
from graphkit._notify import Dispatcher, Webhook, start_notifications
from graphkit._review import (
    Choice,
    Remember,
    audit_row,
    expire,
    grant_record,
    judge,
    named,
    refuse,
    refuse_unknown,
    resolved_message,
    shown,
)
from graphkit._secrets import masked, masked_record, record_paths
from graphkit._settings import DEFAULT_GRANT_TTL, Approvers
from graphkit._storage import Storage, open_storage
from graphkit._validate import injected_keys, now_iso, secret_paths_of
from graphkit.errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApproverNotAllowedError,
    DecisionNotAllowedError,
    GraphkitError,
    InvalidApprovedArgsError,
)
from graphkit.types import ApprovalRecord, AuditTrail, PendingApproval, PendingList

if TYPE_CHECKING:
    from graphkit.agent import Agent

__all__ = ["Inbox"]


def _pending(entry: dict[str, Any]) -> PendingApproval:
    return PendingApproval.from_record(entry)



def _allows(policy: Approvers, viewer: str, item: PendingApproval) -> bool:
    try:
        return bool(policy(viewer, item))
    except Exception:  # a policy that raises shows nothing
        return False


def _entry_of(found: WaitingRow) -> dict[str, Any]:
    """An approval as the inbox shows it: the record the gate planned (secrets masked), where
    it waits, and the ledger's word on its status (`shown` adds the decision)."""
    row = found.row
    return {**masked_record({**found.record, "status": "pending"}),
            "thread_id": row.thread_id, "run_id": found.run_id,
            "agent": row.agent_path[0] if row.agent_path else None,
            "state": "waiting" if found.waiting else "closed", "position": found.place,
            "decided": row.decided}


FORMATS = jsonschema.FormatChecker()
"""The JSON schema formats an edit is checked against (dates, uuids, ...), `date-time` too:
jsonschema checks that one only with an extra package."""


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if isinstance(value, str):
        datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    return True


def as_schema_types(value: Any, schema: Any, root: Any = None) -> Any:
    """`value` as the tool's model reads it where JSON alone cannot say: an integer given for
    a `number` is a float (pydantic reads 1150 for a float field as 1150.0; the digest of what
    runs must be the digest of what was approved), and a whole float given for an `integer`
    is an int (JSON Schema takes 3.0 as an integer, and the tool ran with 3 what was recorded
    as approved with 3.0; 1e20 was approved, then withdrawn at the gate: helper-104 F3), at
    any depth the schema names: nested models (`$ref`), optional fields (`anyOf` with null),
    mappings (`additionalProperties`) and lists (helper-107)."""
    root = schema if root is None else root
    schema = _resolved(schema, root)
    if not isinstance(schema, Mapping):
        return value
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            branches = [b for b in (_resolved(b, root) for b in schema[key])
                        if isinstance(b, Mapping) and b.get("type") != "null"]
            return as_schema_types(value, branches[0], root) if len(branches) == 1 else value
    kinds = schema.get("type")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "number" in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (kinds & {"integer", "number"}) == {"integer"} and isinstance(value, float) and (
            value.is_integer()):
        return int(value)
    if isinstance(value, dict):
        props: Mapping[str, Any] = (schema["properties"] if isinstance(
            schema.get("properties"), Mapping) else {})
        extra = schema.get("additionalProperties")
        return {k: as_schema_types(v, props.get(k, extra), root)
                for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [as_schema_types(v, schema["items"], root) for v in value]
    return value


def _resolved(schema: Any, root: Any) -> Any:
    """A local `$ref` (`#/$defs/Name`, as pydantic writes nested models) followed."""
    seen = 0
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and seen < 32:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        schema, seen = target, seen + 1
    return schema


HIDDEN = "[the result of a call this reviewer may not see]"


def _words_only(message: AIMessage, hidden: set[str]) -> AIMessage:
    """A model turn as a reviewer sees it beside a card: its words (the text of its text
    blocks) and its calls as judged for them (`tool_calls`), none of a provider's copies of
    calls (content blocks of other shapes, raw calls, response metadata, streamed chunks),
    which may carry a call hidden from them, of this turn or another (helper-50, -51, -52);
    nor a call it could not parse that is hidden."""
    content = message.content
    if isinstance(content, list):
        content = [b if isinstance(b, str) else {"type": "text", "text": str(b.get("text"))}
                   for b in content if isinstance(b, str) or (
                       isinstance(b, Mapping) and b.get("type") == "text")]
    update: dict[str, Any] = {
        "content": content, "response_metadata": {},
        "additional_kwargs": {k: v for k, v in message.additional_kwargs.items()
                              if isinstance(v, str | int | float | bool) and k not in (
                                  "tool_calls", "function_call")},
        "invalid_tool_calls": [c for c in message.invalid_tool_calls
                               if c.get("id") not in hidden]}
    if isinstance(getattr(message, "tool_call_chunks", None), list):
        update["tool_call_chunks"] = []
    return message.model_copy(update=update)


class Inbox:
    """Pending approvals of every agent that shares this storage.

    Args:
        url: The storage URL the agents use (`sqlite:///...` or `postgresql://...`).
        approvers: A policy `(decided_by, pending) -> bool` consulted before every decision.
        viewers: A policy `(identity, pending) -> bool`: what a reader named with `viewer=`
            may see (listings, cards, arguments, messages, audit, grants). Default: the
            approvers policy (the inbox's, else its agent's): what they may decide.
        notify: `Webhook`s told of every approval requested, decided and expired in this
            storage; delivered from this process (`inbox.dispatcher`).
    """

    def __init__(self, url: str | Storage, *, approvers: Approvers | None = None,
                 viewers: Approvers | None = None, agents: Sequence[Agent] = (),
                 notify: Sequence[Webhook] = ()) -> None:
        self._storage = url if isinstance(url, Storage) else open_storage(url)
        self.approvers = approvers
        self.viewers = viewers
        self.readers: Callable[[str, PendingApproval], bool] | None = None
        """Where the runs live somewhere with its own access rules (a LangGraph server's
        threads, `graphkit.web.server_app`): whether a reviewer may read an item's thread
        there. No door shows or decides an item whose thread its reviewer may not read."""
        self.notify = tuple(notify)
        self.dispatcher: Dispatcher | None = (
            start_notifications(self._storage.ledger, self.notify, database=self._storage.url)
            if self.notify else None)
        shared = shared_names(agents)
        if shared:  # an approval names its agent by name
            msg = f"agents {shared} share a name"
            raise ValueError(msg)
        self.agents = {agent.name: agent for agent in agents}
        """Agents whose tools and policies this inbox may use: an edit is then validated by
        the tool's own model, and the agent's policy refuses a reviewer here and now (the gate
        checks again either way)."""

    def _agent_for(self, record: ApprovalRecord) -> Agent | None:
        return self._agent_at(record.get("agent_path") or [])

    def _agent_at(self, path: Sequence[str]) -> Agent | None:
        return self.agents.get(path[0]) if path else None

    # ------------------------------------------------------------------ who sees what

    def may_view(self, viewer: str | None, item: PendingApproval) -> bool:
        """Whether `viewer` may see this approval (its card, arguments, messages, audit): the
        viewers policy, else the approvers policy (the inbox's, else its agent's, when the
        inbox is given the agent). An agent with an approvers policy this inbox cannot run
        (it is not given the agent) shows its approvals to no named reviewer: who may see
        them is that policy's to say. Where no policy exists at all, every named reviewer
        sees everything; a policy that raises shows nothing."""
        if viewer is not None and self.readers is not None and not self.readers(viewer, item):
            return False
        policy = self.viewers if self.viewers is not None else self.approvers
        agent = None
        if policy is None:
            agent = self._agent_at(item.agent_path)
            policy = policy_finder(agent)(item.agent_path) if agent else None
        if policy is None:
            return viewer is not None and not self._policy_out_of_reach(
                agent, item.agent_path, item.tool_name, item.id)
        if viewer is None:
            return False
        if self.viewers is not None:
            return _allows(policy, viewer, item)
        # the approvers policy: what the reviewer may decide, as it is asked of a decision,
        # with its type (a policy that reads `metadata["decision"]`, as the docs show, hid
        # what it let the reviewer approve: helper-109)
        kinds = ["resume", "reject"] if item.kind == "suspension" else item.allowed_decisions
        return any(_allows(policy, viewer, dataclasses.replace(
            item, metadata={**item.metadata, "decision": kind})) for kind in kinds)

    def _policy_out_of_reach(self, agent: Agent | None, agent_path: Sequence[str],
                             tool_name: str, approval_id: str | None) -> bool:
        """Whether the agent decides with an approvers policy this inbox cannot run: it is
        not given the agent, and the approval's record says its agent had one when it asked
        (else, for a record from before it said so, the tool's schema row: the last
        definition of the agent to plan the tool, whose word another definition without the
        policy overwrote, and the approvals it hid were shown and decided: helper-109)."""
        if agent is not None:
            return False
        record = self._storage.ledger.record(approval_id) if approval_id else None
        recorded = record.get("policy") if record is not None else None
        if isinstance(recorded, bool):
            return recorded
        schema = self._storage.ledger.tool_schema(agent_path, tool_name) or {}
        return bool(schema.get("policy"))

    def _visible(self, id: str, viewer: str | None) -> PendingApproval:
        """The approval, if `viewer` (None: this process itself, which holds the database
        anyway) may see it; else not found, and the attempt is audited. A viewer is told the
        same of an approval hidden from them as of one that does not exist (and never where
        the database is)."""
        if viewer is None:
            return self._get(id)
        try:
            item: PendingApproval | None = self._get(id)
        except ApprovalNotFoundError:
            item = None
        if item is not None and self.may_view(viewer, item):
            return item
        if item is not None:  # (once per reviewer and card: a reload filled the audit
            self._storage.ledger.audit([audit_row(  # without end, helper-144)
                "refused", item.to_dict(), thread_id=item.thread_id or "", run_id=item.run_id,
                decided_by=viewer, detail="viewers policy: not shown to this reviewer",
                dedupe=f"{item.id}:unseen:{viewer}")])
        msg = f"no approval with id {id!r} that {viewer!r} may see"
        raise ApprovalNotFoundError(msg)

    def schema(self, id: str) -> dict[str, Any]:
        """The JSON schemas of an approval's tool: `schema` (arguments) and `resume_schema`."""
        entry = self._entry(id)
        return self._storage.ledger.tool_schema(entry.get("agent_path") or [],
                                                entry["tool_name"]) or {}

    def messages(self, id: str, *, viewer: str | None = None) -> list[Any]:
        """The run's messages, when the inbox knows the agent that owns the approval, as the
        viewer may see them (`seen_messages`)."""
        item = self._visible(id, viewer)  # an approval the inbox lists, the viewer may see
        row = self._storage.ledger.approval(id)  # where it waits, as the ledger recorded it
        agent = self._agent_at(row.agent_path) if row is not None else None
        if agent is None or row is None:
            return []
        try:
            state = agent.graph.get_state({"configurable": {"thread_id": row.thread_id}})
        except ValueError:  # a graph the LangGraph server persists: its state is the server's
            return []
        return self.seen_messages(list(state.values.get("messages") or []), item, viewer)

    def seen_messages(self, messages: Sequence[Any], item: PendingApproval,
                      viewer: str | None) -> list[Any]:
        """A thread's messages shown beside `item`'s card: every call's secret arguments
        masked, and the calls (with their results) of tools the viewer may not see hidden."""
        hidden: set[str] = set()
        seen: list[Any] = []
        for message in messages:
            if isinstance(message, AIMessage):
                calls = message.tool_calls
                shown = [self._seen_call(c, item, viewer) for c in calls]
                gone = {c.get("id") or "" for c, s in zip(calls, shown, strict=True)
                        if s is None} | {
                    str(c.get("id") or "") for c in message.invalid_tool_calls
                    if self._seen_call({**c, "args": {}}, item, viewer) is None}
                hidden |= gone
                seen.append(_words_only(message.model_copy(update={"tool_calls": [
                    s or {**c, "name": "hidden", "args": {}}
                    for c, s in zip(calls, shown, strict=True)]}), gone - {""}))
            elif isinstance(message, ToolMessage) and message.tool_call_id in hidden:
                seen.append(message.model_copy(update={"content": HIDDEN, "name": "hidden",
                                                       "artifact": None}))
            else:
                seen.append(message)
        return seen

    def _seen_call(self, tool_call: Mapping[str, Any], item: PendingApproval,
                   viewer: str | None) -> dict[str, Any] | None:
        """One tool call as the viewer may see it (None: hidden). The conversation shown is
        the thread's, its agent's at the top of the delegation chain: its calls are that
        agent's, judged as its own, whatever agent the card's call is of (a subagent's card
        showed the supervisor's calls judged as the subagent's, to a reviewer who may see
        only the subagent's: helper-77)."""
        raw = tool_call.get("args")
        args: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else {}
        own = masked(args, record_paths(item.to_dict()))
        path = list(item.agent_path[:1])
        if (item.agent_path == path and tool_call.get("id") == item.tool_call_id
                and tool_call.get("name") == item.tool_name
                and own == item.args):  # (a model may use the id again in another turn)
            return {**tool_call, "args": own}
        agent = self._agent_at(path)
        tool = agent._find_tool(path, str(tool_call.get("name"))) if agent else None
        if tool is not None and (injected := injected_keys(tool)):
            # what the model wrote for an argument LangChain injects is no argument: the card
            # and the interrupt leave it out, and so does the conversation (helper-117 L1)
            args = {k: v for k, v in args.items() if k not in injected}
        paths = secret_paths_of(tool, args)
        if paths is None:
            paths = [[key] for key in args]  # not readable as the tool's: show none of it
        shown = masked(args, paths)
        if viewer is not None:
            other = PendingApproval(
                id="", created_at="", kind="approval", tool_name=str(tool_call.get("name")),
                tool_call_id=str(tool_call.get("id") or ""), args=shown, metadata={},
                verdict="required", agent_path=path, thread_id=item.thread_id,
                run_id=item.run_id)
            if not self.may_view(viewer, other):
                return None
        return {**tool_call, "args": shown}

    def _thread_of(self, id: str) -> str | None:
        """The approval's thread as the ledger recorded it (the index entry is a copy)."""
        row = self._storage.ledger.approval(id)
        return row.thread_id if row is not None else None

    # ------------------------------------------------------------------ reading

    def _waiting_entries(self, **filters: Any) -> list[dict[str, Any]]:
        """What paused runs wait on (decided or not, as the ledger marks it; a row no run
        waits on any more is left out)."""
        entries = [_entry_of(w) for w in self._storage.ledger.waiting_rows()]
        return [e for e in entries if all(e.get(k) == v for k, v in filters.items())]

    def pending(
        self, agent: str | None = None, tool_name: str | None = None, limit: int | None = None,
        *, viewer: str | None = None,
    ) -> list[PendingApproval]:
        """Undecided approvals and suspensions, oldest first (with `viewer`, those only that
        the viewers policy shows them)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            msg = f"limit must be a whole number of at least 0, or None, got {limit!r}"
            raise GraphkitError(msg)
        filters: dict[str, Any] = {}
        if agent is not None:
            filters["agent"] = agent
        if tool_name is not None:
            filters["tool_name"] = tool_name
        entries = self._waiting_entries(**filters)
        # what waited past its time is declined now, as any door that touches it does: it
        # was listed as waiting, to a reviewer whose decision could only be refused
        gone = self._expire_due(entries)
        undecided = sorted((e for e in entries if not e["decided"] and e["id"] not in gone),
                           key=lambda e: (e["created_at"], e.get("position", 0), e["id"]))
        items = (_pending(e) for e in undecided)
        if viewer is not None:
            items = (i for i in items if self.may_view(viewer, i))
        return PendingList(list(items)[:limit])

    def _entry(self, approval_id: str) -> dict[str, Any]:
        found = self._storage.ledger.waiting_row(
            given_id(approval_id, "approval id", ApprovalNotFoundError))
        if found is None:
            msg = f"no approval with id {approval_id!r} in {self._storage.description}"
            raise ApprovalNotFoundError(msg)
        return _entry_of(found)

    def get(self, id: str, *, viewer: str | None = None) -> PendingApproval:
        """One approval or suspension by id, with its decision if it has one (with `viewer`,
        only if the viewers policy shows it to them)."""
        return self._visible(id, viewer)

    def _get(self, id: str) -> PendingApproval:
        entry = self._entry(id)
        record: ApprovalRecord = entry  # type: ignore[assignment]
        return _pending({**entry, **shown(record, self._storage.ledger.approval(id))})

    def ready(self) -> list[str]:
        """Runs whose waiting calls are all decided; `agent.resume(run_id=...)` continues each."""
        runs: dict[str, list[bool]] = defaultdict(list)
        for entry in self._waiting_entries():
            if entry.get("run_id"):
                runs[entry["run_id"]].append(entry["decided"])
        return sorted(run for run, flags in runs.items() if all(flags))

    def audit(self, *, thread_id: str | None = None, id: str | None = None,
              viewer: str | None = None) -> list[dict[str, Any]]:
        """The audit log, oldest first: for a thread, for one approval, or all of it (with
        `viewer`, the entries of approvals the viewers policy shows them only)."""
        # (a filter given names one thing: helper-107 read a list as the storage's error)
        id = None if id is None else given_id(id, "approval id", ApprovalNotFoundError)
        thread_id = None if thread_id is None else given_id(thread_id, "thread id",
                                                            GraphkitError)
        if id is not None and viewer is not None:
            self._visible(id, viewer)
        entries = self._storage.ledger.read_audit(thread_id=thread_id, approval_id=id)
        if viewer is not None:
            shown: dict[str, bool] = {}
            for entry in entries:
                key = str(entry.get("approval_id") or "")
                if key and key not in shown:
                    try:
                        shown[key] = self.may_view(viewer, self._get(key))
                    except GraphkitError:
                        shown[key] = False
            entries = [e for e in entries if shown.get(str(e.get("approval_id") or ""), False)]
        return AuditTrail(entries)

    def grants(self, thread_id: str | None = None, *, viewer: str | None = None
               ) -> list[dict[str, Any]]:
        """Remembered grants (`remember="thread"`), oldest first, revoked ones included (with
        `viewer`, those made on approvals the viewers policy shows them only)."""
        grants = self._storage.ledger.grants(thread_id)
        if viewer is not None:
            grants = [g for g in grants if g.approval_id and self._shows(viewer, g.approval_id)]
        return [g.to_dict() for g in grants]

    def _shows(self, viewer: str, approval_id: str) -> bool:
        try:
            return self.may_view(viewer, self._get(approval_id))
        except GraphkitError:
            return False

    def revoke(self, grant_id: str, *, decided_by: str, viewer: str | None = None
               ) -> dict[str, Any]:
        """Revoke a grant: later calls of its tool in its thread ask again. With `viewer` (a
        web reviewer), a grant they may not see is not found, and nothing of it is told."""
        ledger = self._storage.ledger
        grant = ledger.grant(given_id(grant_id, "grant id", ApprovalNotFoundError))
        if grant is not None and viewer is not None and not (
                grant.approval_id and self._shows(viewer, grant.approval_id)):
            refuse(ledger, grant_record(ledger, grant),
                   ApprovalNotFoundError("viewers policy: the grant is not shown to them"),
                   decided_by=viewer, thread_id=grant.thread_id, run_id=None)
            grant = None
        if grant is None:
            where = f" in {self._storage.description}" if viewer is None else ""
            msg = f"no grant with id {grant_id!r}{where}"
            raise ApprovalNotFoundError(msg)
        if grant.revoked is not None:
            msg = f"grant {grant_id!r} was already revoked by {grant.revoked.get('by')!r}"
            raise ApprovalAlreadyResolvedError(msg)
        record = grant_record(ledger, grant)
        by = named(decided_by)
        if by != grant.grantor and not self._may_decide(by, grant):
            exc = ApproverNotAllowedError(
                f"{decided_by!r} may not revoke grant {grant_id!r} ({grant.tool_name} in "
                f"{'/'.join(grant.agent_path)}): only its grantor {grant.grantor!r} or a "
                "reviewer the approvers policy lets decide that tool may")
            refuse(ledger, record, exc, decided_by=by, thread_id=grant.thread_id,
                   run_id=None)
            raise exc
        revoked = {"by": by, "at": now_iso()}
        if not ledger.revoke(grant_id, revoked, [audit_row(
                "revoked", record, thread_id=grant.thread_id, run_id=None,
                decided_by=by, detail=f"grant {grant_id} revoked")]):
            msg = f"grant {grant_id!r} was already revoked"
            raise ApprovalAlreadyResolvedError(msg)
        found = ledger.grant(grant_id)
        return found.to_dict() if found else {}

    def _may_decide(self, decided_by: str | None, grant: Any) -> bool:
        """Whether the approvers policy (the inbox's, else the agent's) lets `decided_by`
        decide the tool the grant covers, judged on the approval that made it; without a
        policy anyone may decide, so anyone may revoke; with one, nobody unnamed may."""
        agent = self._agent_at(grant.agent_path)
        approvers = self.approvers if self.approvers is not None else (
            policy_finder(agent)(grant.agent_path) if agent else None)
        if approvers is None:
            # no policy here; the agent may have one this inbox cannot run (it records so)
            return not self._policy_out_of_reach(agent, grant.agent_path, grant.tool_name,
                                                 grant.approval_id)
        try:
            pending = self.get(grant.approval_id) if grant.approval_id else None
        except GraphkitError:
            pending = None
        if pending is None or decided_by is None:
            return False
        try:
            return bool(approvers(decided_by, pending))
        except Exception:  # a policy that cannot decide has allowed nothing
            return False

    # ------------------------------------------------------------------ deciding

    def approve(
        self,
        id: str,
        *,
        decided_by: str,
        comment: str | None = None,
        args: dict[str, Any] | None = None,
        args_digest: str | None = None,
        remember: Remember = "once",
    ) -> PendingApproval:
        """Approve (with edited `args` if given); the run continues on its next resume.
        `remember="thread"` also approves later calls of this tool in the thread that this
        reviewer may approve."""
        return self._decide(id, approve=True, decided_by=decided_by, comment=comment, args=args,
                            args_digest=args_digest, remember=remember)

    def decline(self, id: str, *, decided_by: str, comment: str | None = None
                ) -> PendingApproval:
        """Decline: the call never runs; the model is told when the run resumes."""
        return self._decide(id, approve=False, decided_by=decided_by, comment=comment)

    def respond(self, id: str, *, decided_by: str, message: str) -> PendingApproval:
        """Answer the call instead of running it (a tool that allows "respond"): the model
        reads `message` as its result when the run resumes."""
        return self._decide(id, choice=Choice(type="respond", message=message),
                            decided_by=decided_by, comment=None)

    def resume(self, id: str, data: Any, *, decided_by: str) -> PendingApproval:
        """Give a suspended tool its resume data; the run continues on its next resume."""
        return self._decide(id, choice=Choice(type="resume", data=data), decided_by=decided_by,
                            comment=None)

    def _decide(self, approval_id: str, *, choice: Choice | None = None,
                approve: bool = False, decided_by: str, comment: str | None,
                args: dict[str, Any] | None = None, args_digest: str | None = None,
                remember: Remember = "once") -> PendingApproval:
        entry = self._entry(approval_id)
        record: ApprovalRecord = entry  # type: ignore[assignment]
        thread_id, run_id = str(entry["thread_id"]), entry.get("run_id")
        ledger = self._storage.ledger
        if entry["decided"] or entry.get("state") != "waiting":
            row = ledger.approval(approval_id)
            exc = ApprovalAlreadyResolvedError(
                resolved_message(entry, {**(row.decision or {}), "status": row.status})
                if row is not None and row.decided else
                f"approval {approval_id!r} ({entry['tool_name']}) no longer waits: no run "
                "waits on it (its turn was replaced or has moved on)")
            refuse(ledger, entry, exc, decided_by=decided_by, thread_id=thread_id,
                   run_id=run_id)
            raise exc
        if approve and args is not None and not isinstance(args, dict):
            msg = f"edited args must be a JSON object, got {type(args).__name__}"
            raise InvalidApprovedArgsError(msg)
        if choice is None:
            choice = (Choice(type="reject") if not approve else Choice(type="approve")
                      if args is None else Choice(type="edit", args=args))
        if entry.get("expires_at") and ledger.overdue([approval_id]):
            expire(ledger, record, thread_id=thread_id, run_id=run_id, enqueue=True)
        # (of a run a state write ended, too: a resume takes it back to its gate, which
        # applies this; an inbox given the agent declined it, where every other door
        # recorded it: helper-90)
        agent = self._agent_for(record)
        tool = agent._find_tool(record["agent_path"], record["tool_name"]) if agent else None
        approvers = self.approvers if self.approvers is not None else (
            policy_finder(agent)(record["agent_path"]) if agent else None)
        refused = self._not_here(agent, record, approval_id, approvers, remember)
        if refused is not None:
            refuse(ledger, entry, refused, decided_by=decided_by, thread_id=thread_id,
                   run_id=run_id)
            raise refused
        judge(ledger, record, choice, decided_by=decided_by, comment=comment,
              approvers=approvers, tool=tool, thread_id=thread_id, run_id=run_id,
              reviewed_digest=args_digest, remember=remember,
              grant_ttl=(agent._grant_ttl(record["agent_path"]) if agent
                         else self._recorded_grant_ttl(approval_id)),
              check_args=None if tool else lambda edited: self._check_args(entry, edited),
              source="inbox")()
        return _pending({**entry, **shown(record, ledger.approval(approval_id))})

    def _recorded_grant_ttl(self, approval_id: str) -> timedelta | None:
        """The agent's `grant_ttl` as the approval's record says it: an inbox without the
        agent wrote the default's 8 hours, and listed that end for a grant its agent's gate
        ended in seconds (helper-117). The default for a record from before it said so."""
        record = self._storage.ledger.record(approval_id)
        if record is None or "grant_ttl" not in record:
            return DEFAULT_GRANT_TTL
        seconds = record.get("grant_ttl")
        return timedelta(seconds=seconds) if isinstance(seconds, int | float) else None

    def _not_here(self, agent: Agent | None, record: ApprovalRecord, approval_id: str,
                  approvers: Approvers | None, remember: Remember) -> GraphkitError | None:
        """Why this inbox may not take the decision (None: it may)."""
        path, name = "/".join(record["agent_path"]), record["tool_name"]
        if approvers is None and self._policy_out_of_reach(agent, record["agent_path"], name,
                                                           approval_id):
            # the gate would refuse what its policy refuses, and the reviewer would believe
            # in a decision that never takes effect: refuse it here and now instead
            return ApproverNotAllowedError(
                f"agent {path!r} decides who may approve {name!r} with an approvers policy "
                "this inbox cannot run; decide it where the agent is loaded (Inbox(url, "
                "agents=[agent]), `graphkit approve ... --agent module:attr`), or give this "
                "inbox the policy")
        if remember == "thread" and self.approvers is not None and (
                agent is None or self.approvers is not policy_finder(agent)(
                    record["agent_path"])):
            # A grant approves later calls at the agent's gate, under the agent's policy: this
            # inbox's own is not there to ask, and a grant bob could make here approved a
            # payment it refuses him (helper-113). This call alone may be approved.
            return DecisionNotAllowedError(
                f"this inbox decides with an approvers policy of its own, which the gate of "
                f"agent {path!r} cannot ask when a later call of {name!r} comes: a grant "
                "(remember='thread') is made where the agent's own policy judges it (the "
                "agent's API, or an inbox given the agent and no policy of its own); approve "
                "this call alone (remember='once')")
        return None

    def _check_args(self, entry: dict[str, Any], args: Any) -> dict[str, Any]:
        if not isinstance(args, dict):
            msg = f"edited args must be a JSON object, got {type(args).__name__}"
            raise InvalidApprovedArgsError(msg)
        item = self._storage.ledger.tool_schema(entry.get("agent_path") or [],
                                                entry["tool_name"])
        if item is not None and item.get("validates_in_code"):
            # its own validators could change what runs: the gate would refuse what this
            # inbox recorded, and the reviewer would believe in an approval that never runs
            msg = (f"tool {entry['tool_name']!r} checks its arguments with code of its own, "
                   "which this inbox cannot run; edit it where the agent is loaded "
                   "(`graphkit approve ID --args ... --agent module:attr`, Inbox(url, "
                   "agents=[agent]), `graphkit serve --agent module:attr`), or approve or "
                   "decline it as it is")
            raise InvalidApprovedArgsError(msg)
        schema = item.get("schema") if item is not None else None
        if not schema:
            return dict(args)
        refuse_unknown(entry["tool_name"], schema, args)
        try:
            jsonschema.validate(args, schema, format_checker=FORMATS)
        except jsonschema.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path) or "(the arguments)"
            # never the values (they may hold secrets), only names: a missing or extra field
            why = (exc.message if exc.validator in ("required", "additionalProperties")
                   else f"fails its schema's {exc.validator!r} rule")
            msg = f"arguments are not valid for tool {entry['tool_name']!r}: {where}: {why}"
            raise InvalidApprovedArgsError(msg) from None
        except (jsonschema.SchemaError, RecursionError) as exc:
            msg = f"arguments for tool {entry['tool_name']!r} could not be checked: {exc}"
            raise GraphkitError(msg) from exc
        try:
            coerced: dict[str, Any] = as_schema_types(dict(args), schema)
        except OverflowError as exc:
            msg = f"arguments for tool {entry['tool_name']!r}: a number is too large ({exc})"
            raise InvalidApprovedArgsError(msg) from exc
        return coerced

    # ------------------------------------------------------------------ async twins

    async def apending(self, agent: str | None = None, tool_name: str | None = None,
                       limit: int | None = None, *, viewer: str | None = None
                       ) -> list[PendingApproval]:
        """Async twin of `pending`."""
        return await asyncio.to_thread(self.pending, agent, tool_name, limit, viewer=viewer)

    async def aget(self, id: str, *, viewer: str | None = None) -> PendingApproval:
        """Async twin of `get`."""
        return await asyncio.to_thread(self.get, id, viewer=viewer)

    async def aapprove(self, id: str, *, decided_by: str, comment: str | None = None,
                       args: dict[str, Any] | None = None, args_digest: str | None = None,
                       remember: Remember = "once") -> PendingApproval:
        """Async twin of `approve`."""
        return await asyncio.to_thread(self.approve, id, decided_by=decided_by, comment=comment,
                                       args=args, args_digest=args_digest, remember=remember)

    async def adecline(self, id: str, *, decided_by: str, comment: str | None = None
                       ) -> PendingApproval:
        """Async twin of `decline`."""
        return await asyncio.to_thread(self.decline, id, decided_by=decided_by, comment=comment)

    async def arespond(self, id: str, *, decided_by: str, message: str) -> PendingApproval:
        """Async twin of `respond`."""
        return await asyncio.to_thread(self.respond, id, decided_by=decided_by, message=message)

    async def aresume(self, id: str, data: Any, *, decided_by: str) -> PendingApproval:
        """Async twin of `resume`."""
        return await asyncio.to_thread(self.resume, id, data, decided_by=decided_by)

    async def aschema(self, id: str) -> dict[str, Any]:
        """Async twin of `schema`."""
        return await asyncio.to_thread(self.schema, id)

    async def amessages(self, id: str, *, viewer: str | None = None) -> list[Any]:
        """Async twin of `messages`."""
        return await asyncio.to_thread(self.messages, id, viewer=viewer)

    async def agrants(self, thread_id: str | None = None, *, viewer: str | None = None
                      ) -> list[dict[str, Any]]:
        """Async twin of `grants`."""
        return await asyncio.to_thread(self.grants, thread_id, viewer=viewer)

    async def arevoke(self, grant_id: str, *, decided_by: str, viewer: str | None = None
                      ) -> dict[str, Any]:
        """Async twin of `revoke`."""
        return await asyncio.to_thread(self.revoke, grant_id, decided_by=decided_by,
                                       viewer=viewer)

    async def aready(self) -> list[str]:
        """Async twin of `ready`."""
        return await asyncio.to_thread(self.ready)

    async def aexpire(self) -> list[PendingApproval]:
        """Async twin of `expire`."""
        return await asyncio.to_thread(self.expire)

    async def aaudit(self, *, thread_id: str | None = None, id: str | None = None,
                     viewer: str | None = None) -> list[dict[str, Any]]:
        """Async twin of `audit`."""
        return await asyncio.to_thread(self.audit, thread_id=thread_id, id=id, viewer=viewer)

    def expire(self) -> list[PendingApproval]:
        """Decline every waiting approval past its `expires_at` (never approve one)."""
        return [self.get(approval_id)
                for approval_id in self._expire_due(self._waiting_entries(decided=False))]

    def _expire_due(self, entries: list[dict[str, Any]]) -> list[str]:
        """Decline those of `entries` (undecided ones) past their `expires_at`; their ids."""
        due = {e["id"]: e for e in entries if e.get("expires_at") and not e["decided"]}
        if not due:
            return []
        return [approval_id for approval_id in self._storage.ledger.overdue(due)
                if expire(self._storage.ledger, due[approval_id],  # type: ignore[arg-type]
                          thread_id=str(due[approval_id]["thread_id"]),
                          run_id=due[approval_id].get("run_id"), enqueue=True)]
