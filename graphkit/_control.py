"""From a paused run's state and a request of the Agent API to a claimed decision and the
`Command` that lets the gate apply it.

The API finds what waits (graphkit's interrupt payloads, at any depth), picks the approval a
request means, and takes the decision through `graphkit._review` (checked, claimed in the
ledger, audited) before anything resumes. The resume value it then sends carries no decision
at all: it asks each gate to apply what the ledger holds, which the gate verifies again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from langchain_core.messages import BaseMessage, messages_to_dict
from langchain_core.tools import BaseTool
from langgraph.types import Command

from graphkit._approvals import last_turn_plan
from graphkit._context import thread_id_of
from graphkit._events import marked_waiting, pending_from_interrupts, with_waiting_beside
from graphkit._ids import stored
from graphkit._latest import Paused, options_of, stalled, written
from graphkit._ledger import ApprovalRow, Ledger, queued_id
from graphkit._new_message import check_reply, take_new_message
from graphkit._review import (
    Choice,
    Remember,
    expire,
    judge,
    refuse,
    resolved_message,
    shown,
)
from graphkit._settings import Approvers
from graphkit._state import RunOptions
from graphkit.errors import (
    AmbiguousApprovalError,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApprovalsPendingError,
    GraphkitError,
    SnapshotNotFoundError,
)
from graphkit.types import ApprovalRecord, GateResume, PendingApproval

__all__ = [
    "Request",
    "Waiting",
    "apply_command",
    "continue_command",
    "decide",
    "is_current",
    "left_waiting",
    "of_run",
    "start_payload",
    "waiting",
]

ToolFinder = Callable[[Sequence[str], str], BaseTool | None]
PolicyFinder = Callable[[Sequence[str]], Approvers | None]


@dataclass(frozen=True, slots=True)
class Waiting:
    """One approval or suspension the run waits on, with the ledger's row for it."""

    interrupt_id: str
    record: ApprovalRecord
    """As the graph holds it."""
    row: ApprovalRow | None

    @property
    def shown(self) -> ApprovalRecord:
        """The record with the ledger's decision, if any, as a reviewer should see it."""
        return shown(self.record, self.row)

    def pending(self) -> PendingApproval:
        return PendingApproval.from_record(self.shown)


def waiting(snapshot: Paused, ledger: Ledger, agent: str | None) -> list[Waiting]:
    """What the thread waits on: its interrupts'; with `agent` (a decision is to be taken),
    when the run stopped with none (its process died while it applied decisions,
    `on_state_change`, a client's state write that left it with nothing next), what the ledger
    says that agent's gates wait on. The API refused to decide, after a crash, the approvals
    `pending_approvals` listed until someone resumed the run (helper-71), and listed nothing
    of a run a write left while the inbox listed its approval. Continuing a run reads the
    interrupts alone: a stopped run goes on to its gate, which asks."""
    found = with_waiting_beside(pending_from_interrupts(snapshot.interrupts, ledger), ledger,
                                thread_id_of(snapshot.config), agent)
    how = stalled(snapshot) if not found and agent is not None else None
    if how is not None:
        # (a subagent's too: a resume hands its delegation out again, and the subagent goes
        # back to its gate, `_supervisor.entry`)
        found = marked_waiting(ledger, thread_id_of(snapshot.config),
                               lambda w: list(w.row.agent_path)[:1] == [agent])
    rows = ledger.approvals(r["id"] for _, r in found if r["status"] == "pending")
    return [Waiting(i, r, rows.get(r["id"])) for i, r in found]


def _agent(req: Request) -> str | None:
    return req.agent_path[0] if req.agent_path else None


def is_current(snapshot: Paused, ledger: Ledger, *, thread_id: str, agent: str,
               run_id: str) -> bool:
    """Whether `run_id` is the thread's current run: the last its agent started there, as
    the ledger recorded (the state's word only for a thread the ledger has no run of: a
    client may write the state, and make an earlier run look current)."""
    last = ledger.current_run(thread_id, agent)
    return last == run_id if last is not None else options_of(snapshot).get("run_id") == run_id


def of_run(items: list[Waiting], run_id: str, *, current: bool) -> list[Waiting]:
    """What waits in the thread that a decision naming `run_id` may take: a call asked in
    that run, or anything, when it is the thread's `current` run (which carries on turns of
    earlier runs). A decision that names an earlier run never lands on a call asked later
    (models reuse tool_call_ids), nor on one the ledger files under no run: it is refused."""
    if current:
        return items
    return [i for i in items if i.row is not None and i.row.run_id == run_id]


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """Who asks, for which run, with which storage, tools and policies."""

    run_id: str
    thread_id: str
    ledger: Ledger
    find_tool: ToolFinder
    find_policy: PolicyFinder
    find_grant_ttl: Callable[[Sequence[str]], timedelta | None]
    """How long a grant on a call of the agent at a path lasts: that agent's `grant_ttl`."""
    agent_path: tuple[str, ...] = ()
    """The path of the agent the API serves (its name: the top of the delegation chain)."""
    held_by: str | None = None
    """The owner under which the caller holds the run it resumes right after its decision
    (`Ledger.decide`'s `held_by`); None: the decision is only recorded."""


def _raise_decided(snapshot: Paused, req: Request, tool_call_id: str | None,
                   approval_id: str | None) -> None:
    """A call decided earlier: say so, rather than 'not found'. The current turn's plan knows;
    for an earlier turn, the ledger's rows of this thread do."""
    plan = _plan(snapshot, req) or {}
    known: list[tuple[Any, Any]] = [(r, None) for call in plan.get("calls") or []
                                    for r in (call.get("approval"), call.get("suspension")) if r]
    known += [(w.record, w.row) for w in req.ledger.waiting_rows(thread_id=req.thread_id)
              if w.row.decided]
    for record, row in known:
        if not isinstance(record, Mapping):
            continue
        if row is None and record.get("status") == "pending":
            continue
        if record.get("tool_call_id") == tool_call_id or record.get("id") == approval_id:
            raise ApprovalAlreadyResolvedError(resolved_message(
                record, {**(row.decision or {}), "status": row.status} if row else None))


def _raise_decided_alone(req: Request, kind: Literal["approval", "suspension"] | None
                         ) -> None:
    """The run had one call (of `kind`) to decide, at any depth, decided already: say so, as
    a decision naming it is told, rather than "no pending approvals" (a second approve; the
    loser of two at once, which read after the winner's run ended: helper-133)."""
    rows = [row for row in req.ledger.approvals_of_run(req.run_id)
            if row.thread_id == req.thread_id and (kind is None or row.kind == kind)]
    row = rows[0] if len(rows) == 1 and rows[0].decided else None
    record = req.ledger.record(row.approval_id) if row is not None else None
    if row is not None and record is not None:
        raise ApprovalAlreadyResolvedError(resolved_message(
            record, {**(row.decision or {}), "status": row.status}))


def _named(items: list[Waiting], ledger: Ledger, *, tool_call_id: str | None,
           approval_id: str | None) -> list[Waiting]:
    """The waiting calls a decision names: by approval id; else by tool_call_id, which a
    model may have given several calls (parallel subagents): then the decision names none
    of them, however they were decided since (a reviewer who names the call by that id may
    mean another than the one still waiting), and the error asks for the approval id, given
    as the tool_call_id (the API's methods name a call by its tool_call_id only). An
    approval's id given so names that approval alone, waiting or not: never a later call a
    model gave the same id, as an approval id it read (a notebook card named its call by
    the model's id, and decided the next call asked under it: helper-114)."""
    if approval_id is not None:
        return [i for i in items if i.record["id"] == approval_id]
    by_id = [i for i in items if i.record["id"] == tool_call_id]
    if by_id or (tool_call_id is not None and ledger.approval(tool_call_id) is not None):
        return by_id
    return [i for i in items if i.record["tool_call_id"] == tool_call_id]


def _select(items: list[Waiting], snapshot: Paused, req: Request, *,
            tool_call_id: str | None, approval_id: str | None,
            kind: Literal["approval", "suspension"] | None) -> Waiting:
    if tool_call_id is not None or approval_id is not None:
        found = _named(items, req.ledger, tool_call_id=tool_call_id, approval_id=approval_id)
        if len(found) > 1:
            pending = [i.record["id"] for i in found]
            msg = (f"tool_call_id {tool_call_id!r} matches {len(found)} waiting calls in run "
                   f"{req.run_id!r} (a model reused the id); pass the approval id of the "
                   f"one you mean as tool_call_id, one of {pending}")
            raise AmbiguousApprovalError(msg, pending_ids=pending)
        if found:
            record = found[0].shown
            if record["status"] != "pending":
                raise ApprovalAlreadyResolvedError(resolved_message(
                    record, found[0].row.decision if found[0].row else None))
            return found[0]
        given = (f"tool_call_id {tool_call_id!r}" if tool_call_id is not None
                 else f"id {approval_id!r}")
        _raise_decided(snapshot, req, tool_call_id, approval_id or tool_call_id)
        open_ids = [i.record["tool_call_id"] for i in items if i.shown["status"] == "pending"]
        msg = f"no pending approval with {given} in run {req.run_id!r}; pending: {open_ids}"
        raise ApprovalNotFoundError(msg)
    candidates = [i for i in items if i.shown["status"] == "pending"
                  and (kind is None or i.record["kind"] == kind)]
    if len(candidates) == 1:
        return candidates[0]
    decided = [i for i in items if kind is None or i.record["kind"] == kind]
    if not candidates and len(decided) == 1:  # (told as every door tells it: "expired")
        raise ApprovalAlreadyResolvedError(resolved_message(
            decided[0].shown, decided[0].row.decision if decided[0].row else None))
    if not candidates:
        what = f"{kind}s" if kind else "approvals or suspensions"
        other = [i.record for i in items if i.shown["status"] == "pending"]
        if not other:  # (else the error says what waits: a tool to resume, say)
            _raise_decided_alone(req, kind)
        hint = "" if not other else (
            f": tool {other[0]['tool_name']!r} is suspended, waiting for input (resume it)"
            if other[0]["kind"] == "suspension" else
            f": tool {other[0]['tool_name']!r} waits for approval (approve or decline it)")
        raise ApprovalNotFoundError(f"run {req.run_id!r} has no pending {what}{hint}")
    ids = [i.record["tool_call_id"] for i in candidates]
    what = {"approval": "approvals", "suspension": "suspensions"}.get(kind or "", "tool calls")
    msg = f"run {req.run_id!r} has {len(ids)} pending {what}; pass tool_call_id, one of {ids}"
    raise AmbiguousApprovalError(msg, pending_ids=ids)


def _expire(items: list[Waiting], snapshot: Paused, req: Request, agent: str | None
            ) -> list[Waiting]:
    """Touching a run declines what waited past its expiry (an expiry is a fact, not a
    choice); what waits is then read again (`waiting`, with `agent`)."""
    due = req.ledger.overdue(i.record["id"] for i in items
                             if i.record.get("expires_at") and i.shown["status"] == "pending")
    for item in items:
        if item.record["id"] in due:
            expire(req.ledger, item.record, thread_id=req.thread_id, run_id=req.run_id)
    return waiting(snapshot, req.ledger, agent) if due else items


def decide(
    snapshot: Paused,
    req: Request,
    choice: Choice,
    *,
    tool_call_id: str | None,
    approval_id: str | None = None,
    decided_by: str | None,
    comment: str | None,
    args_digest: str | None = None,
    remember: Remember = "once",
) -> ApprovalRecord:
    """Take one decision on a waiting call of this run (checked, claimed, audited)."""
    agent = _agent(req)
    current = is_current(snapshot, req.ledger, thread_id=req.thread_id, agent=agent or "",
                         run_id=req.run_id)
    items = of_run(_expire(waiting(snapshot, req.ledger, agent), snapshot, req, agent), req.run_id,
                   current=current)
    kind: Literal["approval", "suspension"] | None = (
        "suspension" if choice.type == "resume" else "approval" if choice.type != "reject"
        else None)
    try:
        item = _select(items, snapshot, req, tool_call_id=tool_call_id,
                       approval_id=approval_id, kind=kind)
    except GraphkitError as exc:
        # audited on the call it names, but on none of several a reused id names
        named = _named(items, req.ledger, tool_call_id=tool_call_id, approval_id=approval_id)
        known = named[0].shown if len(named) == 1 else None
        refuse(req.ledger, known or {"id": approval_id, "tool_call_id": tool_call_id}, exc,
               decided_by=decided_by, thread_id=req.thread_id, run_id=req.run_id)
        raise
    record = item.record
    path, name = record["agent_path"], record["tool_name"]
    judge(req.ledger, record, choice, decided_by=decided_by, comment=comment,
          approvers=req.find_policy(path),
          tool=req.find_tool(path, name), thread_id=req.thread_id, run_id=req.run_id,
          reviewed_digest=args_digest, remember=remember, grant_ttl=req.find_grant_ttl(path),
          held_by=req.held_by)()
    return record


def apply_command(snapshot: Paused) -> Command[Any] | None:
    """Ask every gate that waits to apply what the ledger holds for it (each gate reads the
    ledger itself: only the interrupts matter here)."""
    interrupts = dict.fromkeys(i for i, _ in pending_from_interrupts(snapshot.interrupts))
    if not interrupts:
        return None
    return Command(resume={interrupt_id: GateResume() for interrupt_id in interrupts})


def continue_command(snapshot: Paused, req: Request) -> Any:
    """Continue once every waiting call is decided (here, or in the inbox)."""
    items = _expire(waiting(snapshot, req.ledger, None), snapshot, req, None)
    if any(i.shown["status"] == "pending" for i in items):
        # (named with what waits beside the interrupts: a supervisor's own call)
        undecided = [i.record["tool_call_id"] for i in waiting(snapshot, req.ledger, _agent(req))
                     if i.shown["status"] == "pending"]
        msg = (f"run {req.run_id!r} still has undecided tool calls {undecided}; decide them "
               "(resolve_tool_approval / approve_tool_call / resume_stream / the inbox) first")
        raise ApprovalsPendingError(msg)
    # None: continue a run stopped by on_state_change
    command = apply_command(snapshot) or left_waiting(snapshot, req)
    if command is None and not written(snapshot):
        msg = (f"run {req.run_id!r} has nothing to continue: its thread holds none of it (its "
               "stream was closed, or its process stopped, before its message was written); "
               "send the message again")
        raise SnapshotNotFoundError(msg)
    return command


def left_waiting(snapshot: Paused, req: Request) -> Command[Any] | None:
    """For a run a client's state write left with nothing next while a gate of its agent
    waited (`update_state` on the paused thread, on its namespace or a supervisor's above it):
    the inbox listed the run as ready once decided, and every resume did nothing, for good
    (helper-72, helper-79), or said the run stopped on the client's words. The run goes back
    to its gate, which applies the ledger's decisions, or asks again (what a client wrote over
    the waiting call is dropped on the way); a subagent's gate too: its supervisor hands the
    delegation out again, and the subagent goes back to its gate where it waited
    (`_supervisor.entry`)."""
    return back_to_gate(snapshot, req.ledger, req.thread_id, _agent(req))


def back_to_gate(snapshot: Paused, ledger: Ledger, thread_id: str, agent: str | None
                 ) -> Command[Any] | None:
    """`left_waiting`'s command, for any door that resumes the thread (a client's raw
    `Command(resume=...)` as well: it ran nothing there, helper-111)."""
    if snapshot.interrupts or stalled(snapshot) != "ended":
        return None
    waits = any(w.waiting and list(w.row.agent_path)[:1] == [agent]
                for w in ledger.waiting_rows(thread_id=thread_id))
    return Command(goto="approval_gate") if waits else None


def _plan(snapshot: Paused, req: Request) -> Mapping[str, Any] | None:
    """The ledger's plan of the thread's last turn."""
    return last_turn_plan(req.ledger, req.thread_id, req.agent_path,
                          snapshot.values.get("messages") or [])


def start_payload(snapshot: Paused, messages: list[BaseMessage],
                  options: RunOptions, req: Request | None = None) -> Any:
    """The graph input for a new user message, superseding whatever waits."""
    found = pending_from_interrupts(snapshot.interrupts)
    if not messages and not snapshot.values:
        msg = "nothing to run: pass a message to start a new thread"
        raise GraphkitError(msg)
    _check_ids(messages, snapshot)
    if not (found and messages):
        return {"messages": messages, "options": options} if messages else None
    queued = ({queued_id(q.message): q.message for q in req.ledger.queue_rows(
        req.thread_id, "/".join(req.agent_path))} if req is not None else {})
    check_reply(messages, queued)
    # A message never approves anything, whatever it says (`_new_message`). Ids, so that a
    # queued message is found again (`_reply.left_queued`) and never doubled.
    said = messages_to_dict([m if m.id else m.model_copy(update={"id": str(uuid.uuid4())})
                             for m in messages])
    auto = bool(options.get("auto_resume_suspended_tools"))
    queue_here = any(len(r["agent_path"]) > 1 for _, r in found)
    if req is not None:
        queue_here = take_new_message(
            req.ledger, thread_id=req.thread_id, top=req.agent_path, found=found, said=said,
            auto=auto, plan=_plan(snapshot, req), run_id=req.run_id,
            new_run=(options, req.held_by))
    resume = {interrupt_id: GateResume(supersede=said, auto_resume=auto, queue=not queue_here)
              for interrupt_id, _ in found}
    # the new message starts a new run: what the turn records from here on is filed under it
    return Command(resume=resume, update={"options": options})


def _check_ids(messages: list[BaseMessage], snapshot: Paused) -> None:
    """A new input is new: a message under an id the conversation holds would replace that
    message (LangGraph's reducer keeps one message per id), rewriting what was said and what
    a tool may have acted on, and a retry of one already taken would run the model again.
    Refused before anything changes. (Only given ids are looked for: a run reads the
    conversation only where it needs it, the messages channel being kept as deltas.)"""
    ids = [m.id for m in messages if m.id]
    if not ids:
        return
    unstored = sorted(repr(i) for i in ids if not stored(str(i)))
    if unstored:  # (the driver's own error reached the caller: helper-110)
        msg = f"message ids {unstored} hold a NUL or do not encode as UTF-8: give other ids"
        raise GraphkitError(msg)
    present = {m.id for m in snapshot.values.get("messages") or [] if m.id}
    reused = sorted({str(i) for i in ids if i in present or ids.count(i) > 1})
    if reused:
        msg = (f"message ids {reused} are in the conversation already, or given twice: a new "
               "message needs an id of its own (or none)")
        raise GraphkitError(msg)


def shared_names(agents: Iterable[Any]) -> list[str]:
    """The names more than one of `agents` has: agent paths, by which approvals, grants and
    policies name an agent, are made of names, so agents side by side need their own."""
    names = [str(agent.name) for agent in agents]
    return sorted({n for n in names if names.count(n) > 1})


def agents_on(root: Any, agent_path: Sequence[str]) -> list[Any]:
    """The agents along `agent_path` under `root` (the path's first name), outermost first,
    as far as the path leads. By names: a path is made of them, unique among a supervisor's
    subagents, never of the keys a supervisor offers them under."""
    chain = [root]
    for name in list(agent_path)[1:]:
        agents: Mapping[str, Any] = chain[-1].agents
        found = next((a for a in agents.values() if a.name == name), None)
        if found is None:
            break
        chain.append(found)
    return chain


def agent_at(root: Any, agent_path: Sequence[str]) -> Any | None:
    """The agent at `agent_path` under `root`, or None where the path leads nowhere."""
    chain = agents_on(root, agent_path)
    return chain[-1] if len(chain) == max(len(agent_path), 1) else None


def policy_finder(root: Any) -> PolicyFinder:
    """The approvers policy of the agent at `agent_path`: its own, else its nearest
    supervisor's."""

    def find(agent_path: Sequence[str]) -> Approvers | None:
        approvers: Approvers | None = None
        for agent in agents_on(root, agent_path):
            if agent.approvers is not None:  # (a policy object may be falsy: an empty list)
                approvers = agent.approvers  # a subagent without one inherits
        return approvers

    return find
