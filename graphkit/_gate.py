"""The `approval_gate` node: the one place that pauses, takes decisions and dispatches calls.

Whatever resumes the graph (the Agent API, the inbox and a worker, the CLI, a raw
`Command(resume=...)`, the LangGraph server, Studio, Agent Chat UI) meets the same code: a
raw decision in the resume value is taken through `graphkit._review` with the identity of the
run's authenticated user, and every decision the ledger holds is verified against this agent's
own policy and tools before it changes the plan. The plan in the graph's state only steers;
the tools node runs nothing the ledger does not allow.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphInterrupt
from langgraph.types import Command, Send, interrupt

from graphkit._approvals import (
    Extractor,
    answered_ids,
    interrupt_value,
    parsed_messages,
    same_content,
    suspension_record,
    telemetry,
    turn_results,
    waiting_records,
)
from graphkit._context import emit, last_ai, open_turns, thread_id_of
from graphkit._ledger import (
    ApprovalRow,
    AuditRow,
    Clearance,
    Ledger,
    PendingTurn,
    queued_id,
    same_queued,
)
from graphkit._limits import check_value
from graphkit._new_message import (
    BY_NEW_MESSAGE,
    DELEGATION_STOPPED,
    STOPPED_WAITING,
    asked_unseen,
    check_reply,
    message_input,
    resumed_answer,
    resumed_with,
    said_of,
    says_nothing,
    stopped_above,
    take_for_the_top,
)
from graphkit._offload import offload
from graphkit._owner import holder_is_dead
from graphkit._planner import GateContext, Planner
from graphkit._review import (
    Choice,
    Taken,
    audit_row,
    auto_resume,
    expire,
    identity_of,
    judge,
    parse_choice,
    refuse,
    resolved_message,
    supersede,
    taken_by,
    tool_call_id_of,
    verify,
)
from graphkit._secrets import masked_ai, record_paths, with_secrets
from graphkit._sent import NO_ANSWER, is_interrupt_id, taken
from graphkit._state import (
    AgentState,
    CallPlan,
    RunOptions,
    ToolTask,
    TurnPlan,
    TurnPointer,
    delegation_of_turn,
    turn_key,
)
from graphkit._validate import now_iso
from graphkit.errors import (
    AmbiguousApprovalError,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApproverNotAllowedError,
    GraphkitError,
)
from graphkit.tools import GraphkitTool
from graphkit.types import ApprovalRecord, GateResume, args_digest

__all__ = ["dispatch_now", "make_gate_node", "pointer", "supersede_abandoned",
           "supersede_unanswered", "suspended_itself"]

GateTarget = Literal["model", "tools", "approval_gate", "__end__"]

REJECTED = "Tool call {name!r} was rejected by {who}{why}. It did not run."
EXPIRED = "Tool call {name!r} was not run: its approval expired ({why})."
SUPERSEDED = "Tool call {name!r} was not run: superseded by a new user message."
RESUME_FIELDS = GateResume.__optional_keys__ | GateResume.__required_keys__
"""The closed shape of a resume value: `GateResume`'s keys."""
UNKNOWN = ("Tool call {name!r} was stopped by a new user message after it started; whether it "
           "took effect is unknown. It will not run again unless called anew.")
STILL_RUNNING = ("Tool call {name!r} was still running when a new user message came; its "
                 "result was not known then.")
SWEPT = ("This call was stopped by a new user message before it answered; whether it took "
         "effect is unknown (it runs again only if called anew).")
"""What the sweep of a turn the plan no longer accounts for records: it cannot tell a call that
never started from a delegation whose subagents did part of their work."""
UNACCOUNTED = ("Tool call {name!r} was stopped by a new user message; the run's state no "
               "longer says what became of it, so whether it took effect is unknown (it runs "
               "again only if called anew).")
RESPONDED = ("[Tool call {name!r} did not run. {who} answered in its place; these are the "
             "reviewer's words, not the tool's result:] {message}")
"""A `respond` decision as the model reads it: marked as the reviewer's, so that a reviewer's
"the payment succeeded" is never taken for the tool's own result."""
CANCELLED = ("Tool call {name!r} was cancelled by {who}{why} while it waited for input; it may "
             "have done part of its work. It will not go on.")
DECISION_COUNT = (
    "Number of human decisions ({given}) does not match number of pending tool calls "
    "({expected}); name each call with tool_call_id, or decide all of {ids}."
)
INPUT_NEEDS_IDS = (
    "no approval waits here for an unnamed decision: {ids} wait for input (a suspended tool); "
    "name each decision with its tool_call_id"
)
FORGED_DECIDER = (
    "the resume payload says decided_by={claimed!r}, but the authenticated user is "
    "{identity!r}; the decider comes from authentication, never from the payload"
)


def _edited_ai(ai: AIMessage, edited: Mapping[str, dict[str, Any]], plan: TurnPlan
               ) -> AIMessage:
    """The AI message as it will run, so the history shows the edited call, not the original
    (its secrets masked, as the model's own reply was, where the approval records them)."""
    calls = [
        {**call, "args": edited[call_id]}
        if (call_id := call.get("id")) is not None and call_id in edited else call
        for call in ai.tool_calls
    ]
    secrets = {c["tool_call_id"]: paths for c in plan["calls"]
               if c["tool_call_id"] in edited and c["approval"] is not None
               and (paths := record_paths(c["approval"]))}
    return masked_ai(ai.model_copy(update={"tool_calls": calls}), secrets)


def _who_why(decided_by: Any, comment: Any) -> tuple[str, str]:
    return (repr(decided_by) if decided_by else "a reviewer", f": {comment}" if comment else "")


class _Pass:
    """One pass of the gate over a plan it owns (a copy of the state's)."""

    def __init__(self, planner: Planner, ctx: GateContext, plan: TurnPlan,
                 config: RunnableConfig, extract: Extractor | None) -> None:
        self.planner = planner
        self.ctx = ctx
        self.plan = plan
        self.config = config
        self.extract = extract
        self.edited: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.taken: dict[str, Taken] = {}
        """Decisions taken in this pass (already checked: not verified twice)."""
        self.cleared: dict[str, Clearance] = {}
        """Approvals (and resumed suspensions) this pass verified and lets run."""
        self._written: set[str] = set()
        self.stopped = False
        """A new message stopped the delegation this subagent works for (`take_for_the_top`)."""
        self.rows: dict[str, ApprovalRow] = {}
        """The ledger's rows `apply_ledger` last read (what a row says a reviewer may decide
        never changes: the pause's payload reads it here)."""

    def _call_of(self, record_id: str) -> tuple[CallPlan, ApprovalRecord] | None:
        for call in self.plan["calls"]:
            for record in (call["approval"], call["suspension"]):
                if record is not None and record["id"] == record_id:
                    return call, record
        return None

    # ---------------------------------------------------------------- raw resume values

    def take(self, value: Any, answered: set[str], present: set[str], *, decided: bool,
             refusal_fails: bool = False) -> None:
        """What the pass was resumed with, taken as at a pause (`resume`): a refusal goes in
        the plan's error (or fails the run: `refusal_fails`), the approvals read with the plan
        are read again where the value `decided` something (they predate it), and what the
        ledger holds applies."""
        self.plan["error"] = None
        try:
            self.resume(value, answered, present)
        except GraphkitError as exc:
            if refusal_fails:
                raise
            self.plan["error"] = str(exc)
        if decided:
            self.ctx.forget_approvals()
        self.apply_ledger(answered)

    def resume(self, value: Any, answered: set[str], present: set[str]) -> None:
        """Handle what the interrupt was resumed with (`present`: the ids of the messages of
        the conversation); raise on anything refused."""
        if not isinstance(value, Mapping):
            msg = f"resume value must be an object with 'decisions', got {type(value).__name__}"
            raise GraphkitError(msg)
        if message_input(value):  # graph input, as LangGraph's server resumes with it
            said = self._as_said(value["messages"])
            if said is None:  # (taken for the top agent: the ledger holds what it does)
                return
            value = said
        stray = sorted(str(k) for k in value if k not in RESUME_FIELDS)
        if any(is_interrupt_id(k) for k in stray):
            # answers by interrupt id, one key no id: LangGraph reads it as one value, whose
            # ids were called fields (helper-143 L2)
            odd = next(k for k in value if not is_interrupt_id(k))
            msg = (f"the resume is read as one value, not as answers by interrupt id (not an "
                   f"interrupt id: {odd!r}); send each answer under the id of the interrupt it "
                   "answers, as the thread's interrupts name them, or one value")
            raise GraphkitError(msg)
        if stray or ("supersede" in value and "decisions" in value):
            msg = (f"resume value fields {stray or ['decisions', 'supersede']} are not taken "
                   "together; give 'decisions', or 'supersede' (with 'auto_resume', 'queue'), "
                   "or nothing")
            raise GraphkitError(msg)
        if "supersede" in value:
            self.supersede(value, answered, present)
        elif "decisions" in value:
            self.decide(value["decisions"], answered)
        # Anything else only asks the gate to apply what the ledger holds (the Agent API and
        # workers claim decisions there first).

    def _as_said(self, raw: Any) -> dict[str, Any] | None:
        """Graph input's messages as a resume value (`{"messages": [...]}`): the LangGraph
        server's thread protocol (v2: its SDK's thread stream) starts a run on a paused
        thread by resuming it with the run's input, and the user's new message was refused
        as fields not taken together, dropped, the run told "success" (helper-128). It is a
        new message, as graph input's is: 'supersede', with ids made where it has none
        (`said_of`). At a subagent's gate it is the top agent's (`take_for_the_top`: it was
        refused there, helper-129 M4): what it does is in the ledger, and where it stopped
        the delegation this subagent works for, the gate ends the subagent, whose node
        answers as the ledger settled it (None). Ids are always made there: the supervisor's
        conversation, which a given id could repeat, is not this gate's to read."""
        nested = len(self.ctx.path) > 1
        messages, said = said_of(raw, self.config, keep_ids=not nested)
        if not nested:  # (said as the API says it, to a client who never wrote 'supersede')
            check_reply(messages, {queued_id(q.message): q.message
                                   for q in self.ctx.queue_rows()})
            return {"supersede": said}
        self.stopped = take_for_the_top(
            self.ctx.ledger, thread_id=self.ctx.thread_id, top=self.ctx.path[:1],
            start=self.ctx.scope, messages=messages, said=said, run_id=self.ctx.run_id,
            decided_by=identity_of(self.config))
        return None

    def decide(self, raw: Any, answered: set[str]) -> None:
        if not isinstance(raw, list):
            msg = f"'decisions' must be a list, got {type(raw).__name__}"
            raise GraphkitError(msg)
        waiting = [r for r in waiting_records(self.plan, answered) if r["status"] == "pending"]
        parsed = [parse_choice(d, i) for i, d in enumerate(raw)]
        identity = identity_of(self.config)
        try:
            targets = self._targets(parsed, waiting)
        except GraphkitError as unmatched:
            # audited as the API audits a decision that names no call, or several: the
            # client's went unrecorded (helper-114)
            ids = next(((c, a) for _, c, a, _ in parsed if c is not None or a is not None),
                       (None, None))
            refuse(self.ctx.ledger, {"id": ids[1], "tool_call_id": ids[0]}, unmatched,
                   decided_by=identity, thread_id=self.ctx.thread_id, run_id=self.ctx.run_id)
            raise
        for record, (_, _, _, claimed) in zip(targets, parsed, strict=True):
            exc: GraphkitError | None = None
            if record["agent_path"] != self.ctx.path:
                exc = GraphkitError(
                    f"approval {record['id']!r} belongs to agent "
                    f"{'/'.join(record['agent_path'])!r}, not {'/'.join(self.ctx.path)!r}")
            elif claimed is not None and claimed != identity:
                exc = ApproverNotAllowedError(FORGED_DECIDER.format(claimed=claimed,
                                                                    identity=identity))
            if exc is not None:
                refuse(self.ctx.ledger, record, exc, decided_by=identity,
                       thread_id=self.ctx.thread_id, run_id=self.ctx.run_id)
                raise exc
        # every decision is checked before any is claimed: one refused changes nothing, one
        # for a call decided since the pause (in the inbox, by the CLI) too (a batch whose
        # first decision was claimed before the second was found decided went on half taken:
        # helper-81); a decision this resume took already (a retried pass reads its resume
        # again) is the ledger's to apply, not a refusal
        rows = self.ctx.ledger.approvals(r["id"] for r in targets)
        fresh: list[tuple[ApprovalRecord, Choice]] = []
        for record, (choice, _, _, _) in zip(targets, parsed, strict=True):
            row = rows.get(record["id"])
            if row is None or not row.decided:
                fresh.append((record, choice))
            elif not taken_by(row, choice, identity):
                exc = ApprovalAlreadyResolvedError(resolved_message(record, row.decision))
                refuse(self.ctx.ledger, record, exc, decided_by=identity,
                       thread_id=self.ctx.thread_id, run_id=self.ctx.run_id)
                raise exc
        claims = [(record, self._judge(record, choice, identity)) for record, choice in fresh]
        for record, claim in claims:
            self.taken[record["id"]] = claim()

    def _targets(self, parsed: list[Any], waiting: list[ApprovalRecord]
                 ) -> list[ApprovalRecord]:
        """The waiting call each parsed decision names (in order, where none names one)."""
        named = [p for p in parsed if p[1] is not None or p[2] is not None]
        if named and len(named) < len(parsed):
            # (the unnamed one was looked up as "tool_call_id None": helper-143 L1)
            ids = [r["tool_call_id"] for r in waiting]
            msg = ("name the call of every decision (tool_call_id, or approval id), or of "
                   f"none (then they answer the calls waiting, in order: {ids})")
            raise AmbiguousApprovalError(msg, pending_ids=ids)
        if parsed and not named:
            undecided = [r for r in waiting if r["kind"] == "approval"]
            if not undecided and waiting:  # decisions in order answer approvals only
                ids = [r["tool_call_id"] for r in waiting]
                raise AmbiguousApprovalError(INPUT_NEEDS_IDS.format(ids=ids), pending_ids=ids)
            if len(parsed) != len(undecided):
                # (one for each call still undecided, as the pause lists them: some were
                # decided since the pause, in the inbox, say; helper-81)
                rows = self.ctx.ledger.approvals(r["id"] for r in undecided)
                left = [r for r in undecided if not (rows.get(r["id"]) and rows[r["id"]].decided)]
                if len(parsed) != len(left):
                    ids = [r["tool_call_id"] for r in left]
                    msg = DECISION_COUNT.format(given=len(parsed), expected=len(left), ids=ids)
                    raise AmbiguousApprovalError(msg, pending_ids=ids)
                undecided = left
            targets = undecided
        else:
            targets = [self._elsewhere(waiting, call_id, approval_id)
                       for _, call_id, approval_id, _ in parsed]
        if len({r["id"] for r in targets}) != len(targets):
            msg = "two decisions for the same pending call; give one decision per call"
            raise GraphkitError(msg)
        return targets

    def _judge(self, record: ApprovalRecord, choice: Choice, decided_by: str | None
               ) -> Callable[[], Taken]:
        settings = self.planner.settings
        return judge(self.ctx.ledger, record, choice, decided_by=decided_by,
                     approvers=settings.approvers,
                     tool=self.planner.tools.get(record["tool_name"]),
                     thread_id=self.ctx.thread_id, run_id=self.ctx.run_id, source="resume",
                     grant_ttl=settings.grant_ttl, identity_required=True)

    def _elsewhere(self, waiting: Sequence[ApprovalRecord], call_id: str | None,
                   approval_id: str | None) -> ApprovalRecord:
        """`_target`, or where the approval it names waits at another agent's gate of the
        thread, an error that says so: "no pending approval with id ..." read as no such
        approval, though the API listed it pending (helper-145 L1)."""
        try:
            return self._target(waiting, call_id, approval_id)
        except ApprovalNotFoundError:
            row = self.ctx.ledger.approval(approval_id) if approval_id is not None else None
            if (row is None or row.thread_id != self.ctx.thread_id or row.decided
                    or list(row.agent_path) == list(self.ctx.path)):
                raise
            msg = (f"approval {approval_id!r} waits at agent {'/'.join(row.agent_path)!r}, not "
                   f"at this pause ({'/'.join(self.ctx.path)!r}): decide it through the API or "
                   "the inbox, or under that agent's interrupt id once it asks; pending here: "
                   f"tool_call_ids {[r['tool_call_id'] for r in waiting]}")
            raise ApprovalNotFoundError(msg) from None

    @staticmethod
    def _target(waiting: Sequence[ApprovalRecord], call_id: str | None,
                approval_id: str | None) -> ApprovalRecord:
        found = [r for r in waiting
                 if (approval_id is not None and r["id"] == approval_id)
                 or (approval_id is None and r["tool_call_id"] == call_id)]
        if len(found) == 1:
            return found[0]
        ids = [r["tool_call_id"] for r in waiting]
        if found:
            msg = (f"tool_call_id {call_id!r} matches {len(found)} pending calls; name one by "
                   f"approval id, one of {[r['id'] for r in found]}")
            raise AmbiguousApprovalError(msg, pending_ids=[r["id"] for r in found])
        given = f"id {approval_id!r}" if approval_id is not None else f"tool_call_id {call_id!r}"
        msg = f"no pending approval with {given}; pending tool_call_ids: {ids}"
        raise ApprovalNotFoundError(msg)

    def supersede(self, value: Mapping[str, Any], answered: set[str], present: set[str]
                  ) -> None:
        """A new user message: what waits is declined as superseded, except suspensions whose
        resume data auto-resume can read from the message. A message never approves."""
        said_now = value.get("supersede")
        if not (isinstance(said_now, list) and all(isinstance(m, Mapping) for m in said_now)):
            msg = "'supersede' must be a list of serialised messages"
            raise GraphkitError(msg)
        check_value(said_now, what="the superseding message", error=GraphkitError)
        # Resume data is read from this message only: an earlier one, queued, may already
        # have answered an earlier question of the same tool, or come from someone else.
        said = parsed_messages(said_now, what="'supersede'")
        users = [m for m in said if isinstance(m, HumanMessage)]
        if not users:
            # only what a user says declines what waits (a decision is judged by the policy)
            msg = ("'supersede' must carry the user's new message (a 'human' message): it is "
                   "what declines what waits")
            raise GraphkitError(msg)
        queue = bool(value.get("queue", True))  # (False: the API queued them already)
        queued = ({queued_id(q.message): q.message for q in self.ctx.queue_rows()}
                  if queue else {})
        if queue and not all(
                m.id and m.id not in present and not says_nothing(m)
                and same_queued(queued.get(m.id), m) for m in users):
            # queued by its id, delivered if it says something and is not in the conversation
            # already: else it would decline what waits and never join the conversation
            # (an id the queue holds for other words kept those: the message's own words
            # answered a suspended tool, the conversation showed the others; helper-129)
            msg = ("'supersede' must carry the user's new messages each with an id new to the "
                   "conversation and to the messages queued for it, and content (as "
                   "messages_to_dict gives them): they join it")
            raise GraphkitError(msg)
        if not queue and not self._queued(users):
            # "queue": false is the API's word that it queued the message already
            # (`_control`): a client's message nobody queued declined what waited, past the
            # approvers policy, and never joined the conversation (helper-108 M1)
            msg = ("'supersede' with 'queue': false must carry the user's messages graphkit's "
                   "API queued; leave 'queue' out: the messages join the conversation")
            raise GraphkitError(msg)
        auto = (self.planner.settings.auto_resume_suspended_tools
                or bool(value.get("auto_resume"))) and self.extract is not None
        # The agent's own auto-resume, for the API's message (queued by the API, and taken
        # as such once: `take_vouched`), answers as the process; any other resume that
        # carries a message is a client's, judged with who it is: a raw `Command` in the
        # API's shape, with no one named, resumed the tool past an approvers policy that
        # needs a name (helper-125), and again once a first pass had queued its message
        # (helper-126).
        @functools.cache  # (taken once a pass, only where a suspension is to be answered)
        def as_process() -> bool:
            return bool(self.planner.settings.auto_resume_suspended_tools
                        and not queue
                        and self.ctx.ledger.take_vouched(
                            self.ctx.thread_id, self.ctx.path[0] if self.ctx.path else "",
                            [str(m.id or "") for m in users]))
        for call in self.plan["calls"]:
            if call["tool_call_id"] in answered or call["answer"] is not None or not any(
                    r is not None and r["status"] == "pending"
                    for r in (call["approval"], call["suspension"])):
                continue  # (a decision taken before the message runs first; a call ready)
            suspension = call["suspension"]
            tool = self.planner.tools.get(call["tool_name"])
            schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
            if suspension is not None and auto and schema is not None and self.extract:
                taken = auto_resume(
                    self.ctx.ledger, suspension, self.extract(call, said),
                    decided_by=identity_of(self.config),
                    approvers=self.planner.settings.approvers, tool=tool,
                    thread_id=self.ctx.thread_id, run_id=self.ctx.run_id,
                    identity_required=not as_process())
                if taken is not None:
                    self.taken[suspension["id"]] = taken
                continue
            self._supersede(call)
        if queue:
            self.ctx.enqueue(self.plan["ai_message_id"], said_now)

    def _queued(self, users: list[HumanMessage]) -> bool:
        """Whether each of the user's messages is in the queue of the thread's top agent,
        where the API queues a new message (delivered since, for a replay of this pass), as
        it is there: the words under a queued message's id were another's (helper-110)."""
        queued = {queued_id(q.message): q.message for q in self.ctx.ledger.queue_rows(
            self.ctx.thread_id, self.ctx.path[0] if self.ctx.path else "")}
        return all(m.id is not None and m.id in queued and same_queued(queued[m.id], m)
                   for m in users)

    def _supersede(self, call: CallPlan) -> None:
        comment = BY_NEW_MESSAGE
        for record in (call["approval"], call["suspension"]):
            if record is None or record["status"] != "pending":
                continue
            supersede(self.ctx.ledger, record, comment=comment, thread_id=self.ctx.thread_id,
                      run_id=self.ctx.run_id, decided_by=identity_of(self.config))
            record["status"] = "rejected"
            record["comment"] = comment
            record["decided_at"] = now_iso()
            if record.get("kind") == "approval":
                self.events.append(telemetry(record, "rejected"))
        call["answer"] = _superseded(call)
        call["suspension"] = None

    # ---------------------------------------------------------------- the ledger's decisions

    def apply_ledger(self, answered: set[str]) -> bool:
        """Apply every decision the ledger holds for what waits (and expire what is overdue);
        True when the plan changed."""
        waiting = [r for r in waiting_records(self.plan, answered) if r["status"] == "pending"]
        if not waiting:
            return False
        ledger = self.ctx.ledger
        expiring = [r for r in waiting if r.get("expires_at")]
        for approval_id in ledger.overdue(r["id"] for r in expiring):
            record = next(r for r in expiring if r["id"] == approval_id)
            expire(ledger, record, thread_id=self.ctx.thread_id, run_id=self.ctx.run_id)
            self.ctx.forget_approvals()
        rows = self.rows = self.ctx.approvals(r["id"] for r in waiting)
        changed = False
        for record in waiting:
            row = rows.get(record["id"])
            if row is None or not row.decided:  # (the plan and its rows are written together)
                continue
            taken = self.taken.get(record["id"]) or self._verified(row, record)
            if taken is not None:
                self._apply(record, taken)
                changed = True
        return changed

    def unwritten(self) -> dict[str, Clearance]:
        """The clearances this pass took that are not in the ledger yet (the gate writes them
        before any Send leaves the pass: the tools node runs only what a gate cleared)."""
        new = {k: v for k, v in self.cleared.items() if k not in self._written}
        self._written.update(new)
        return new

    def _verified(self, row: ApprovalRow, record: ApprovalRecord) -> Taken | None:
        """A decision claimed elsewhere, checked again here; reopened when it fails."""
        try:
            return verify(row, record, approvers=self.planner.settings.approvers,
                          tool=self.planner.tools.get(record["tool_name"]))
        except GraphkitError as exc:
            decision = row.decision or {}
            self.ctx.ledger.reopen(record["id"], decision=decision, audits=[audit_row(
                "refused", record, thread_id=self.ctx.thread_id, run_id=self.ctx.run_id,
                decided_by=decision.get("decided_by"),
                detail=f"{type(exc).__name__}: {exc} (the decision was withdrawn; the call "
                       "waits for a decision again)")])
            self.plan["error"] = str(exc)
            return None

    def _apply(self, record: ApprovalRecord, taken: Taken) -> None:
        found = self._call_of(record["id"])
        if found is None:  # pragma: no cover - waiting records come from the plan
            return
        call, record = found
        decision = taken.decision
        by, comment = decision.get("decided_by"), decision.get("comment")
        record["status"] = taken.status
        record["decided_by"] = by
        record["comment"] = comment
        record["decided_at"] = decision.get("decided_at") or now_iso()
        name = call["tool_name"]
        if record["kind"] == "suspension":
            call["suspension"] = None
            if taken.event == "resumed":
                call["resume_values"].append(decision.get("data"))
                self.cleared[record["id"]] = Clearance(record["args_digest"], None)
            else:
                who, why = _who_why(by, comment)
                call["answer"] = (STOPPED_WAITING.format(name=name)
                                  if taken.event == "superseded"
                                  else CANCELLED.format(name=name, who=who, why=why))
            return
        self.events.append(telemetry(record, taken.status))
        if taken.status == "approved":
            if taken.event == "edited" and taken.run_args is not None:
                record["approved_args"] = dict(taken.run_args)
                record["metadata"] = with_secrets(record, decision)["metadata"]
                call["args"] = dict(taken.run_args)
                self.edited[call["tool_call_id"]] = dict(taken.run_args)
            # (the ledger's own digest of what runs: a record's shown digest may be salted)
            self.cleared[record["id"]] = Clearance(args_digest(call["args"]), call["args"])
            return
        match taken.event:
            case "responded":
                who = f"The reviewer {by!r}" if by else "A reviewer"
                call["answer"] = RESPONDED.format(
                    name=name, who=who, message=str(decision.get("message") or comment or ""))
                call["answer_status"] = "success"
            case "expired":
                call["answer"] = EXPIRED.format(name=name, why=comment)
            case "superseded":
                call["answer"] = SUPERSEDED.format(name=name)
            case _:
                who, why = _who_why(by, comment)
                call["answer"] = REJECTED.format(name=name, who=who, why=why)


def supersede_unanswered(ai_message_id: str, messages: Sequence[BaseMessage], ledger: Ledger,
                         *, thread_id: str, agent_path: Sequence[str], run_id: str | None,
                         scope: str = "") -> list[ToolMessage]:
    """The answers of a turn's calls that have none when a new user message comes (its run
    stopped mid-turn: `on_state_change`, a crash). What waited is declined as superseded, in
    the subagents of a stopped delegation too; a call that never started is recorded as not
    run; one whose process died after it started never starts again and is told its outcome
    is unknown; one a live process still runs is left to finish (told so); one that ran is told
    its recorded result. Providers refuse a tool call left without a result."""
    ai = next((m for m in messages if m.id == ai_message_id), None)
    if not isinstance(ai, AIMessage):
        return []
    answered = answered_ids(messages, str(ai.id))
    plan = ledger.turn(thread_id, agent_path, turn_key(ai, scope))
    planned = {c["tool_call_id"]: c for c in plan["calls"]} if plan else {}
    unanswered = list({c["id"]: c for c in ai.tool_calls if c.get("id") not in answered}.values())
    calls = [planned[c["id"]] for c in unanswered if c["id"] in planned]
    for call in calls:
        for record in (call["approval"], call["suspension"]):
            if record is not None and record.get("status") != "rejected":
                supersede(ledger, record, comment=BY_NEW_MESSAGE, thread_id=thread_id,
                          run_id=run_id)
    # A turn no gate planned (a client wrote it) has calls no plan accounts for: see below.
    unaccounted = any(c["id"] not in planned for c in unanswered)
    if unaccounted or any(call["node"] != "tools" for call in calls):
        # a delegation stopped mid-way (or may have): what waits in its subagents is declined
        for row in ledger.pending_below(thread_id, agent_path):
            supersede(ledger, {"id": row.approval_id, "tool_name": row.tool_name,
                               "agent_path": list(row.agent_path), "kind": row.kind,
                               "tool_call_id": tool_call_id_of(ledger, row.call_key)},
                      comment=BY_NEW_MESSAGE, thread_id=thread_id, run_id=run_id)
    # (a call that asked in the step its gate has not ended yet started too: helper-145)
    unseen = set(ledger.asked_of((c["key"] for c in calls if c["node"] == "tools"), thread_id))
    ledger.settle({c["key"]: {"content": _not_run(c, c["key"] in unseen), "status": "error"}
                   for c in calls}, thread_id=thread_id)
    if unaccounted or any(call["node"] != "tools" for call in calls):
        # A call below that a reviewer approved after the message was read and before its
        # wait was declined (the decline then changed nothing) never runs now that its
        # delegation is stopped: recorded so, superseded, not left approved (helper-134 F2).
        ledger.settle({key: {"content": SUPERSEDED.format(name=name), "status": "error"}
                       for key, name in ledger.approved_below(thread_id, agent_path).items()},
                      thread_id=thread_id)
    running = ledger.fence({c["key"]: {"content": UNKNOWN.format(name=c["tool_name"]),
                                       "status": "error"} for c in calls},
                           thread_id=thread_id, holder_dead=holder_is_dead)
    if unaccounted:
        # No call of this agent the ledger holds open in the thread may run after this (a
        # delegation's included), and none is told "not run".
        keys = ledger.open_calls(thread_id, agent_path)
        gone = {"content": SWEPT, "status": "error"}
        ledger.settle(dict.fromkeys(keys, gone), thread_id=thread_id)
        ledger.fence(dict.fromkeys(keys, gone), thread_id=thread_id, holder_dead=holder_is_dead)
    recorded = ledger.outcomes((c["key"] for c in calls), thread_id=thread_id)
    answers: list[ToolMessage] = []
    for asked in unanswered:
        found = planned.get(str(asked["id"]))
        if found is None:
            answers.append(ToolMessage(UNACCOUNTED.format(name=asked["name"]),
                                       tool_call_id=asked["id"], name=asked["name"],
                                       status="error"))
            continue
        outcome = recorded.get(found["key"]) or {}
        if found["key"] in running:
            outcome = {"content": STILL_RUNNING.format(name=asked["name"])}
        answers.append(ToolMessage(
            outcome.get("content", SUPERSEDED.format(name=asked["name"])),
            tool_call_id=asked["id"], name=asked["name"],
            status="success" if outcome.get("status") == "success" else "error"))
    return answers


def _not_run(call: CallPlan, asked: bool = False) -> str:
    """What the model reads of a call a new user message stopped mid-turn before it
    answered (`asked`: it suspended itself, and its gate has not asked anyone yet)."""
    if call["node"] != "tools":
        return DELEGATION_STOPPED.format(name=call["tool_name"])
    return STOPPED_WAITING.format(name=call["tool_name"]) if asked else _superseded(call)


def _superseded(call: CallPlan) -> str:
    """What the model reads of a call a new user message superseded: a call that suspended
    itself had started, and may have done part of its work (a hold its `ctx.once` placed):
    told "not run", the model asked for it again, and a reviewer who trusted the words
    approved a second payment (helper-121)."""
    if suspended_itself(call):
        return STOPPED_WAITING.format(name=call["tool_name"])
    return SUPERSEDED.format(name=call["tool_name"])


def suspended_itself(call: CallPlan) -> bool:
    """Whether the call suspended itself, as the plan records it (it waits for input, or
    was resumed with some): it started, so it is never told "not run"."""
    return call["suspension"] is not None or bool(call["resume_values"])


def _copy_record(record: ApprovalRecord | None) -> ApprovalRecord | None:
    if record is None:
        return None
    copied: dict[str, Any] = {**record}
    for key in ("args", "metadata", "approved_args"):
        if isinstance(copied.get(key), dict):
            copied[key] = dict(copied[key])
    return copied  # type: ignore[return-value]


def _copy_plan(plan: TurnPlan) -> TurnPlan:
    """The state's plan, copied as deep as a pass of the gate writes (records, calls, their
    lists and dicts): `copy.deepcopy` of every argument value cost more than the pass."""
    calls: list[CallPlan] = [
        {**call, "args": dict(call.get("args") or {}),
         "approval": _copy_record(call.get("approval")),
         "suspension": _copy_record(call.get("suspension")),
         "resume_values": list(call.get("resume_values") or []),
         "metadata": dict(call.get("metadata") or {})}
        for call in plan["calls"]]
    return {**plan, "calls": calls}


def _answered(messages: Sequence[BaseMessage], plan: TurnPlan, ctx: GateContext) -> set[str]:
    """The turn's calls the conversation holds their answer for, as the ledger recorded it.
    A result a client wrote answers nothing here, whatever the door and whatever it says:
    the call still waits on what it waited on (a decision beneath a delegation, say), which
    still applies, and the model node tells the model what was written. It ended a
    delegation's wait through `update_state`, and the subagent's payment, approved since, was
    told "not run" (helper-100); so did the words of the tools node's refusal, which the
    ledger does not record, written by a client (helper-101)."""
    said = turn_results(messages, plan["ai_message_id"])
    calls = {c["tool_call_id"]: c for c in plan["calls"] if c["tool_call_id"] in said}
    outcomes = ctx.outcomes(c["key"] for c in calls.values()) if calls else {}
    return {call_id for call_id, results in said.items() if call_id not in calls or any(
        (outcome := outcomes.get(calls[call_id]["key"])) is not None
        and same_content(outcome.get("content"), m.content) for m in results)}


def _undecided(plan: TurnPlan, answered: set[str]) -> bool:
    return any(r["status"] == "pending" for r in waiting_records(plan, answered))


def make_gate_node(planner: Planner, extract: Extractor | None = None
                   ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `approval_gate` node (sync and async): dispatches the turn's calls, pauses for
    humans, takes and applies their decisions."""
    tools = planner.tools

    def approval_gate(state: AgentState, config: RunnableConfig) -> Command[GateTarget]:
        messages = list(state.get("messages") or [])
        ai = last_ai(messages)
        if (ai is not None and not ai.tool_calls and messages[-1] is ai
                and next(open_turns(messages), None) is None
                and not planner.ledger.pending_turns(thread_id_of(config),
                                                     planner.path_of(config))):
            # the model answered last, over no call without its result, and nothing of this
            # agent waits in the ledger (`pending_turns`: what is pending, approved and not
            # run, or marked waiting by a gate): nothing is left to do (a pass a stale trigger
            # started, a task a client sent to the tools node, say, called the model once
            # more). Words
            # over a waiting call are a client's, even where a result a client wrote closes
            # the turn: the model node drops or discards them (they ended the wait: helper-79,
            # helper-81), a decision its gate has not applied yet included (a decline: the run
            # ended on the words, and stayed ready: helper-85).
            return Command()
        if ai is None or not ai.tool_calls:
            return Command(goto="model")
        ctx = planner.context(state, config)
        update: dict[str, Any] = {}
        new_messages: list[BaseMessage] = []
        # The ledger's plan of this turn, which only gates write (the state only points to it).
        previous = ctx.turn(turn_key(ai, ctx.scope), approvals=True)
        if previous is None:
            # Only the model node plans a turn: this one it never planned here (a client's
            # `Command(update=...)` or `update_state`, a copied thread). The model node's
            # checks of what clients write drop it while an earlier turn waits (a client's
            # turn took the waiting call's place in the interrupt; helper-72), else plan it
            # if a model node wrote it (a copy), else answer it as not run.
            return Command(goto="model")
        plan = _copy_plan(previous)
        changed = False
        if state.get("reports"):  # a tool suspended (or a client says so): the ledger knows
            if len(ctx.path) > 1 and stopped_above(ctx.ledger, ctx.scope):
                # a new message stopped the delegation this subagent works for before its
                # gate asked what its tools asked: asked of nobody, it goes with the
                # delegation (helper-146: asked now, the run waited on it)
                ctx.ledger.settle(asked_unseen(ctx.ledger, ctx.thread_id, plan),
                                  thread_id=ctx.thread_id)
                return Command(update={"reports": {}}, goto="__end__")
            _suspended(plan, ctx, policy=planner.settings.approvers is not None)
            update["reports"] = {}
            changed = True
        answered = _answered(messages, plan, ctx) | {
            m.tool_call_id for m in new_messages if isinstance(m, ToolMessage)}
        step = _Pass(planner, ctx, plan, config, extract)
        if not changed and not _ready(plan, answered) and _undecided(plan, answered):
            # Decisions taken since the pause (by any door) apply first; else pause. A client's
            # resume is read all the same: one naming a call decided since (the CLI's approve,
            # then Agent Chat UI's reject) is refused and audited, never dropped unread while
            # the other decision runs (helper-80).
            def ask() -> Any:
                value = taken(lambda: interrupt(interrupt_value(
                    plan, answered, agent_path=ctx.path, ledger=ctx.ledger, rows=step.rows)))
                return {} if value is NO_ANSWER else value  # (another run's: no answer)

            given = _given(ask, "decisions")
            applied = given is None and step.apply_ledger(answered)
            # A new message's resume (the API's) is read after the decisions taken before it,
            # which run first: left unread, auto-resume never read the message for a tool
            # beside them, which asked again, the message held back (helper-100).
            said = _given(ask, "supersede") if applied else None
            if given is not None or said is not None or not applied:
                value = given if given is not None else said if said is not None else ask()
                step.take(value, answered, {m.id for m in messages if m.id},
                          decided=given is not None or said is not None)
            changed = True
        elif not changed and (value := resumed_answer()) is not None:
            # A client's answer that reached a gate that does not ask (a fork of a pause whose
            # calls ran since, or some of them: those are ready again): left unread, it was
            # dropped, or read by the run's next pause as that pause's answer. Taken as at a
            # pause. A new message (the server's thread protocol, helper-129 M2): what still
            # waits is declined (a call queued only, beside one ready, was approved later and
            # ran: helper-135), what is ready runs, and the message joins the conversation
            # after the turn's answers; refused, it fails the run, nothing changed (no pause
            # shows why). Decisions (helper-136 F1: a reject of the call still waiting, the
            # gate asking again, was lost, and an approval later paid): taken, or refused and
            # audited, the refusal in the plan's error, as at a pause.
            step.take(value, answered, {m.id for m in messages if m.id}, decided=True,
                      refusal_fails=message_input(value))
            changed = True
        if step.edited:
            edited = _edited_ai(ai, step.edited, plan)
            new_messages.append(edited)
            was, plan["turn_key"] = plan["turn_key"], turn_key(edited, ctx.scope)
            ctx.ledger.rekey_calls((c["key"] for c in plan["calls"]), plan["turn_key"],
                                   thread_id=ctx.thread_id, agent_path=ctx.path, was=was)
            # (the key of the message the state will hold)
        emit(step.events)
        moved = previous is None or plan != previous
        if moved:
            # the state says the turn moved on (its hook runs, a reader sees a new checkpoint)
            update["turn"] = pointer(plan)
        command = _route(plan, answered, update, new_messages, ctx, state, tools)
        if step.stopped or (command.goto == "model" and len(ctx.path) > 1
                            and stopped_above(ctx.ledger, ctx.scope)):
            # A new message stopped the delegation this subagent works for: its node answers
            # from the ledger, and nothing more runs here. (A gate that did not read the
            # message, beside the one that did, applied its declines and went on to its
            # model, which asked again: helper-134.)
            command = Command(update=command.update, goto="__end__")
        if moved:  # the plan as it now stands (a new one is recorded already), what the run
            # waits on and what may run: in one write, before the pass's Sends leave
            done = answered | {m.tool_call_id for m in new_messages if isinstance(m, ToolMessage)}
            ctx.journal.sync(previous, plan, done, save=previous is not None,
                             cleared=step.unwritten())
        elif cleared := step.unwritten():  # pragma: no cover - what a pass clears moves it
            ctx.ledger.clear(cleared)
        return command

    async def aapproval_gate(state: AgentState, config: RunnableConfig
                             ) -> Command[GateTarget]:
        return await offload(approval_gate, state, config)

    return approval_gate, aapproval_gate


def _given(ask: Callable[[], Any], field: str) -> Any:
    """The value this pass was resumed with (`ask`: the pass's `interrupt`, which returns
    it), if it carries `field` ("decisions": a client's; "supersede": a new message's), else
    None. LangGraph's scratchpad still shows a plain resume another pass took already (a
    later pass of the same run): `interrupt` then pauses, which here only means there is
    nothing to read."""
    if not resumed_with(field):
        return None
    try:
        return ask()
    except GraphInterrupt:
        return None


LOST = ("Tool call {name!r} was stopped: its turn is no longer in the conversation (the "
        "thread went back to an earlier checkpoint, or was rewritten). It will not run.")
"""(A call that suspended had started: what it did before it paused stands, so the answer
does not say it never ran.)"""
LOST_UNKNOWN = ("Tool call {name!r} was stopped: its turn is no longer in the conversation "
                "(the thread went back to an earlier checkpoint, or was rewritten), and the "
                "process that had started it died, so whether it took effect is unknown. It "
                "will not run again.")
ABANDONED = ("its turn is no longer in the conversation: the thread went back to an earlier "
             "checkpoint, or was rewritten")


def supersede_abandoned(messages: Sequence[BaseMessage], ctx: GateContext, *,
                        beneath: str = ABANDONED) -> None:
    """Decline, as superseded, what this agent waits on for a turn the conversation no longer
    holds as it was planned (time travel forked the thread before it; a client rewrote the
    message): the conversation will never carry its answer, so it must not stay decidable, or
    wait, in the inbox; and record a call approved (or resumed) there that has not run
    since as stopped, so that no replay of an older checkpoint runs it after the
    conversation went on without it (a model that reuses tool_call_ids may have been told
    that a call of the same id did not run). Only a top-level agent has one conversation per
    thread (a subagent's parallel delegations each have their own): it judges its subagents'
    waits too, by the delegation each works for (`_abandoned_beneath`), declined as
    `beneath` says."""
    if len(ctx.path) != 1:
        return
    waiting = ctx.pending_turns()
    if not waiting:
        return
    present = {turn_key(m) for m in messages if isinstance(m, AIMessage) and m.tool_calls}
    own = [w for w in waiting if w.agent_path in (None, ctx.agent)]
    lost = [w for w in own if w.turn_key is not None and w.turn_key not in present]
    deep = _abandoned_beneath([w for w in waiting if w not in own], present, ctx)
    for w in (*lost, *deep):
        if w.pending:
            path = w.agent_path.split("/") if w.agent_path else ctx.path
            supersede(ctx.ledger, {"id": w.approval_id, "kind": w.kind,
                                   "tool_name": w.tool_name, "agent_path": path,
                                   "tool_call_id": tool_call_id_of(ctx.ledger, w.call_key)},
                      comment=beneath if w in deep else ABANDONED, thread_id=ctx.thread_id,
                      run_id=ctx.run_id)
    lost += deep
    # (a decline stands: a replay of a branch that holds its turn still answers it so, and
    # nothing waits on it any more: helper-88)
    declined = [w.approval_id for w in lost if w.declined]
    if declined:
        ctx.ledger.mark_waiting(ctx.thread_id, ctx.path, run_id=ctx.run_id, scope=ctx.scope,
                                waiting={}, done=declined)
    stopped = {w.call_key: w.tool_name for w in lost
               if not w.pending and not w.declined and w.call_key is not None}
    ctx.ledger.settle({key: {"content": LOST.format(name=name), "status": "error"}
                       for key, name in stopped.items()}, thread_id=ctx.thread_id)
    # A call a process that died had claimed (it may have started): recorded too, else a
    # replay of the old branch took it over from the dead holder and ran it after the
    # conversation went on without it, a second time if it had run (helper-84). One a live
    # process runs records its own result, which a replay then gets.
    ctx.ledger.fence({key: {"content": LOST_UNKNOWN.format(name=name), "status": "error"}
                      for key, name in stopped.items()},
                     thread_id=ctx.thread_id, holder_dead=holder_is_dead)


def _abandoned_beneath(deep: list[PendingTurn], present: set[str], ctx: GateContext
                       ) -> list[PendingTurn]:
    """The subagents' waits nothing will answer: the delegation each works for (the scope of
    its turn's key), or one above it, has its outcome (a subagent that ended without
    answering), or was planned in a turn of this agent the conversation no longer holds.
    One read per level of delegation, and only where a subagent waits while its
    supervisor's conversation moves (time travel, a rewritten state)."""
    todo = {w: delegation_of_turn(w.turn_key) for w in deep}
    lost: list[PendingTurn] = []
    for _ in range(32):  # (deeper than any chain of delegations)
        links = ctx.ledger.call_links(key for key in todo.values() if key)
        above: dict[PendingTurn, str | None] = {}
        for w, key in todo.items():
            link = links.get(key) if key else None
            if link is None:
                continue  # placed under no call of this thread: left as it is
            if link.done or (link.agent_path == ctx.agent and link.turn_key not in present):
                lost.append(w)
            elif link.agent_path != ctx.agent:
                above[w] = delegation_of_turn(link.turn_key)
        if not above:
            break
        todo = above
    return lost


def pointer(plan: TurnPlan) -> TurnPointer:
    """What the graph state keeps of a turn's plan: where it is in the ledger (informative
    only: the gate reads the plan of the conversation's last turn from the ledger)."""
    return TurnPointer(ai_message_id=plan["ai_message_id"],
                       keys=[call["key"] for call in plan["calls"]])


def _suspended(plan: TurnPlan, ctx: GateContext, *, policy: bool) -> None:
    """Turn what the plan's calls asked (`Ledger.suspend`, written by the tools node that ran
    them) into pending requests, in plan and ledger. The state's reports only wake the gate:
    a client can write them, and they name nothing it asks."""
    asked = ctx.ledger.take_suspensions(
        (c["key"] for c in plan["calls"] if c["suspension"] is None and c["answer"] is None),
        ctx.thread_id)
    rows: list[ApprovalRow] = []
    audits: list[AuditRow] = []
    for call in plan["calls"]:
        payload = asked.get(call["key"])
        if payload is None:
            continue
        record = suspension_record(call, payload, agent_path=ctx.path, policy=policy)
        call["suspension"] = record
        rows.append(ApprovalRow(approval_id=record["id"], thread_id=ctx.thread_id,
                                kind="suspension", call_key=call["key"], agent_path=ctx.path,
                                tool_name=call["tool_name"], args_digest=record["args_digest"],
                                run_id=ctx.run_id, record=record))
        # requested, as an approval is: in the audit, and to webhooks (someone must answer)
        audits.append(audit_row("requested", record, thread_id=ctx.thread_id,
                                run_id=ctx.run_id, args_before=record["args"],
                                at=record["created_at"], dedupe=f"{record['id']}:requested"))
    if rows:
        ctx.ledger.register(approvals=rows, audits=audits,
                            turn=(ctx.thread_id, ctx.path, lambda _: plan))


def _ready(plan: TurnPlan, answered: set[str]) -> list[CallPlan]:
    return [
        c
        for c in plan["calls"]
        if c["tool_call_id"] not in answered
        and c["suspension"] is None
        and c["answer"] is None
        and (c["approval"] is None or c["approval"]["status"] == "approved")
    ]


def _answers(plan: TurnPlan, answered: set[str], ledger: Ledger, thread_id: str
             ) -> list[ToolMessage]:
    """ToolMessages for calls that will not run; the ledger records them as their outcome,
    and a call it settled before (a replay of a turn its conversation left, whose approval
    was superseded then) is answered as it was."""
    messages = [
        ToolMessage(c["answer"], tool_call_id=c["tool_call_id"], name=c["tool_name"],
                    status="success" if c.get("answer_status") == "success" else "error")
        for c in plan["calls"]
        if c["answer"] is not None and c["tool_call_id"] not in answered
    ]
    if not messages:
        return messages
    keys = {c["tool_call_id"]: c["key"] for c in plan["calls"]}
    ledger.settle({keys[m.tool_call_id]: {"content": m.content, "status": m.status}
                   for m in messages}, thread_id=thread_id)
    recorded = ledger.outcomes((keys[m.tool_call_id] for m in messages), thread_id=thread_id)
    return [m if not (was := recorded.get(keys[m.tool_call_id])) else m.model_copy(update={
        "content": was.get("content", m.content),
        "status": "success" if was.get("status") == "success" else "error"})
        for m in messages]


def _task(call: CallPlan, agent_path: list[str], options: RunOptions, then: str) -> Send:
    return Send(
        call["node"],
        ToolTask(
            tool_call_id=call["tool_call_id"],
            tool_name=call["tool_name"],
            key=call["key"],
            metadata=dict(call["metadata"]),
            agent_path=agent_path,
            options=options,
            then=then,
        ),
    )


def dispatch_now(plan: TurnPlan, answered: set[str], ctx: GateContext, state: AgentState,
                 tools: Mapping[str, BaseTool]) -> list[Send] | None:
    """The Sends for a just-planned turn whose calls may all run now (none waits on a human,
    none is answered already), sparing it a pass of the gate and a checkpoint; None when the
    gate has something to do. The tools node checks every call against the ledger either
    way."""
    if waiting_records(plan, answered) or any(
            c["answer"] is not None for c in plan["calls"] if c["tool_call_id"] not in answered):
        return None
    ready = _ready(plan, answered)
    return _sends(plan, answered, ready, ctx, state, tools) if ready else None


def _sends(plan: TurnPlan, answered: set[str], ready: list[CallPlan], ctx: GateContext,
           state: AgentState, tools: Mapping[str, BaseTool]) -> list[Send]:
    """One batch of ready calls: all that may run in parallel, else the first in order.

    A call whose tool this agent does not have (a deployment renamed or removed it since the
    turn was planned) stops the run here, nothing changed: the tools node would refuse it
    unanswered and the gate send it again, step after step, to the recursion limit. An
    agent that has the tool goes on with it; its approval stands."""
    parallel = [c for c in ready if not c["sequential"]]
    batch = parallel or ready[:1]
    missing = sorted({c["tool_name"] for c in batch if c["tool_name"] not in tools})
    if missing:
        msg = (f"tool calls of this thread ({', '.join(map(repr, missing))}) are ready to run, "
               f"but agent {'/'.join(ctx.path)!r} has no tool of that name (renamed or removed "
               "since they were planned?): the run stopped, nothing changed; continue it with "
               "an agent that has the tool")
        raise GraphkitError(msg)
    options = ctx.options(state)  # (the request's: a subagent's delegation passes them on)
    then = _then(plan, answered, batch, tools, ctx)
    return [_task(c, ctx.path, options, then) for c in batch]


def _route(
    plan: TurnPlan,
    answered: set[str],
    update: dict[str, Any],
    new_messages: list[BaseMessage],
    ctx: GateContext,
    state: AgentState,
    tools: Mapping[str, BaseTool],
) -> Command[GateTarget]:
    answers = _answers(plan, answered, ctx.ledger, ctx.thread_id)
    new_messages.extend(answers)
    answered = answered | {m.tool_call_id for m in answers}
    ready = _ready(plan, answered)
    goto: GateTarget | list[Send]
    if ready:
        goto = _sends(plan, answered, ready, ctx, state, tools)
    elif waiting_records(plan, answered):
        goto = "approval_gate"  # checkpoint the answers, then pause on the next pass
    else:
        queued = _to_deliver(plan, state, ctx)
        if queued:
            new_messages.extend(queued)
            ctx.deliver(str(m.id) for m in queued)
        goto = "model"
    if new_messages:
        update["messages"] = new_messages
    return Command(update=update, goto=goto)


def _to_deliver(plan: TurnPlan, state: AgentState, ctx: GateContext) -> list[BaseMessage]:
    """The user's messages queued (in the ledger) for after this turn, in the order they
    came; user messages only, each once, none the conversation has already."""
    present = {m.id for m in state.get("messages") or []}
    kept = [m for ai_id, m in ctx.queue(present)
            if ai_id == plan["ai_message_id"] and queued_id(m) not in present]
    delivered: list[BaseMessage] = []
    for entry in kept:
        try:
            (message,) = parsed_messages([entry], what="a queued message")
        except (GraphkitError, ValueError):
            continue
        if isinstance(message, HumanMessage) and message.id and message.id not in present:
            delivered.append(message)
            present.add(message.id)
    return delivered


def _then(plan: TurnPlan, answered: set[str], batch: list[CallPlan],
          tools: Mapping[str, BaseTool], ctx: GateContext) -> str:
    """Send results straight to the model when this batch settles the turn, sparing the gate a
    superstep; back to the gate when anything else waits, or a call of a batch of several could
    pause (a subagent's decision must come back through the gate; a suspended tool's task goes
    there itself, which in a batch of several would leave its siblings' tasks going to the
    model, and LangGraph would run both)."""
    in_batch = {c["tool_call_id"] for c in batch}
    rest = [c for c in plan["calls"]
            if c["tool_call_id"] not in answered and c["tool_call_id"] not in in_batch]
    if rest or any(q.ai_message_id == plan["ai_message_id"] and q.delivered_at in (None, ctx.step)
                   for q in ctx.queue_rows()):
        return "approval_gate"
    for call in batch:
        tool = tools.get(call["tool_name"])
        if call["node"] != "tools":  # a delegation can pause, and the plan change meanwhile
            return "approval_gate"
        if isinstance(tool, GraphkitTool) and tool.context_param is not None and len(batch) > 1:
            return "approval_gate"
    return "model"
