"""The agent graph's three nodes: `model`, `approval_gate` (the one place that decides) and
`tools` (one task per tool call, sent by the gate).

Each tool call is its own `Send` task. LangGraph then keeps a finished call's writes when a
sibling pauses, gives each paused task its own interrupt id, and runs independent calls of a
superstep concurrently; `ToolNode` running several interrupting calls in one task does not.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import run_in_executor
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.config import get_store, get_stream_writer
from langgraph.store.base import BaseStore
from langgraph.types import Command, Send, interrupt

from graphkit.approvals import (
    Extractor,
    ResumeOutcome,
    answered_ids,
    apply_resume,
    interrupt_value,
    plan_turn,
    queued_messages,
    suspension_record,
    telemetry,
    waiting_records,
)
from graphkit.errors import GraphkitError
from graphkit.journal import GateJournal, granted
from graphkit.state import AgentState, CallPlan, RunOptions, ToolTask, TurnPlan
from graphkit.tools import CONTEXT_KEY, GraphkitTool, ToolContext, ToolSuspended

__all__ = ["PATH_KEY", "agent_path_of", "make_gate_node", "make_model_node", "make_tools_nodes"]

PATH_KEY = "graphkit_agent_path"
"""Key of `config["configurable"]` holding the agent path of an enclosing supervisor."""
EVENT_KEY = "graphkit_event"
"""Key marking graphkit's custom stream events (telemetry) among other custom events."""

GateTarget = Literal["model", "tools", "approval_gate"]
ModelTarget = Literal["approval_gate", "__end__"]

_SYNC_TOOL_POOL = ThreadPoolExecutor(max_workers=64, thread_name_prefix="graphkit-tool")
"""Sync tools called from an async run. The event loop's default pool has cpu+4 threads,
which would run eight 50 ms tools in two waves on a 2-core machine."""


def _is_sync(tool: BaseTool) -> bool:
    if isinstance(tool, StructuredTool):
        return tool.coroutine is None
    return type(tool)._arun is BaseTool._arun


def agent_path_of(config: RunnableConfig, name: str) -> list[str]:
    parent = (config.get("configurable") or {}).get(PATH_KEY) or []
    return [*parent, name]


def _thread_id(config: RunnableConfig) -> str:
    return str((config.get("configurable") or {}).get("thread_id") or "")


def _last_ai(messages: Sequence[AnyMessage]) -> AIMessage | None:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def model_steps(messages: Sequence[BaseMessage]) -> int:
    """Model replies since the last user message: the steps of the current run."""
    steps = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        steps += isinstance(message, AIMessage)
    return steps


class Planner:
    """The gate's reading of a model turn, done once per turn: which calls run, which wait.

    The model node calls it on the turn it just produced, so the plan (and every predicate's
    verdict) is checkpointed with the AI message itself and the gate can pause on its first
    pass; the gate calls it for a turn that reached the state another way.
    """

    def __init__(self, tools: Mapping[str, BaseTool], name: str) -> None:
        self.tools = tools
        self.name = name
        self.schemas = {tool_name: _schema(tool) for tool_name, tool in tools.items()}

    def journal(self, state: AgentState, config: RunnableConfig) -> GateJournal:
        options: RunOptions = state.get("options") or {}
        # The node's namespace ends with its own task; the agent's scope is what precedes it.
        task_ns = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
        scope = task_ns.rpartition("|")[0]
        return GateJournal(_store(), thread_id=_thread_id(config), run_id=options.get("run_id"),
                           schemas=self.schemas, scope=scope)

    def plan(self, ai: AIMessage, state: AgentState, config: RunnableConfig,
             journal: GateJournal) -> tuple[TurnPlan, list[ToolMessage]]:
        path = agent_path_of(config, self.name)
        grants = granted(journal.store, thread_id=journal.thread_id, agent_path=path,
                         tool_names=[c["name"] for c in ai.tool_calls])
        plan, errors = plan_turn(ai, self.tools, state.get("options") or {}, agent_path=path,
                                 thread_id=journal.thread_id, grants=grants)
        journal.planned(plan)
        _emit(_pending_events(plan))
        return plan, errors


def _unique_id(response: BaseMessage, messages: Sequence[BaseMessage]) -> BaseMessage:
    """Some OpenAI-compatible servers reuse one completion id: a reply must not replace an
    earlier message that happens to share its id."""
    if response.id is None or any(m.id == response.id for m in messages):
        return response.model_copy(update={"id": f"run-{uuid.uuid4()}"})
    return response


def make_model_node(
    model: BaseChatModel, tools: Sequence[BaseTool], instructions: str, planner: Planner
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `model` node (sync and async): one model turn, or the end of the run."""
    bound = model.bind_tools(list(tools)) if tools else model
    system = [SystemMessage(instructions)] if instructions else []

    def route(state: AgentState) -> tuple[list[BaseMessage], bool]:
        options = state.get("options") or {}
        limit = int(options.get("max_steps") or 25)
        messages = list(state.get("messages") or [])
        return [*system, *messages], model_steps(messages) >= limit

    def finish(response: BaseMessage, state: AgentState,
               config: RunnableConfig) -> Command[ModelTarget]:
        response = _unique_id(response, state.get("messages") or [])
        if not (isinstance(response, AIMessage) and response.tool_calls):
            # The turn is over: its plan need not ride along in every later checkpoint.
            update: dict[str, Any] = {"messages": [response]}
            if state.get("turn") is not None:
                update["turn"] = None
            return Command(update=update, goto="__end__")
        journal = planner.journal(state, config)
        plan, errors = planner.plan(response, state, config, journal)
        journal.sync(None, plan, {m.tool_call_id for m in errors})
        return Command(update={"messages": [response, *errors], "turn": plan},
                       goto="approval_gate")

    def call_model(
        state: AgentState, config: RunnableConfig
    ) -> Command[ModelTarget]:
        messages, exhausted = route(state)
        if exhausted:
            return Command(goto="__end__")
        return finish(bound.invoke(messages, config), state, config)

    async def acall_model(
        state: AgentState, config: RunnableConfig
    ) -> Command[ModelTarget]:
        messages, exhausted = route(state)
        if exhausted:
            return Command(goto="__end__")
        response = await bound.ainvoke(messages, config)
        # Planning reads and writes the store synchronously: keep it off the event loop.
        return await asyncio.to_thread(finish, response, state, config)

    return call_model, acall_model


def _emit(events: list[dict[str, Any]]) -> None:
    if not events:
        return
    write = get_stream_writer()
    for event in events:
        write({EVENT_KEY: "tool-approval", **event})


def _pending_events(plan: TurnPlan) -> list[dict[str, Any]]:
    return [
        telemetry(c["approval"], "pending")
        for c in plan["calls"]
        if c["approval"] is not None and c["approval"]["status"] == "pending"
    ]


def _task(call: CallPlan, agent_path: list[str], options: RunOptions, then: str) -> Send:
    return Send(
        call["node"],
        ToolTask(
            tool_call_id=call["tool_call_id"],
            tool_name=call["tool_name"],
            args=call["args"],
            resume_values=list(call["resume_values"]),
            once=dict(call["once"]),
            metadata=dict(call["metadata"]),
            agent_path=agent_path,
            options=options,
            then=then,
        ),
    )


def _edited_ai(ai: AIMessage, edited: Mapping[str, dict[str, Any]]) -> AIMessage:
    """The AI message as it will run, so the history shows the edited call, not the original."""
    calls = [
        {**call, "args": edited[call_id]}
        if (call_id := call.get("id")) is not None and call_id in edited else call
        for call in ai.tool_calls
    ]
    return ai.model_copy(update={"tool_calls": calls})


def make_gate_node(
    planner: Planner, extract: Extractor | None = None
) -> Callable[..., Any]:
    """The `approval_gate` node: dispatches the turn's calls, pauses for humans, applies
    their decisions."""
    tools, name = planner.tools, planner.name

    def approval_gate(state: AgentState, config: RunnableConfig) -> Command[GateTarget]:
        messages = list(state.get("messages") or [])
        ai = _last_ai(messages)
        if ai is None or not ai.tool_calls:
            return Command(goto="model")
        path = agent_path_of(config, name)
        thread_id = _thread_id(config)
        options: RunOptions = state.get("options") or {}
        journal = planner.journal(state, config)
        update: dict[str, Any] = {}
        new_messages: list[BaseMessage] = []
        previous = plan = state.get("turn")
        changed = False
        if plan is None or plan["ai_message_id"] != ai.id:
            plan, errors = planner.plan(ai, state, config, journal)
            new_messages.extend(errors)
            changed = True
        reports = state.get("reports") or {}
        if reports:
            plan = copy.deepcopy(plan)
            for call in plan["calls"]:
                report = reports.get(call["tool_call_id"])
                if report is not None:
                    call["suspension"] = suspension_record(
                        call, report["payload"], agent_path=path, thread_id=thread_id,
                        ai_message_id=plan["ai_message_id"],
                    )
                    call["once"] = report["once"]
            update["reports"] = {}
            changed = True

        answered = answered_ids(messages, plan["ai_message_id"]) | {
            m.tool_call_id for m in new_messages if isinstance(m, ToolMessage)
        }
        if not _ready(plan, answered) and waiting_records(plan, answered) and not changed:
            value = interrupt(interrupt_value(plan, answered, agent_path=path))
            try:
                outcome = apply_resume(plan, value, answered, tools, extract)
            except GraphkitError as exc:
                refused = copy.deepcopy(plan)
                refused["error"] = str(exc)
                return Command(update={"turn": refused}, goto="approval_gate")
            plan = _absorb(outcome, ai, new_messages)
            journal.applied(outcome.audits)
            changed = True
        command = _route(plan, answered, update, new_messages, changed, path, options, tools)
        if changed:
            done = answered | {m.tool_call_id for m in new_messages if isinstance(m, ToolMessage)}
            journal.sync(previous, plan, done)
        return command

    return approval_gate


def _store() -> BaseStore | None:
    try:
        return get_store()
    except RuntimeError:  # called outside a runnable context
        return None


def _schema(tool: BaseTool) -> dict[str, Any] | None:
    """The JSON schema of the arguments the model sees, for checking edits without the tool."""
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        return schema
    make = getattr(schema, "model_json_schema", None)
    try:
        return dict(make()) if make is not None else None
    except Exception:  # an exotic schema: the inbox then skips its own check
        return None


def _absorb(outcome: ResumeOutcome, ai: AIMessage, new_messages: list[BaseMessage]) -> TurnPlan:
    if outcome.edited:
        new_messages.append(_edited_ai(ai, outcome.edited))
    _emit(outcome.events)
    return outcome.plan


def _ready(plan: TurnPlan, answered: set[str]) -> list[CallPlan]:
    if plan["held"]:
        return []
    return [
        c
        for c in plan["calls"]
        if c["tool_call_id"] not in answered
        and c["suspension"] is None
        and c["answer"] is None
        and (c["approval"] is None or c["approval"]["status"] == "approved")
    ]


def _answers(plan: TurnPlan, answered: set[str]) -> list[ToolMessage]:
    """Error ToolMessages for calls that will not run, once decisions are no longer held."""
    if plan["held"]:
        return []
    return [
        ToolMessage(c["answer"], tool_call_id=c["tool_call_id"], name=c["tool_name"],
                    status="error")
        for c in plan["calls"]
        if c["answer"] and c["tool_call_id"] not in answered
    ]


def _route(
    plan: TurnPlan,
    answered: set[str],
    update: dict[str, Any],
    new_messages: list[BaseMessage],
    changed: bool,
    path: list[str],
    options: RunOptions,
    tools: Mapping[str, BaseTool],
) -> Command[GateTarget]:
    if changed:
        update["turn"] = plan
    answers = _answers(plan, answered)
    new_messages.extend(answers)
    answered = answered | {m.tool_call_id for m in answers}
    ready = _ready(plan, answered)
    goto: GateTarget | list[Send]
    if ready:
        parallel = [c for c in ready if not c["sequential"]]
        batch = parallel or ready[:1]
        goto = [_task(c, path, options, _then(plan, answered, batch, tools)) for c in batch]
    elif waiting_records(plan, answered):
        goto = "approval_gate"  # persist the plan, then pause on the next pass
    else:
        queued = queued_messages(plan)
        if queued:
            new_messages.extend(queued)
            update["turn"] = {**plan, "queued": []}
        goto = "model"
    if new_messages:
        update["messages"] = new_messages
    return Command(update=update, goto=goto)


def _then(plan: TurnPlan, answered: set[str], batch: list[CallPlan],
          tools: Mapping[str, BaseTool]) -> str:
    """Send results straight to the model when this batch settles the turn, sparing the gate a
    superstep; back to the gate when anything else waits, or a call of the batch could pause
    (a suspension's report, or a subagent's decision, must come back through the gate)."""
    in_batch = {c["tool_call_id"] for c in batch}
    rest = [c for c in plan["calls"]
            if c["tool_call_id"] not in answered and c["tool_call_id"] not in in_batch]
    if rest or plan.get("queued") or plan["held"]:
        return "approval_gate"
    for call in batch:
        tool = tools.get(call["tool_name"])
        if call["node"] != "tools":  # a delegation can pause, and the plan change meanwhile
            return "approval_gate"
        if isinstance(tool, GraphkitTool) and tool.context_param is not None:
            return "approval_gate"
    return "model"


def _prepare(
    tools: Mapping[str, BaseTool], task: ToolTask, config: RunnableConfig
) -> tuple[BaseTool, dict[str, Any], RunnableConfig]:
    tool = tools[task["tool_name"]]
    settings = tool if isinstance(tool, GraphkitTool) else None
    ctx = ToolContext(
        tool_call_id=task["tool_call_id"],
        thread_id=_thread_id(config),
        agent_path=task["agent_path"],
        resume_values=task["resume_values"],
        once_results=task["once"],
        suspend_schema=settings.suspend_schema if settings else None,
        resume_schema=settings.resume_schema if settings else None,
    )
    call = {
        "name": task["tool_name"],
        "args": task["args"],
        "id": task["tool_call_id"],
        "type": "tool_call",
    }
    tool_config: RunnableConfig = {
        **config,
        "metadata": {**(config.get("metadata") or {}), **task["metadata"]},
        "configurable": {
            **(config.get("configurable") or {}),
            CONTEXT_KEY: ctx,
            PATH_KEY: task["agent_path"],
            "graphkit_options": task["options"],
        },
    }
    return tool, call, tool_config


ToolTarget = Literal["approval_gate", "model"]


def _result(task: ToolTask, output: Any) -> Command[ToolTarget]:
    if isinstance(output, ToolMessage):
        message = output
    else:
        message = ToolMessage(str(output), tool_call_id=task["tool_call_id"])
    if not message.name:
        message.name = task["tool_name"]
    goto: ToolTarget = "model" if task.get("then") == "model" else "approval_gate"
    return Command(update={"messages": [message]}, goto=goto)


def _suspended(task: ToolTask, signal: ToolSuspended) -> Command[ToolTarget]:
    report = {task["tool_call_id"]: {"payload": signal.payload, "once": signal.once}}
    return Command(update={"reports": report}, goto="approval_gate")


def make_tools_nodes(
    tools: Mapping[str, BaseTool],
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `tools` node (sync and async): runs the one tool call it was sent."""

    def run_tool(task: ToolTask, config: RunnableConfig) -> Command[ToolTarget]:
        tool, call, tool_config = _prepare(tools, task, config)
        try:
            output = tool.invoke(call, tool_config)
        except ToolSuspended as signal:
            return _suspended(task, signal)
        return _result(task, output)

    async def arun_tool(task: ToolTask, config: RunnableConfig) -> Command[ToolTarget]:
        tool, call, tool_config = _prepare(tools, task, config)
        try:
            if _is_sync(tool):
                output = await run_in_executor(_SYNC_TOOL_POOL, tool.invoke, call, tool_config)
            else:
                output = await tool.ainvoke(call, tool_config)
        except ToolSuspended as signal:
            return _suspended(task, signal)
        return _result(task, output)

    return run_tool, arun_tool
