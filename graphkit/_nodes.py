"""The agent graph's `model` and `tools` nodes (the `approval_gate` is `graphkit._gate`).

Each tool call is its own `Send` task. LangGraph then keeps a finished call's writes when a
sibling pauses, gives each paused task its own interrupt id, and runs independent calls of a
superstep concurrently; `ToolNode` running several interrupting calls in one task does not.

The tools node trusts no task it is sent: a call runs only when the ledger says it needs no
approval, or holds an approval for exactly the arguments in the task, and only the first
process to claim its execution runs it (a replay gets the recorded result).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    messages_to_dict,
)
from langchain_core.runnables import RunnableBinding, RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.errors import GraphBubbleUp
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command

from graphkit._approvals import Extractor, last_turn_key
from graphkit._context import PATH_KEY, thread_id_of
from graphkit._gate import (
    GateContext,
    Planner,
    dispatch_now,
    pointer,
    supersede_abandoned,
    supersede_unanswered,
)
from graphkit._ledger import (
    DONE,
    ApprovalRow,
    CallRow,
    Ledger,
    RunBusyError,
    _schema,
    queued_id,
)
from graphkit._limits import check_value
from graphkit._offload import apart, offload
from graphkit._owner import holder_is_dead, new_owner
from graphkit._reply import (
    answer_reply,
    left_queued,
    reply_to_suspension,
    turn_span,
)
from graphkit._review import audit_row, supersede
from graphkit._secrets import scrub_exception, scrubbed, secret_values, still_shows
from graphkit._state import AgentState, ToolTask, TurnPlan, turn_key
from graphkit._validate import declares_secrets, secret_paths_of
from graphkit.errors import WithheldToolError
from graphkit.tools import (
    CONTEXT_KEY,
    STARTED_KEY,
    DelegationTool,
    GraphkitTool,
    ToolContext,
    ToolSuspended,
)
from graphkit.types import args_digest

__all__ = ["make_model_node", "make_tools_nodes", "model_steps", "result_command",
           "runs_as_recorded"]

ModelTarget = Literal["approval_gate", "__end__"]
ToolTarget = Literal["approval_gate", "model"]

REFUSED = "Refused: tool call {name!r} did not run: {why}."
NOT_PLANNED = "it was not planned by this agent's approval gate"
ELSEWHERE = "it was planned for another thread, agent, tool or call"
OTHER_ARGS = "its arguments are not the ones planned"
NO_APPROVAL = "it has no approval"
NOT_APPROVED_ARGS = "its arguments are not the ones that were approved"
RUNNING = "it is already running in another process"
REASONS = (NOT_PLANNED, ELSEWHERE, OTHER_ARGS, NO_APPROVAL, NOT_APPROVED_ARGS, RUNNING)
"""Why the tools node refuses a task. Its refusals are the only results the ledger does not
record (the call stays as it was), so the model node knows them by their exact words."""
FAILED = ("Tool call {name!r} failed ({error}); an approved call is attempted once, so it "
          "will not run again unless the model calls it anew.")
INTERRUPTED = ("Tool call {name!r} was interrupted while it ran (the run was cancelled); its "
               "outcome is unknown, and it will not run again unless the model calls it anew.")
ORPHAN = ("A tool result written from outside the agent, for no call of the current turn, "
          "was discarded: nothing ran.")
DISCARDED = ("Tool call {name!r} did not run: a result for it was written from outside the "
             "agent (not by its tools node) and was discarded.")
DROPPED = ("{count} message(s) written from outside the agent while this call waited, none of "
           "them a user's, were dropped: only a user message ends a wait.")

def _tool_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=64, thread_name_prefix="graphkit-tool")


_SYNC_TOOL_POOL = _tool_pool()
"""Sync tools called from an async run. The event loop's default pool has cpu+4 threads,
which would run eight 50 ms tools in two waves on a 2-core machine."""


def _forked() -> None:
    """A forked child has none of its parent's pool threads, which the pool would count as
    idle and wait on for ever: it gets a pool of its own."""
    global _SYNC_TOOL_POOL
    _SYNC_TOOL_POOL = _tool_pool()


os.register_at_fork(after_in_child=_forked)


def _is_sync(tool: BaseTool) -> bool:
    if isinstance(tool, StructuredTool):
        return tool.coroutine is None
    return type(tool)._arun is BaseTool._arun


@contextlib.contextmanager
def observed(config: RunnableConfig, *, secret: bool) -> Iterator[RunnableConfig]:
    """`config` for a call, without LangChain's callbacks when the call sees a secret (a
    model that may write one, a tool that takes one): a callback gets the call's raw input
    and output, so it carried the secret to `astream_events`, to a LangGraph server's
    `events` stream (any client that may read the thread) and to a tracer (helper-54).
    Tracing is off there too: it would start a trace of its own; and so are the handlers a
    context adds to every call (`collect_runs`, LangChain's configure hooks; helper-55). The
    nodes' own events show the conversation as it is kept, masked."""
    if not secret:
        yield config
        return
    from langchain_core.tracers import context
    from langsmith.run_helpers import tracing_context

    hooks = [context.tracing_v2_callback_var,
             *(hook[0] for hook in getattr(context, "_configure_hooks", ()))]
    tokens = [(var, var.set(None)) for var in hooks]
    try:
        with tracing_context(enabled=False):
            yield {**config, "callbacks": []}  # (None would inherit the node's)
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def model_steps(messages: Sequence[BaseMessage]) -> int:
    """Model replies since the last user message: the steps of the current run."""
    steps = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        steps += isinstance(message, AIMessage)
    return steps


_Reply = TypeVar("_Reply", bound=BaseMessage)


def _unique_id(response: _Reply, messages: Sequence[BaseMessage]) -> _Reply:
    """Some OpenAI-compatible servers reuse one completion id: a reply must not replace an
    earlier message that happens to share its id."""
    if response.id is None or any(m.id == response.id for m in messages):
        return response.model_copy(update={"id": f"run-{uuid.uuid4()}"})
    return response


def _calls_tools(reply: BaseMessage) -> TypeGuard[AIMessage]:
    """Whether a model reply starts a turn of tool calls (else it ends the run)."""
    return isinstance(reply, AIMessage) and bool(reply.tool_calls)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True,
                                                                      default=str)


def _orphans(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    """Tool results after the last model reply that answer none of its calls: written by a
    client (after a turn that is over), never by graphkit."""
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if isinstance(messages[i], AIMessage)), None)
    if last is None:
        return [m for m in messages if isinstance(m, ToolMessage)]
    asked = {c.get("id") for c in getattr(messages[last], "tool_calls", None) or []}
    return [m for m in messages[last + 1:]
            if isinstance(m, ToolMessage) and m.tool_call_id not in asked]


def _discard_forged(state: AgentState, plan: TurnPlan | None, ctx: GateContext
                    ) -> list[ToolMessage]:
    """Tool results the ledger did not record, replaced in place by a notice.

    A client can append a ToolMessage for a call that never ran (Agent Chat UI does, when its
    user types instead of deciding), or for a call of a turn that is over: the model must not
    be told that it ran. What waited for such a call is declined as superseded.
    """
    messages = list(state.get("messages") or [])
    fixes = [ToolMessage(ORPHAN, tool_call_id=m.tool_call_id, id=m.id, name=m.name,
                         status="error") for m in _orphans(messages)]
    if fixes:
        ctx.ledger.audit([audit_row(
            "refused", {"tool_name": m.name, "tool_call_id": m.tool_call_id},
            thread_id=ctx.thread_id, run_id=ctx.run_id, detail=ORPHAN) for m in fixes])
    if not plan:
        return fixes
    calls = {c["tool_call_id"]: c for c in plan["calls"]}
    answers: list[tuple[ToolMessage, Any]] = []
    seen = False
    for message in messages:
        if not seen:
            seen = message.id == plan["ai_message_id"]
        elif isinstance(message, ToolMessage) and message.tool_call_id in calls:
            answers.append((message, calls[message.tool_call_id]))
        elif isinstance(message, AIMessage):
            break
    if not answers:
        return fixes
    outcomes = ctx.outcomes(call["key"] for _, call in answers)
    for message, call in answers:
        outcome = outcomes.get(call["key"])
        if outcome is not None and _same(outcome.get("content"), message.content):
            continue
        if message.content in {REFUSED.format(name=call["tool_name"], why=w) for w in REASONS}:
            continue  # the tools node's own refusal: the call did not run, as it says
        text = DISCARDED.format(name=call["tool_name"])
        for record in (call["approval"], call["suspension"]):
            if record is not None:
                supersede(ctx.ledger, record, comment="a client wrote a result for the call",
                          thread_id=ctx.thread_id, run_id=ctx.run_id, detail=text)
        ctx.ledger.audit([audit_row(
            "refused", {"tool_name": call["tool_name"], "tool_call_id": call["tool_call_id"]},
            thread_id=ctx.thread_id, run_id=ctx.run_id, detail=text)])
        ctx.ledger.settle({call["key"]: {"content": text, "status": "error"}},
                          thread_id=ctx.thread_id)
        fixes.append(ToolMessage(text, tool_call_id=message.tool_call_id, id=message.id,
                                 name=call["tool_name"], status="error"))
    return fixes


UNREAD = "[graphkit: not stored: arguments that could not be read, for a tool that takes secrets]"


def _storable(response: AIMessage, secret_tools: Collection[str] = ()) -> AIMessage:
    """The model's reply as it can be checkpointed: a call whose arguments are too deep or too
    large to store keeps a placeholder (the gate answers it with an error the model sees), and
    so does a call it could not parse to a tool that takes secrets (which part of its text is
    the secret cannot be told; helper-52)."""
    unsafe = set()
    for call in response.tool_calls:
        try:
            check_value(call.get("args"), what="arguments", error=ValueError)
        except ValueError:
            unsafe.add(call.get("id"))
    unread = [c for c in response.invalid_tool_calls if c.get("name") in secret_tools]
    if not unsafe and not unread:
        return response
    calls = [{**c, "args": {"_graphkit": "arguments too deep or too large; not stored"}}
             if c.get("id") in unsafe else c for c in response.tool_calls]
    invalid = [{**c, "args": UNREAD} if c.get("name") in secret_tools else c
               for c in response.invalid_tool_calls]
    return response.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def _with_fixes(messages: list[AnyMessage], fixes: list[ToolMessage]) -> list[AnyMessage]:
    by_id = {m.id: m for m in fixes}
    return [by_id.get(m.id, m) for m in messages]


def _stopped_turn(messages: list[AnyMessage], opened: list[tuple[int, int]], ctx: GateContext
                  ) -> tuple[list[AnyMessage], list[BaseMessage]]:
    """A new user message after a turn whose run stopped before all its calls had a result
    (`on_state_change`, a crash; input from any client): the calls are superseded and their
    answers go right after the turn, before the newer messages. Returns the conversation as the
    model reads it and the writes that make the state say the same."""
    # The conversation's last turn with calls unanswered (`opened`, from `_open_turns`; a later
    # turn a client wrote with its results does not hide it). The ledger's plan of it, if a
    # gate planned it, says what became of each call; else the sweep answers them all.
    if not opened:
        return messages, []
    turn, later = opened[0]
    last = str(messages[turn].id)
    newer = messages[later:]
    if not any(_from_user(m) for m in newer) or any(m.id is None for m in newer):
        return messages, []
    answers = supersede_unanswered(last, messages, ctx.ledger, thread_id=ctx.thread_id,
                                   agent_path=ctx.path, run_id=ctx.run_id, scope=ctx.scope)
    if not answers:
        return messages, []
    # the newer messages move after the answers: removed, then written again
    writes: list[BaseMessage] = [*(RemoveMessage(id=str(m.id)) for m in newer), *answers,
                                 *newer]
    return [*messages[:later], *answers, *newer], writes


def _forgettable(state: AgentState, ctx: GateContext) -> list[str]:
    """The queued messages the queue may forget, in a run that writes each step's checkpoint
    and writes before the next step starts ("sync" durability, graphkit's own runs): those the
    state this node reads holds (it is written), and those a step whose checkpoint is written
    delivered and the conversation lacks now (deleted since, or a fork from before it: only
    a replay of that very step would append them again). Under "async" a step's checkpoint
    may be written before the writes it holds (the messages channel is kept as deltas), so
    nothing the node reads proves a message written: its row stays, marked delivered (and
    read without a parse); under "exit" rows go as they are delivered."""
    if ctx.durability != "sync":
        return []
    present = {m.id for m in state.get("messages") or []}
    forget: list[str] = []
    for q in ctx.queue_rows():
        found = queued_id(q.message)
        if found is not None and (found in present or (
                q.delivered_at not in (None, ctx.step) and ctx.written(q.delivered_at))):
            forget.append(found)
    return forget


def _left_to_the_gate(plan: TurnPlan | None, messages: list[AnyMessage]) -> bool:
    """The conversation ends with a planned turn some of whose calls have no result, and no
    user message came after it: the gate still has to run, answer or ask about them."""
    span = turn_span(messages, plan["ai_message_id"]) if plan is not None else None
    if plan is None or span is None or span[1] != len(messages):
        return False
    answered = {m.tool_call_id for m in messages[span[0] + 1:] if isinstance(m, ToolMessage)}
    return any(c["tool_call_id"] not in answered for c in plan["calls"])


def _open_turns(messages: list[AnyMessage]) -> Iterator[tuple[int, int]]:
    """Where the model turns some of whose calls have no result are (`turn_span`), the last
    first: one pass back over the conversation, each turn's results being the tool messages
    right after it."""
    answered: set[Any] = set()
    end = len(messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
            continue
        if isinstance(message, AIMessage) and message.tool_calls and message.id and any(
                c.get("id") not in answered for c in message.tool_calls):
            yield index, end
        answered = set()
        end = index


def _from_user(message: AnyMessage) -> bool:
    """A user's message, however it came: a `ChatMessage` with the user's role is one too."""
    return isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and message.role in ("user", "human"))


def _written_while_waiting(messages: list[AnyMessage], opened: list[tuple[int, int]],
                           ctx: GateContext) -> tuple[TurnPlan, list[AnyMessage]] | None:
    """The last turn this agent's gate planned that has calls without a result, and what came
    after it, when something did and none of it is a user's message: a client's (graph input
    open to any client of a LangGraph server's thread; helper-54). It must not end the wait:
    the model would answer over the call without its result, or read a result no tool gave,
    and the approval would wait with no run to apply it."""
    for turn, end in opened:
        newer = messages[end:]
        if any(_from_user(m) for m in newer):
            return None  # a user's message: it supersedes the turn (`_stopped_turn`)
        plan = ctx.turn(turn_key(messages[turn], ctx.scope))  # (else a client's turn too)
        if plan is not None:
            return (plan, newer) if newer else None
    return None


def _model_calls(model: BaseChatModel, tools: Sequence[BaseTool]
                 ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """`invoke` and `ainvoke` of the model with the tools bound. A plain `RunnableBinding`
    is called through: it would only re-merge an empty config into each turn's (the same
    call, the same traced run)."""
    bound = model.bind_tools(list(tools)) if tools else model
    if (isinstance(bound, RunnableBinding) and type(bound).invoke is RunnableBinding.invoke
            and type(bound).ainvoke is RunnableBinding.ainvoke
            and not bound.config and not bound.config_factories):
        target, kwargs = bound.bound, dict(bound.kwargs)

        def invoke(messages: list[BaseMessage], config: RunnableConfig) -> Any:
            return target.invoke(messages, config, **kwargs)

        async def ainvoke(messages: list[BaseMessage], config: RunnableConfig) -> Any:
            return await target.ainvoke(messages, config, **kwargs)

        return invoke, ainvoke
    return bound.invoke, bound.ainvoke


def make_model_node(
    model: BaseChatModel, tools: Sequence[BaseTool], instructions: str, planner: Planner,
    extract: Extractor | None = None,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `model` node (sync and async): one model turn, or the end of the run (or, for a
    reply that came as graph input while a tool is suspended, the gate: `graphkit._reply`)."""
    invoke, ainvoke = _model_calls(model, tools)
    system = [SystemMessage(instructions)] if instructions else []
    # A model that may write a secret argument is not streamed token by token (LangGraph's
    # "messages" mode would show the secret as written): its reply reaches that stream as the
    # conversation keeps it, the secret masked.
    secret_tools = {t.name for t in tools if declares_secrets(t)}
    quiet = bool(secret_tools)

    def route(state: AgentState, config: RunnableConfig
              ) -> tuple[list[BaseMessage], bool, list[BaseMessage], Command[ModelTarget] | None,
                         Callable[[], None] | None, GateContext]:
        """The conversation the model reads, whether the run used its steps, the writes that
        fix the state, the command to send instead of a model turn (a reply that answered, or
        will be queued beside, a suspended tool), what notes the queued messages these
        writes append as delivered: called once the step's command is ready (a model call
        that fails leaves them to be appended by the next step), and the pass's context."""
        options = state.get("options") or {}
        limit = options.get("max_steps")
        limit = limit if isinstance(limit, int) and limit > 0 else 25
        ctx = planner.context(state, config)
        key = last_turn_key(state.get("messages") or [], ctx.scope)
        plan = ctx.turn(key, outcomes=True)  # (with the queue, what waits, what ran: below)
        forged = _discard_forged(state, plan, ctx)
        messages = _with_fixes(list(state.get("messages") or []), forged)
        reply = reply_to_suspension(plan, messages, options, planner, ctx, config)
        if plan and reply:
            answer_reply(reply, ctx, planner, extract, config)
            # queued in the ledger, taken out of the conversation: the gate appends it once
            # every call of the turn has its answer
            said = messages_to_dict(reply.messages)
            ctx.enqueue(str(plan["ai_message_id"]), said)
            removed = [RemoveMessage(id=str(m.id)) for m in reply.messages]
            to_gate: Command[ModelTarget] = Command(
                update={"messages": [*forged, *removed]}, goto="approval_gate")
            return [], False, [], to_gate, None, ctx
        if _left_to_the_gate(plan, messages):
            # the gate's turn is not over (a client sent the run here): back to the gate,
            # never a model turn over a call without its result
            back: Command[ModelTarget] = Command(
                update={"messages": forged} if forged else None, goto="approval_gate")
            return [], False, [], back, None, ctx
        opened = list(_open_turns(messages))  # (one pass back, for both checks below)
        stray = _written_while_waiting(messages, opened, ctx)
        if stray is not None:
            waited, newer = stray
            ctx.ledger.audit([audit_row(
                "refused", {"tool_name": c["tool_name"], "tool_call_id": c["tool_call_id"]},
                thread_id=ctx.thread_id, run_id=ctx.run_id,
                detail=DROPPED.format(count=len(newer))) for c in waited["calls"]])
            kept = messages[:len(messages) - len(newer)]
            gone = {m.id for m in newer}
            dropped: list[BaseMessage] = (  # (graph input may bring messages without an id)
                [*(m for m in forged if m.id not in gone),
                 *(RemoveMessage(id=str(m.id)) for m in newer)]
                if None not in gone else [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept])
            wait: Command[ModelTarget] = Command(update={"messages": dropped},
                                                 goto="approval_gate")
            return [], False, [], wait, None, ctx
        supersede_abandoned(messages, ctx)
        messages, moved = _stopped_turn(messages, opened, ctx)
        forget = _forgettable(state, ctx)
        messages, unqueued = left_queued(messages, ctx.queue({m.id for m in messages}))
        if forget:
            ctx.dequeue(forget)
        appended = [str(m.id) for m in unqueued if isinstance(m, HumanMessage)]
        moved = [*moved, *unqueued]
        return ([*system, *messages], model_steps(messages) >= limit, [*forged, *moved], None,
                (lambda: ctx.deliver(appended)) if appended else None, ctx)

    def ended(response: BaseMessage, state: AgentState, fixes: list[BaseMessage]
              ) -> Command[ModelTarget]:
        """The run's end: a reply without tool calls (no storage is read or written)."""
        update: dict[str, Any] = {"messages": [*fixes, _unique_id(
            _storable(response, secret_tools) if isinstance(response, AIMessage) else response,
            state.get("messages") or [])]}
        if state.get("turn") is not None:
            # The turn is over: its plan need not ride along in every later checkpoint.
            update["turn"] = None
        return Command(update=update, goto="__end__")

    def finish(response: BaseMessage, state: AgentState, config: RunnableConfig,
               fixes: list[BaseMessage], routed: GateContext) -> Command[ModelTarget]:
        if not _calls_tools(response):
            return ended(response, state, fixes)
        response = _unique_id(response, state.get("messages") or [])
        ctx = planner.context(state, config, like=routed)
        # the conversation keeps the reply with its secrets masked: the ledger has them
        plan, errors, stored = planner.plan(response, state, ctx,
                                            stored=_storable(response, secret_tools))
        answered = {m.tool_call_id for m in errors}
        ctx.journal.sync(None, plan, answered)
        sends = dispatch_now(plan, answered, ctx, state, planner.tools)
        return Command(update={"messages": [*fixes, stored, *errors],
                               "turn": pointer(plan)}, goto=sends or "approval_gate")

    def noted(command: Command[ModelTarget], delivered: Callable[[], None] | None
              ) -> Command[ModelTarget]:
        if delivered is not None:
            delivered()
        return command

    def call_model(state: AgentState, config: RunnableConfig) -> Command[ModelTarget]:
        messages, exhausted, fixes, to_gate, delivered, routed = route(state, config)
        if to_gate is not None:
            return to_gate
        if exhausted:
            return noted(Command(update={"messages": fixes} if fixes else None, goto="__end__"),
                         delivered)
        with observed(config, secret=quiet) as seen:
            response = invoke(messages, seen)
        return noted(finish(response, state, config, fixes, routed), delivered)

    async def acall_model(state: AgentState, config: RunnableConfig) -> Command[ModelTarget]:
        # Reading and writing the ledger and store is synchronous: keep it off the event loop.
        messages, exhausted, fixes, to_gate, delivered, routed = await offload(
            route, state, config)
        if to_gate is not None:
            return to_gate
        if exhausted:
            stop: Command[ModelTarget] = Command(update={"messages": fixes} if fixes else None,
                                                 goto="__end__")
            return await offload(noted, stop, delivered) if delivered else stop
        with observed(config, secret=quiet) as seen:
            response = await ainvoke(messages, seen)
        if not _calls_tools(response):
            end = ended(response, state, fixes)  # no storage: no thread hop (unless noted)
            return await offload(noted, end, delivered) if delivered else end
        return await offload(lambda: noted(finish(response, state, config, fixes, routed),
                                           delivered))

    return call_model, acall_model


@dataclass(frozen=True, slots=True)
class _Admitted:
    owner: str
    resume_values: list[Any]
    once: dict[str, Any]
    args: dict[str, Any]
    """The arguments the ledger holds for the call: those it runs with."""
    claimed_at: float
    """When (monotonic) its claim statement was sent (its age counts from there, whatever
    ran since): `confirm_claim`."""

    def may_have_lapsed(self) -> bool:
        """Whether the claim is old enough to have lapsed (the process stalled since:
        paused, swapped out, its renewals late)."""
        return time.monotonic() - self.claimed_at >= _schema.LEASE_SECONDS / 2


def confirm_claim(ledger: Ledger, key: str, admitted: _Admitted) -> None:
    """Right before the tool starts. A claim that may have lapsed is confirmed in the
    ledger as still this owner's; one another process took over (and maybe ran) stops the
    run, the tool not started. A fresh claim costs no statement."""
    if not admitted.may_have_lapsed():
        return
    if not ledger.confirm(key, admitted.owner):
        msg = (f"call {key!r}: this process's claim on it lapsed and another process took it "
               "over; the run stopped before starting the tool again")
        raise RunBusyError(msg)


def _why_not(row: CallRow | None, approval: ApprovalRow | None, task: Mapping[str, Any],
             config: RunnableConfig) -> str | None:
    """Why the ledger does not allow this task to run, or None when it does."""
    if row is None:
        return NOT_PLANNED
    if (row.thread_id != thread_id_of(config) or list(row.agent_path) != list(
            task.get("agent_path") or []) or row.tool_name != task.get("tool_name")
            or row.tool_call_id not in (None, task.get("tool_call_id"))):
        return ELSEWHERE
    if row.approval_id is None:
        return None if runs_as_recorded(row.args, row.args_digest) else OTHER_ARGS
    if approval is None or approval.status != "approved" or row.cleared is None:
        return NO_APPROVAL  # (a decision the gate has not verified yet is not one)
    if not runs_as_recorded(row.args, row.cleared):
        return NOT_APPROVED_ARGS
    return None


def runs_as_recorded(args: Any, digest: str) -> TypeGuard[Mapping[str, Any]]:
    """Whether the ledger's arguments for a call are the ones its gate digested (they always
    are, unless the database was written by hand)."""
    return isinstance(args, Mapping) and args_digest(args) == digest


def _comparable(text: Any) -> bool:
    """Text every database can compare: a string without NUL (PostgreSQL refuses it) that
    encodes as UTF-8 (SQLite refuses lone surrogates). A forged task's odd key or path is
    refused by the checks, not turned into a database error."""
    if not isinstance(text, str) or "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _plain(task: Mapping[str, Any]) -> bool:
    """A task whose fields the one-statement claim compares exactly as `_why_not` does."""
    path = task.get("agent_path")
    return (_comparable(task.get("key")) and _comparable(task.get("tool_name"))
            and _comparable(task.get("tool_call_id"))
            and isinstance(path, list)
            and all(_comparable(p) and p and "/" not in p for p in path))


def _admit(ledger: Ledger, task: ToolTask, config: RunnableConfig, *, context: bool
           ) -> _Admitted | ToolMessage | _Busy | None:
    """Verify a task against the ledger and claim its one execution (with what a tool that
    takes a `ToolContext` needs: its resume data and once-results). A call that already ran
    gets its recorded result; one another run holds is BUSY (the caller waits and asks
    again); a task refused is audited
    and answers nothing (None): an answer in the conversation would end a turn whose call
    still waits on its approval, with no run waiting on that approval any more."""
    name = str(task.get("tool_name"))
    key = task.get("key")
    owner = new_owner()
    thread_id = thread_id_of(config)
    at = time.monotonic()
    claimed = ledger.start_admitted(
        str(key), owner, thread_id=thread_id, agent_path=task["agent_path"],
        tool_name=name, tool_call_id=str(task.get("tool_call_id"))) if _plain(task) else None
    if claimed is not None and runs_as_recorded(claimed.args, claimed.digest):
        with _given_back(ledger, str(key), owner):
            return _Admitted(owner, ledger.resume_values(str(key), thread_id)
                             if context and claimed.resumed else [], claimed.once,
                             dict(claimed.args), at)
    if claimed is not None:  # arguments the gate never digested: never run them
        ledger.release(str(key), owner)
    row, approval = ledger.admission(key) if _comparable(key) else (None, None)
    why = _why_not(row, approval, task, config)
    if why is None and row is not None and row.args is not None:
        at = time.monotonic()
        outcome, held = ledger.start(row.call_key, owner, holder_dead=holder_is_dead)
        if outcome == "busy":
            return BUSY  # the caller waits, and asks again
        if outcome == "won":
            if not context:
                return _Admitted(owner, [], {}, dict(row.args), at)
            with _given_back(ledger, row.call_key, owner):
                return _Admitted(owner, ledger.resume_values(row.call_key, row.thread_id),
                                 dict(row.once_results or {}), dict(row.args), at)
        if outcome == "done" and held is not None and held.outcome is not None:
            return ToolMessage(held.outcome.get("content", ""),
                               tool_call_id=task["tool_call_id"], name=name,
                               status=held.outcome.get("status") or "success")
        why = RUNNING
    ledger.audit([audit_row("refused", {"tool_name": name,
                                        "tool_call_id": task.get("tool_call_id"),
                                        "agent_path": task.get("agent_path")},
                            thread_id=thread_id, run_id=(task.get("options") or {}).get("run_id"),
                            detail=f"tools node: {why}")])
    if why != RUNNING:
        return None
    return ToolMessage(REFUSED.format(name=name, why=why),
                       tool_call_id=str(task.get("tool_call_id") or ""), name=name,
                       status="error")


@contextlib.contextmanager
def _given_back(ledger: Ledger, key: str, owner: str) -> Iterator[None]:
    """Between a call's claim and its tool's start: anything raised (a database error, a
    bug) gives the claim back, so the call may run again, not left to this process's
    keeper, which would renew it for as long as the process lives."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            ledger.release(key, owner)
        raise


class _Busy:
    """Another process holds the call's claim (`_admit`): wait for its result, or for the
    claim to lapse, and ask again (`Waiting`); never answer the call in its place."""


BUSY = _Busy()


class Waiting:
    """The pauses of one task waiting on a call another process holds: growing, up to a
    thread lease's wait, after which the run stops unanswered (a later resume looks again).
    A call refused as "running elsewhere" would end its turn unrun, if its holder had died
    where it cannot be proven dead (its claim lapses a moment after its thread lease)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.deadline = time.monotonic() + _schema.WAIT_SECONDS
        self.pause = 0.01

    def next_pause(self) -> float:
        if time.monotonic() >= self.deadline:
            msg = (f"call {self.name!r} is claimed by another run that neither finished it "
                   "nor let its claim lapse; the run stopped without answering it")
            raise RunBusyError(msg)
        self.pause = min(self.pause * 2, 1.0)
        return self.pause


def _says_when_it_starts(tool: BaseTool) -> bool:
    """Whether the tool's body starts only through `GraphkitTool._arun`, which sets
    `STARTED_KEY` right before it: not a subclass that runs its body another way (which
    would never say so, and a cancelled call that did run would be given back, to run
    again)."""
    kind = type(tool)
    return isinstance(tool, GraphkitTool) and all(
        getattr(kind, name) is getattr(GraphkitTool, name)
        for name in ("_arun", "arun", "ainvoke"))


class _Handoff:
    """A claim taken in a worker thread for a run that awaits it: given back by whichever
    side learns last that the run was cancelled (the thread, if it lands after; the run, if
    the thread landed before), so a cancelled run never leaves a claim behind, whatever
    cancels it (a timeout, `asyncio.run` ending). Once taken by whoever starts the tool, it
    is theirs: a cancellation then leaves the tool to run and record, as always."""

    def __init__(self, ledger: Ledger, key: str) -> None:
        self._ledger, self._key = ledger, key
        self._lock = threading.Lock()
        self.cancelled = False
        self._landed: _Admitted | None = None

    def landed(self, admitted: _Admitted, *, take: bool = False) -> bool:
        """In the thread, the claim taken (`take`: by this thread, which starts the tool):
        False, and the claim given back, if the run was cancelled meanwhile."""
        with self._lock:
            if not self.cancelled:
                self._landed = None if take else admitted
                return True
        self._ledger.release(self._key, admitted.owner)
        return False

    @contextlib.contextmanager
    def _on_the_loop(self) -> Iterator[None]:
        """The lock, taken on the event loop without a blocking wait (the thread holds it for
        a few instructions; `langgraph dev` refuses a blocking lock wait on its loop)."""
        while not self._lock.acquire(blocking=False):
            pass
        try:
            yield
        finally:
            self._lock.release()

    def take(self) -> None:
        """The run starts the tool: the claim is its own now."""
        with self._on_the_loop():
            self._landed = None

    def cancel(self) -> None:
        """The run was cancelled: a claim landed and not taken is given back (in a thread of
        its own: not the event loop's, nor an executor an ending loop shuts down)."""
        with self._on_the_loop():
            self.cancelled = True
            left, self._landed = self._landed, None
        if left is not None:
            apart(self._ledger.release, self._key, left.owner, name="graphkit-give-back")


def _prepare(
    tools: Mapping[str, BaseTool], task: ToolTask, config: RunnableConfig, ledger: Ledger,
    admitted: _Admitted,
) -> tuple[BaseTool, dict[str, Any], RunnableConfig]:
    tool = tools[task["tool_name"]]
    settings = tool if isinstance(tool, GraphkitTool) else None
    key = task["key"]
    ctx = ToolContext(
        tool_call_id=task["tool_call_id"],
        thread_id=thread_id_of(config),
        agent_path=task["agent_path"],
        resume_values=admitted.resume_values,
        once_results=admitted.once,
        suspend_schema=settings.suspend_schema if settings else None,
        resume_schema=settings.resume_schema if settings else None,
        keep_once=lambda results: ledger.save_once(key, results),
    )
    call = {"name": task["tool_name"], "args": admitted.args, "id": task["tool_call_id"],
            "type": "tool_call"}
    metadata = task.get("metadata")
    tool_config: RunnableConfig = {
        **config,
        "metadata": {**(config.get("metadata") or {}),
                     **(metadata if isinstance(metadata, dict) else {})},
        "configurable": {
            **(config.get("configurable") or {}),
            CONTEXT_KEY: ctx,
            PATH_KEY: task["agent_path"],
            "graphkit_options": task.get("options") or {},
        },
    }
    return tool, call, tool_config


def _brief(exc: BaseException, secrets: Sequence[str]) -> str:
    """An error's type and message without `secrets`, short (cut once they are out: a cut
    could leave part of one); never raises (it is recorded as an outcome)."""
    try:  # (its message: a secret "Error" is no reason to mask the name `ValueError`)
        text = f"{type(exc).__name__}: {str.__str__(scrubbed(str(exc), secrets))}"
    except BaseException:  # an error whose message cannot be made, however it fails
        text = f"{type(exc).__name__} (its message could not be read)"
    return text if len(text) <= 300 else text[:299] + "…"


def result_command(task: ToolTask, output: Any) -> Command[ToolTarget]:
    """The command that hands one tool call's result back to its turn."""
    if isinstance(output, ToolMessage):
        message = output
    else:
        message = ToolMessage(str(output), tool_call_id=task["tool_call_id"])
    if not message.name:
        message.name = task["tool_name"]
    goto: ToolTarget = "model" if task.get("then") == "model" else "approval_gate"
    return Command(update={"messages": [message]}, goto=goto)


WITHHELD_ERROR = "its error is withheld: it could not be checked for the call's secret values"
WITHHELD = ("[the result of {name!r} is withheld: it could not be checked for the secret "
            "values of the call's arguments]")


def _secrets_of(tool: BaseTool, call: Mapping[str, Any]) -> list[str] | None:
    """The secret values of a call's arguments (`secret_values`; none for a tool that
    declares no secret); None where they could not be found."""
    if not declares_secrets(tool):
        return []
    try:
        return secret_values(call["args"], secret_paths_of(tool, call["args"]))
    except Exception:
        return None


def _said(tool: BaseTool, call: Mapping[str, Any], value: Any) -> Any:
    """What a call says back (its result, with its artifact, or what it asks when it
    suspends) without the secret values of its arguments: a tool that echoes its key (or a
    key a reviewer typed in an edit) would show it to the model, the conversation's
    checkpoints, streams, webhooks and every view, where the call's own arguments show the
    mask. (Its errors: `_failed`.)"""
    secrets = _secrets_of(tool, call)
    if secrets == []:
        return value
    if secrets is None:  # (not known: nothing said can be checked)
        return WITHHELD.format(name=tool.name)
    try:
        if isinstance(value, ToolMessage):
            return value.model_copy(update={"content": scrubbed(value.content, secrets),
                                            "artifact": scrubbed(value.artifact, secrets)})
        if isinstance(value, Mapping):  # a suspension's payload
            return scrubbed(value, secrets)
        return scrubbed(str(value), secrets)  # (as `result_command` would show it)
    except Exception:  # the tool ran: its outcome must still be recorded, never its secret
        return WITHHELD.format(name=tool.name)


def _failed(tool: BaseTool, call: Mapping[str, Any], exc: BaseException,
            outer: BaseException | None) -> list[str] | None:
    """Take the call's secret values out of the error it raised (`scrub_exception`; `outer`:
    what the caller was handling as the tool began); they are returned to take out of the
    outcome recorded too (None: they could not be found, and the error's text is withheld
    from it)."""
    secrets = _secrets_of(tool, call)
    if secrets:
        with contextlib.suppress(BaseException):  # the outcome is recorded whatever happens
            scrub_exception(exc, secrets, outer)
    return secrets


def _shown(exc: BaseException, secrets: list[str] | None, outer: BaseException | None
           ) -> bool:
    """Whether a failed call's error may be raised as it is: none of the call's secrets shows
    in it once `_failed` took them out (LangGraph stores it in the checkpoint, and hands it
    to the caller). Where the secrets are not known, the error is not raised either."""
    return secrets is not None and not (secrets and still_shows(exc, secrets, outer))


def _withheld(exc: BaseException, recorded: str) -> BaseException:
    """What is raised in place of an error that would show a secret: an error of its kind
    for those that stop a process or a task (`KeyboardInterrupt`, `SystemExit`), else a
    `WithheldToolError`; its message is the outcome recorded, which is scrubbed."""
    if not isinstance(exc, Exception):
        with contextlib.suppress(Exception):
            return type(exc)(recorded)
    return WithheldToolError(recorded)


def _suspended(task: ToolTask, signal: ToolSuspended) -> Command[ToolTarget]:
    """Back to the gate, which asks what the ledger was told (`Ledger.suspend`): the report
    in the state only says where to look (a client can write it)."""
    report = {task["tool_call_id"]: {"payload": signal.payload, "key": task["key"]}}
    return Command(update={"reports": report}, goto="approval_gate")


def _refused(message: ToolMessage | None) -> Command[ToolTarget]:
    """Back to the gate, with the call's recorded result or what became of it, if any."""
    return Command(update={"messages": [message]} if message is not None else None,
                   goto="approval_gate")


def make_tools_nodes(
    tools: Mapping[str, BaseTool], ledger: Ledger,
    path_of: Callable[[RunnableConfig], list[str]] | None = None,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `tools` node (sync and async): runs the one tool call it was sent, if allowed."""

    def finish(task: ToolTask, owner: str, output: Any) -> Command[ToolTarget]:
        command = result_command(task, output)
        (message,) = command.update["messages"]  # type: ignore[index]
        ledger.finish(task["key"], owner, {"content": message.content, "status": message.status})
        return command

    def admit(task: ToolTask, config: RunnableConfig
              ) -> _Admitted | ToolMessage | _Busy | None:
        tool = tools.get(str(task.get("tool_name")))
        if path_of is not None and task.get("agent_path") != path_of(config):
            tool = None  # another agent's call (a subagent's, say): never this agent's tool
        if isinstance(tool, DelegationTool):
            tool = None  # a delegation runs in its own node, never here
        if tool is None:
            return _admit(ledger, {**task, "key": None}, config,  # type: ignore[typeddict-item]
                          context=False)
        context = isinstance(tool, GraphkitTool) and tool.context_param is not None
        return _admit(ledger, task, config, context=context)

    def admit_when_free(task: ToolTask, config: RunnableConfig,
                        handoff: _Handoff | None = None) -> _Admitted | ToolMessage | None:
        """`admit`, waiting (in this task's own thread) while another run holds the call;
        with `handoff` (an async run's), never past the run's cancellation."""
        waiting = Waiting(str(task.get("tool_name")))
        while True:
            if handoff is not None and handoff.cancelled:
                return None  # (nobody reads it)
            admitted = admit(task, config)
            if not isinstance(admitted, _Busy):
                break
            time.sleep(waiting.next_pause())
        if isinstance(admitted, _Admitted) and handoff is not None and not handoff.landed(
                admitted, take=True):
            return None
        return admitted

    def stopped(task: ToolTask, owner: str, text: str, exc: BaseException | None = None,
                secrets: list[str] | None = None) -> str:
        """The call stopped without a result: record why, so it never runs again unasked
        (its error's text without the call's `secrets`; None: they are not known, and the
        text is withheld). Returns what it recorded."""
        error = ("" if exc is None else WITHHELD_ERROR if secrets is None
                 else _brief(exc, secrets))
        content = text.format(name=task["tool_name"], error=error)
        ledger.finish(task["key"], owner, {"content": content, "status": "error"})
        return content

    def execute(tool: BaseTool, call: dict[str, Any], tool_config: RunnableConfig,
                task: ToolTask, admitted: _Admitted) -> Command[ToolTarget]:
        """Run a sync tool and record its outcome, whatever becomes of whoever awaits it (a
        cancelled async run leaves the tool running in its thread; it still records)."""
        owner = admitted.owner
        confirm_claim(ledger, task["key"], admitted)
        outer = sys.exc_info()[1]  # (the caller's: Python makes it the context of the tool's)
        withheld: BaseException | None = None
        try:
            with observed(tool_config, secret=declares_secrets(tool)) as seen:
                output = tool.invoke(call, seen)
        except ToolSuspended as signal:
            signal.payload = _said(tool, call, signal.payload)
            ledger.suspend(task["key"], owner, signal.payload)
            return _suspended(task, signal)
        except GraphBubbleUp:  # a tool's own interrupt(): it runs again on resume
            ledger.release(task["key"], owner)
            raise
        except BaseException as exc:
            secrets = _failed(tool, call, exc, outer)
            recorded = stopped(task, owner, FAILED, exc, secrets)
            if _shown(exc, secrets, outer):
                raise
            withheld = _withheld(exc, recorded)
        if withheld is not None:
            raise withheld  # (out of the `except`: not even its context is the tool's)
        return finish(task, owner, _said(tool, call, output))

    def run_tool(task: ToolTask, config: RunnableConfig, handoff: _Handoff | None = None
                 ) -> Command[ToolTarget]:
        admitted = admit_when_free(task, config, handoff)
        if not isinstance(admitted, _Admitted):
            return _refused(admitted)
        with _given_back(ledger, task["key"], admitted.owner):
            tool, call, tool_config = _prepare(tools, task, config, ledger, admitted)
        return execute(tool, call, tool_config, task, admitted)

    def begin(task: ToolTask, config: RunnableConfig, handoff: _Handoff
              ) -> (tuple[BaseTool, dict[str, Any], RunnableConfig, _Admitted] | ToolMessage
                    | _Busy | None):
        admitted = admit(task, config)
        if not isinstance(admitted, _Admitted):
            return admitted
        if not handoff.landed(admitted):
            return None  # the run was cancelled: the claim is given back (nobody reads this)
        with _given_back(ledger, task["key"], admitted.owner):
            return (*_prepare(tools, task, config, ledger, admitted), admitted)

    async def abegin(task: ToolTask, config: RunnableConfig) -> Any:
        """`begin` off the event loop, waiting on the loop (no thread held) while another
        run holds the call; a cancellation never leaves a claim behind (`_Handoff`)."""
        waiting = Waiting(str(task.get("tool_name")))
        handoff = _Handoff(ledger, task["key"])
        while True:
            try:
                begun = await offload(begin, task, config, handoff)
            except asyncio.CancelledError:
                handoff.cancel()
                raise
            if not isinstance(begun, _Busy):
                handoff.take()
                return begun
            await asyncio.sleep(waiting.next_pause())

    async def arun_tool(task: ToolTask, config: RunnableConfig) -> Command[ToolTarget]:
        named = tools.get(str(task.get("tool_name")))
        if named is not None and _is_sync(named):
            # the whole call in one hop: admitted, run and recorded in the tool's thread
            handoff = _Handoff(ledger, task["key"])
            try:
                command: Command[ToolTarget] = await run_in_executor(
                    _SYNC_TOOL_POOL, run_tool, task, config, handoff)
            except asyncio.CancelledError:
                handoff.cancel()  # a waiting thread stops waiting, and never starts the tool
                raise
            return command
        begun = await abegin(task, config)
        if not isinstance(begun, tuple):
            return _refused(begun)
        tool, call, tool_config, admitted = begun
        owner = admitted.owner
        started: threading.Event | None = None
        if _says_when_it_starts(tool):
            started = threading.Event()
            tool_config = {**tool_config, "configurable": {
                **(tool_config.get("configurable") or {}), STARTED_KEY: started}}
        if admitted.may_have_lapsed():
            try:
                await offload(confirm_claim, ledger, task["key"], admitted)  # a statement
            except asyncio.CancelledError:
                await asyncio.shield(offload(ledger.release, task["key"], owner))
                raise
        outer = sys.exc_info()[1]
        withheld: BaseException | None = None
        try:
            with observed(tool_config, secret=declares_secrets(tool)) as seen:
                output = await tool.ainvoke(call, seen)
        except ToolSuspended as signal:
            signal.payload = await offload(_said, tool, call, signal.payload)
            await offload(ledger.suspend, task["key"], owner, signal.payload)
            return _suspended(task, signal)
        except GraphBubbleUp:
            await offload(ledger.release, task["key"], owner)
            raise
        except asyncio.CancelledError as exc:
            if started is not None and not started.is_set():
                # cancelled before its body started: it did not run, and may run again
                await asyncio.shield(offload(ledger.release, task["key"], owner))
                raise
            # recorded before the cancellation goes on (in its thread even if cancelled again)
            await asyncio.shield(offload(stopped, task, owner, INTERRUPTED))
            if _shown(exc, _failed(tool, call, exc, outer), outer):  # (the tool's own?)
                raise
            withheld = asyncio.CancelledError()
        except BaseException as exc:
            secrets = _failed(tool, call, exc, outer)
            recorded = await offload(stopped, task, owner, FAILED, exc, secrets)
            if _shown(exc, secrets, outer):
                raise
            withheld = _withheld(exc, recorded)
        if withheld is not None:
            raise withheld
        return await offload(lambda: finish(task, owner, _said(tool, call, output)))

    return run_tool, arun_tool


__all__ += ["DONE"]
