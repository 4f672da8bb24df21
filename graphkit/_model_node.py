"""The agent graph's `model` node: one model turn, or the end of the run.

Before the model reads the conversation, `graphkit._client_writes` checks what clients wrote
into it; the model's reply is planned by `graphkit._planner.Planner`, and the calls
that need no decision are sent to the tools node at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal, TypeGuard, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    messages_to_dict,
)
from langchain_core.runnables import RunnableBinding, RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.types import Command

from graphkit._approvals import Extractor, last_turn_key
from graphkit._client_writes import (
    discard_forged,
    drop_written_while_waiting,
    last_planned,
    left_to_the_gate,
    readable,
    refused_turn,
    stopped_turn,
    unplanned_turn,
    with_fixes,
)
from graphkit._context import open_turns
from graphkit._gate import dispatch_now, pointer, supersede_abandoned
from graphkit._ledger import queued_id
from graphkit._limits import check_value
from graphkit._offload import offload
from graphkit._planner import GateContext, Planner
from graphkit._reply import answer_reply, left_queued, reply_to_suspension
from graphkit._secrets import observed
from graphkit._state import AgentState
from graphkit._validate import declares_secrets

__all__ = ["make_model_node", "model_steps"]

ModelTarget = Literal["approval_gate", "__end__"]


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
    earlier message that happens to share its id, and an empty id is none (no turn of it could be
    told apart)."""
    if not response.id or any(m.id == response.id for m in messages):
        return response.model_copy(update={"id": f"run-{uuid.uuid4()}"})
    return response


def _calls_tools(reply: BaseMessage) -> TypeGuard[AIMessage]:
    """Whether a model reply starts a turn of tool calls (else it ends the run)."""
    return isinstance(reply, AIMessage) and bool(reply.tool_calls)


UNREAD = "[graphkit: not stored: arguments that could not be read, for a tool that takes secrets]"


def _storable(response: AIMessage, secret_tools: Collection[str] = ()) -> AIMessage:
    """The model's reply as it can be checkpointed: a call whose arguments are too deep or too
    large to store, or hold an integer beyond 64 bits, keeps a placeholder (the gate answers
    it with an error the model sees), and so does a call it could not parse to a tool that
    takes secrets (which part of its text is the secret cannot be told; helper-52)."""
    unsafe = set()
    for call in response.tool_calls:
        try:
            check_value(call.get("args"), what="arguments", error=ValueError)
        except ValueError:
            unsafe.add(call.get("id"))
    unread = [c for c in response.invalid_tool_calls if c.get("name") in secret_tools]
    if not unsafe and not unread:
        return response
    calls = [{**c, "args": {"_graphkit": "arguments that cannot be stored (too deep, too "
                                          "large, an integer beyond 64 bits); not stored"}}
             if c.get("id") in unsafe else c for c in response.tool_calls]
    invalid = [{**c, "args": UNREAD} if c.get("name") in secret_tools else c
               for c in response.invalid_tool_calls]
    return response.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


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
        ctx = planner.context(state, config)
        key = last_turn_key(state.get("messages") or [], ctx.scope)
        plan = ctx.turn(key, outcomes=True)  # (with the queue, what waits, what ran: below)
        options = ctx.options(state)  # (the request's, as recorded with its run: read above)
        limit = options.get("max_steps")
        limit = limit if isinstance(limit, int) and limit > 0 else 25
        # the last turn this agent planned, where words or a client's turns came after it
        # (`last_planned`)
        paused = plan or last_planned(list(state.get("messages") or []), ctx)
        forged = discard_forged(state, paused, ctx)
        messages = with_fixes(list(state.get("messages") or []), forged)
        reply = reply_to_suspension(paused, messages, options, planner, ctx, config)
        if paused and reply:
            answer_reply(reply, ctx, planner, extract, config)
            # queued in the ledger, taken out of the conversation: the gate appends it once
            # every call of the turn has its answer
            said = messages_to_dict(reply.messages)
            ctx.enqueue(str(paused["ai_message_id"]), said)
            removed = [RemoveMessage(id=str(m.id)) for m in (*reply.dropped, *reply.messages)]
            to_gate: Command[ModelTarget] = Command(
                update={"messages": [*forged, *removed]}, goto="approval_gate")
            return [], False, [], to_gate, None, ctx
        if left_to_the_gate(plan, messages):
            # the gate's turn is not over (a client sent the run here): back to the gate,
            # never a model turn over a call without its result
            back: Command[ModelTarget] = Command(
                update={"messages": forged} if forged else None, goto="approval_gate")
            return [], False, [], back, None, ctx
        opened = list(open_turns(messages))  # (one pass back, for both checks below)
        dropped = drop_written_while_waiting(messages, opened, forged, ctx)
        if dropped is not None:
            wait: Command[ModelTarget] = Command(update={"messages": dropped},
                                                 goto="approval_gate")
            return [], False, [], wait, None, ctx
        supersede_abandoned(messages, ctx)
        messages, moved = stopped_turn(messages, opened, ctx)
        if moved:  # (answers went in: the turns still open are where they are now)
            opened = list(open_turns(messages))
        written = unplanned_turn(messages, opened, ctx)
        if written is not None:
            answered = refused_turn(messages, *opened[0], ctx)
            if answered is None:
                planned = plan_written(written, state, ctx, [*forged, *moved])
                return [], False, [], planned, None, ctx
            messages, moved = answered[0], [*moved, *answered[1]]
        forget = _forgettable(state, ctx)
        messages, unqueued = left_queued(messages, ctx.queue({m.id for m in messages}))
        if forget:
            ctx.dequeue(forget)
        appended = [str(m.id) for m in unqueued if isinstance(m, HumanMessage)]
        moved = [*moved, *unqueued]
        # The model answered last and nothing came since: nothing to answer (a second branch
        # of the run reached this node after the first one's answer: a client's `Send` of a
        # delegation beside the run's own, and the supervisor's model, called again over its
        # own answer, planned the payment again: helper-90)
        over = (not moved and not forged and bool(messages) and isinstance(messages[-1], AIMessage)
                and not messages[-1].tool_calls)
        return ([*system, *readable(messages)], over or model_steps(messages) >= limit,
                [*forged, *moved], None, (lambda: ctx.deliver(appended)) if appended else None,
                ctx)

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
        update: dict[str, Any] = {"messages": [*fixes, stored, *errors], "turn": pointer(plan)}
        if ctx.new_conversation:
            update["conversation"] = ctx.conversation
        return Command(update=update, goto=sends or "approval_gate")

    def plan_written(ai: AIMessage, state: AgentState, ctx: GateContext,
                     fixes: list[BaseMessage]) -> Command[ModelTarget]:
        """Plan a turn a model node wrote in another thread (a copied thread's: `unplanned_turn`
        and not `refused_turn`) as it plans its own, then let the gate ask or run."""
        plan, errors, _ = planner.plan(ai, state, ctx)
        ctx.journal.sync(None, plan, {m.tool_call_id for m in errors})
        update: dict[str, Any] = {"messages": [*fixes, *errors], "turn": pointer(plan)}
        if ctx.new_conversation:
            update["conversation"] = ctx.conversation
        return Command(update=update, goto="approval_gate")

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
