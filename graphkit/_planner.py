"""A node pass's view of the ledger (`GateContext`) and the reading of a model turn into a
plan (`Planner`): what the model node, the gate and a reply to a suspension (`_reply`) share.

A pass reads what it needs of the ledger once (the turn's plan with the agent's queue, what it
waits on, the outcomes and approval rows of its calls: one statement) and reads again only
after its own writes. A turn is planned once, where the model produced it: every predicate's
verdict is then recorded in the ledger and checkpointed with the AI message itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, cast

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from graphkit._approvals import plan_turn, telemetry
from graphkit._context import (
    CONVERSATION_KEY,
    agent_path_of,
    delegation_of,
    durability_of,
    emit,
    never_written,
    ran_past,
    scope_of,
    step_of,
    thread_id_of,
)
from graphkit._journal import GateJournal
from graphkit._ledger import ApprovalRow, Ledger, PendingTurn, Queued, queued_id
from graphkit._secrets import masked_ai
from graphkit._settings import GateSettings
from graphkit._state import DELEGATED_OPTIONS, AgentState, RunOptions, TurnPlan, turn_key
from graphkit._validate import args_json_schema, validation_runs_code
from graphkit.tools import GraphkitTool

__all__ = ["GateContext", "Planner"]


_Found = TypeVar("_Found")


def _read_through(known: Mapping[str, _Found], keys: Iterable[str],
                  read: Callable[[list[str]], Mapping[str, _Found]]) -> dict[str, _Found]:
    """`read(keys)`, from what a pass read already (`known`), reading only the keys it
    lacks."""
    wanted = list(dict.fromkeys(keys))
    found = {k: known[k] for k in wanted if k in known}
    if missing := [k for k in wanted if k not in known]:
        found.update(read(missing))
    return found

@dataclass(frozen=True, slots=True, kw_only=True)
class GateContext:
    """Where one pass of a node runs: its agent path, thread and run, journal and ledger."""

    path: list[str]
    thread_id: str
    journal: GateJournal
    ledger: Ledger
    scope: str = ""
    """For a subagent, the supervisor's call it works for (`turn_key`'s scope)."""
    durability: str = "async"
    """The run's LangGraph durability (`durability_of`)."""
    step: str | None = None
    """The checkpoint the pass's step runs from (`step_of`)."""
    conversation: str | None = None
    """The thread's conversation (`AgentState.conversation`; a subagent's: its top-level
    agent's, from the delegation), or a new one for a thread that has none yet."""
    new_conversation: bool = False
    """Whether `conversation` is new: the pass that plans writes it to the state."""
    never_written: Callable[[str], bool] = field(
        default=lambda _checkpoint_id: False, repr=False, compare=False)
    """Whether a checkpoint of this graph and thread is missing (`never_written`)."""
    ran_past: Callable[[str], bool] = field(
        default=lambda _checkpoint_id: False, repr=False, compare=False)
    """Whether a step run from a checkpoint of this graph and thread wrote its own
    (`ran_past`)."""
    _written: dict[str, bool] = field(default_factory=dict, init=False, repr=False,
                                      compare=False)
    _queue: list[list[Queued]] = field(
        default_factory=list, init=False, repr=False, compare=False)
    """The agent's message queue as this pass last read it (empty: not read since it changed)."""
    _pending: list[list[PendingTurn]] = field(
        default_factory=list, init=False, repr=False, compare=False)
    """What a top-level agent waits on, read with the turn (empty: not read, or taken)."""
    _outcomes: list[dict[str, dict[str, Any] | None]] = field(
        default_factory=list, init=False, repr=False, compare=False)
    """The outcomes of the turn's calls, read with it when asked (empty: not read)."""
    _approvals: list[dict[str, ApprovalRow]] = field(
        default_factory=list, init=False, repr=False, compare=False)
    """The approval rows of the turn's calls, read with it when asked (empty: not read, or
    taken, or out of date)."""

    @property
    def run_id(self) -> str | None:
        """The thread's current run, which the pass files what it records under
        (`GateJournal.run_id`)."""
        return self.journal.run_id

    def options(self, state: AgentState) -> RunOptions:
        """The request options the pass obeys: as the ledger recorded them with the thread's
        current run (`GateJournal.run_options`; a subagent's, those a delegation passes
        down), never the state's copy, which a client may write: graph input without a
        message, `update_state` or a `Command`'s update turned a request's
        `require_tool_approval` off while its call waited, and the next call ran unasked
        (helper-122). The state's may only ask for more: approval of every call, fewer
        steps, or that a message answer a suspended tool (`auto_resume_suspended_tools`,
        whose sender the approvers policy judges as any resume's). The state's alone for a
        run the ledger recorded none for (a LangGraph server's, whose client gave them; a
        run recorded before runs kept them)."""
        given: RunOptions = state.get("options") or {}
        recorded = self.journal.run_options
        if recorded is None:
            return given
        obeyed = {k: v for k, v in recorded.items()
                  if len(self.path) == 1 or k in DELEGATED_OPTIONS}
        obeyed["run_id"] = self.journal.run_id  # (a run that took its options from another)
        for asked in ("require_tool_approval", "auto_resume_suspended_tools"):
            if given.get(asked) is True:
                obeyed[asked] = True
        steps, most = given.get("max_steps"), obeyed.get("max_steps")
        if isinstance(steps, int) and steps > 0 and (not isinstance(most, int) or steps < most):
            obeyed["max_steps"] = steps
        return cast(RunOptions, obeyed)

    @property
    def agent(self) -> str:
        """The agent's path as one key (the ledger's message queue is kept per agent)."""
        return "/".join(self.path)

    def turn(self, key: str | None, *, outcomes: bool = False, approvals: bool = False
             ) -> TurnPlan | None:
        """The ledger's plan of the turn of `key` (None: no turn, no plan), read with the
        agent's message queue, for a top-level agent what it waits on, and as asked the
        outcomes and the approval rows of the turn's calls (one statement for them all)."""
        found = self.ledger.turn_and_queue(
            self.thread_id, self.path, key, self.agent, pending=len(self.path) == 1,
            outcomes=outcomes, approvals=approvals,
            run_of=None if self.journal.run_known else self.path[0])
        if found.runs is not None:
            self.journal.known_run(found.runs)
        self._queue[:] = [found.queue]
        self._pending[:] = [found.pending] if found.pending is not None else []
        self._outcomes[:] = [found.outcomes] if found.outcomes is not None else []
        self._approvals[:] = [found.approvals] if found.approvals is not None else []
        return found.plan

    def approvals(self, approval_ids: Iterable[str]) -> dict[str, ApprovalRow]:
        """`Ledger.approvals` of these ids, as `turn` read them with its plan, once (a later
        call, or an id it did not find, is read now): the gate's first look at what waits
        reads nothing more; a look after the pass changed a row reads it again."""
        return _read_through(self._approvals.pop() if self._approvals else {}, approval_ids,
                             self.ledger.approvals)

    def forget_approvals(self) -> None:
        """The pass changed approval rows: what `turn` read of them is out of date."""
        self._approvals.clear()

    def outcomes(self, call_keys: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        """`Ledger.outcomes` of these calls of this thread, as `turn` read them with its plan
        (a call it did not find, which a turn's plan and its calls written together never
        leave out, is read now)."""
        return _read_through(self._outcomes[0] if self._outcomes else {}, call_keys,
                             lambda keys: self.ledger.outcomes(keys, thread_id=self.thread_id))

    def pending_turns(self) -> list[PendingTurn]:
        """`Ledger.pending_turns` of this agent, as `turn` read it, once (else read now). A
        read older than this pass's own writes is safe for its one use, `supersede_abandoned`:
        what the pass declined since is declined once (a decline needs a pending approval),
        and what it filed since belongs to the turn at hand, which the conversation holds."""
        if self._pending:
            return self._pending.pop()
        return self.ledger.pending_turns(self.thread_id, self.path)

    def queue(self, present: Collection[str | None] = ()) -> list[tuple[str, dict[str, Any]]]:
        """(turn's AI message id, serialised message) of what waits in the agent's queue to be
        appended to the conversation: not yet appended, or appended by this very step (a
        replay of it, after a crash before its checkpoint was written), or, missing from the
        conversation (`present`: its message ids), by a step whose checkpoint was never
        written (under "async" durability the run may replay from an earlier one)."""
        return [(q.ai_message_id, q.message) for q in self.queue_rows()
                if q.delivered_at is None or self._replays(q.delivered_at)
                or (queued_id(q.message) not in present and not self.written(q.delivered_at))]

    def _replays(self, delivered_at: str) -> bool:
        """Whether this step is the one that appended a queued message, run again after a
        crash before its checkpoint was written: not where that step wrote it (this step is
        then another branch's, a fork of the same checkpoint, whose conversation never had
        the message: the first fork's message joined the second's)."""
        return delivered_at == self.step and not self.ran_past(delivered_at)

    def written(self, checkpoint_id: str) -> bool:
        """Whether the saver holds that checkpoint of this graph and thread (read once per
        pass; only for a queued message delivered by another step)."""
        if checkpoint_id not in self._written:
            self._written[checkpoint_id] = not self.never_written(checkpoint_id)
        return self._written[checkpoint_id]

    def queue_rows(self) -> list[Queued]:
        """The agent's whole queue, read once per pass; this pass's own `enqueue`, `deliver`
        and `dequeue` have it read again."""
        if not self._queue:
            self._queue.append(self.ledger.queue_rows(self.thread_id, self.agent))
        return self._queue[0]

    def deliver(self, message_ids: Iterable[str]) -> None:
        """These queued messages are appended to the conversation by this step: they stay
        queued, for a replay of the step only, until a written checkpoint holds them (the
        model node forgets them then). A graph without checkpoints replays nothing, nor does a
        run under "exit" durability (a crash gives up the whole run)."""
        if self.step is None or self.durability == "exit":
            self.dequeue(message_ids)
            return
        self.ledger.deliver(self.thread_id, self.agent, message_ids, self.step)
        self._queue.clear()

    def enqueue(self, ai_message_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        self.ledger.enqueue(self.thread_id, self.agent, ai_message_id, messages)
        self._queue.clear()

    def dequeue(self, message_ids: Iterable[str]) -> None:
        self.ledger.dequeue(self.thread_id, self.agent, message_ids)
        self._queue.clear()


COPIED_ARGS = {"_graphkit": "not stored: they held a secret of another call of this reply"}
"""The arguments the conversation keeps of a call refused for holding another call's secret
(`_approvals.COPIED_SECRET`)."""


class Planner:
    """The gate's reading of a model turn, done once per turn: which calls run, which wait.

    The model node calls it on the turn it just produced, so the plan (and every predicate's
    verdict) is checkpointed with the AI message itself and recorded in the ledger; the gate
    calls it for a turn that reached the state another way (a client's update).
    """

    def __init__(self, tools: Mapping[str, BaseTool], name: str, settings: GateSettings,
                 ledger: Ledger, *, nested: bool = False) -> None:
        self.tools = tools
        self.name = name
        self.nested = nested
        """A subagent's graph: its supervisor's delegation node gives it its agent path. A
        top-level graph ignores any path in its config (a server client could set one)."""
        self.settings = settings
        self.ledger = ledger
        self.schemas = {tool_name: {"schema": args_json_schema(tool),
                                    "resume_schema": _resume(tool),
                                    "validates_in_code": validation_runs_code(tool),
                                    "policy": settings.approvers is not None}
                        for tool_name, tool in tools.items()}

    def path_of(self, config: RunnableConfig) -> list[str]:
        """This agent's path in the delegation chain."""
        return agent_path_of(config, self.name) if self.nested else [self.name]

    def context(self, state: AgentState, config: RunnableConfig, *,
                like: GateContext | None = None) -> GateContext:
        """The context of a pass (`like`: another context of the same node's pass, whose read
        of the thread's current run stands: no run starts on the thread while this one holds
        its lease)."""
        thread_id = thread_id_of(config)
        path = self.path_of(config)
        journal = GateJournal(self.ledger, thread_id=thread_id, schemas=self.schemas,
                              scope=scope_of(config), agent_path=path)
        if like is not None and like.journal.run_known:
            journal.known_run([(run, like.journal.run_options)]
                              if (run := like.journal.run_id) is not None else [])
        if self.nested:  # (the delegation node's word; a top-level graph ignores the config's)
            found = (config.get("configurable") or {}).get(CONVERSATION_KEY)
            conversation = found if isinstance(found, str) else None
        else:
            conversation = like.conversation if like is not None else state.get("conversation")
        new = not self.nested and not conversation
        return GateContext(path=path, thread_id=thread_id, journal=journal, ledger=self.ledger,
                           scope=delegation_of(config) if self.nested else "",
                           durability=durability_of(config), step=step_of(config),
                           never_written=never_written(config), ran_past=ran_past(config),
                           conversation=f"conv_{uuid.uuid4().hex}" if new else conversation,
                           new_conversation=new or bool(like and like.new_conversation))

    def plan(self, ai: AIMessage, state: AgentState, ctx: GateContext, *,
             stored: AIMessage | None = None) -> tuple[TurnPlan, list[ToolMessage], AIMessage]:
        """Plan the turn of `ai`, and the message the state stores for it (`stored`, or `ai`:
        its secrets masked, `_secrets.masked_ai`); the plan is filed under that message."""
        names = [c["name"] for c in ai.tool_calls if c["name"] in self.tools]
        # (a conversation new in this pass was given no grant: the state's channel, which no
        # graph input writes, is what a grant was given in)
        grants = (self.ledger.live_grants(ctx.thread_id, ctx.path, names,
                                          conversation=ctx.conversation,
                                          ttl=self.settings.grant_ttl)
                  if names and ctx.conversation and not ctx.new_conversation else {})
        kept = stored if stored is not None else ai
        planned = plan_turn(ai, self.tools, self.settings, ctx.options(state),
                            agent_path=ctx.path, thread_id=ctx.thread_id, run_id=ctx.run_id,
                            grants=grants, plan_key=turn_key(kept, ctx.scope),
                            conversation=ctx.conversation)
        secrets = {c["tool_call_id"]: c["secrets"] for c in planned.plan["calls"]
                   if c.get("secrets")}
        for call_id, paths in planned.written.items():  # as written, refused calls' too
            known = secrets.get(call_id, [])
            if extra := [p for p in paths if p not in known]:
                secrets[call_id] = [*known, *extra]
        if (secrets or planned.copied) and stored is not None:
            kept = masked_ai(kept, secrets)
            if planned.copied:  # (a key may hold the secret too: none of them is kept)
                kept = kept.model_copy(update={"tool_calls": [
                    {**c, "args": COPIED_ARGS} if str(c.get("id")) in planned.copied else c
                    for c in kept.tool_calls]})
            key = planned.plan["turn_key"] = turn_key(kept, ctx.scope)
            planned.calls = [replace(c, turn_key=key) for c in planned.calls]

        def as_recorded(revoked: set[str]) -> TurnPlan:
            for call in planned.plan["calls"]:
                record = call["approval"]
                if record is not None and record["id"] in revoked:  # the grant died meanwhile
                    record["status"] = "pending"
                    record["decided_by"] = record["comment"] = record["decided_at"] = None
                    call["metadata"].pop("approval.granted", None)
            return planned.plan

        self.ledger.register(calls=planned.calls, approvals=planned.approvals,
                             audits=planned.audits, turn=(ctx.thread_id, ctx.path, as_recorded))
        emit([telemetry(c["approval"], "pending") for c in planned.plan["calls"]
              if c["approval"] is not None and c["approval"]["status"] == "pending"])
        return planned.plan, planned.errors, kept


def _resume(tool: BaseTool) -> dict[str, Any] | None:
    """The JSON schema of a suspending tool's resume data, for the web inbox's form."""
    schema = tool.resume_schema if isinstance(tool, GraphkitTool) else None
    return schema.model_json_schema() if schema is not None else None
