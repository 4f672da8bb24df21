"""Builds an agent's LangGraph graph: `model` -> `approval_gate` -> `tools` -> `approval_gate`
(or `model` -> `tools` when no call of the turn waits on a human), plus one node per subagent
that delegations are sent to."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

from graphkit._autoresume import make_extractor
from graphkit._fence import fenced_node
from graphkit._gate import make_gate_node
from graphkit._input import note_input
from graphkit._ledger import Ledger
from graphkit._model_node import make_model_node
from graphkit._planner import Planner
from graphkit._settings import GateSettings
from graphkit._state import AgentState, InputState, well_typed_state, well_typed_task
from graphkit._supervisor import delegation_tool, make_delegate_nodes
from graphkit._tools_node import make_tools_nodes

__all__ = ["RESERVED_NODES", "Subagent", "build_graph"]


def _node(func: Callable[..., Any], afunc: Callable[..., Any], name: str,
          accepts: Callable[[Any], bool] | None = well_typed_state, *,
          fenced: bool = True) -> Runnable[Any, Any]:
    """A node with a sync and an async body, as LangGraph wraps its own nodes (no extra
    tracing run per call); LangChain's `RunnableLambda` where that class is not available.

    Its input is checked first: a `Send` carries any payload a client chose to its node, and
    a node that read a value not of its shape would fail with an untyped error, on every
    later step of the thread. Such an input does nothing. A run whose thread lease another
    process took over stops before the node (`graphkit._fence`)."""

    if accepts is not None:
        func, afunc = _guarded(func, afunc, accepts)
    if fenced:
        func, afunc = fenced_node(func, afunc)
    # else the node checks its input itself (and LangGraph still finds its subgraph)
    try:
        from langgraph._internal._runnable import RunnableCallable
    except ImportError:  # pragma: no cover - a LangGraph without it
        return RunnableLambda(func, afunc, name=name)
    return RunnableCallable(func, afunc, name=name, trace=False)


def _guarded(func: Callable[..., Any], afunc: Callable[..., Any], accepts: Callable[[Any], bool]
             ) -> tuple[Callable[..., Any], Callable[..., Any]]:
    def guarded(value: Any, config: RunnableConfig) -> Any:
        return func(value, config) if accepts(value) else Command()

    async def aguarded(value: Any, config: RunnableConfig) -> Any:
        return await afunc(value, config) if accepts(value) else Command()

    return guarded, aguarded


RESERVED_NODES = frozenset({"model", "approval_gate", "tools", "__start__", "__end__"})

Subagent = tuple[CompiledStateGraph[Any, Any, Any, Any], str]
"""A subagent as the supervisor's graph needs it: its graph (checkpointer inherited) and its
description for the model."""


def _entry(planner: Planner) -> Callable[[AgentState, RunnableConfig], Literal["model"]]:
    """The graph's entry edge. Where a reply may auto-resume a suspended tool, it notes what
    the input brought, as the run that sent it (`graphkit._input`)."""

    def entry(state: AgentState, config: RunnableConfig) -> Literal["model"]:
        options = state.get("options") or {}
        if (planner.settings.auto_resume_suspended_tools
                or options.get("auto_resume_suspended_tools") is True):
            note_input(state, config)
        return "model"

    return entry


def build_graph(
    *,
    name: str,
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    instructions: str,
    subagents: Mapping[str, Subagent] | None = None,
    settings: GateSettings,
    ledger: Ledger,
    nested: bool = False,
) -> StateGraph[AgentState, None, InputState, AgentState]:
    """The uncompiled graph; the agent compiles it with its checkpointer and store.

    `settings` (who may approve, what expires, what always asks) and `ledger` (where
    decisions and executions are recorded) are part of the graph itself, so every caller of
    it obeys them.
    """
    subagents = dict(subagents or {})
    clash = sorted(set(subagents) & (RESERVED_NODES | {t.name for t in tools}))
    if clash:
        msg = f"subagent keys {clash} clash with tool or node names; rename them"
        raise ValueError(msg)
    all_tools = [*tools, *(delegation_tool(key, d) for key, (_, d) in subagents.items())]
    by_name: Mapping[str, BaseTool] = {tool.name: tool for tool in all_tools}
    planner = Planner(by_name, name, settings, ledger, nested=nested)
    extract = make_extractor(model, by_name)
    call_model, acall_model = make_model_node(model, all_tools, instructions, planner, extract)
    run_tool, arun_tool = make_tools_nodes(by_name, ledger, planner.path_of)

    builder = StateGraph(AgentState, input_schema=InputState)
    builder.add_node(
        "model",
        _node(call_model, acall_model, "model"),
        destinations=("approval_gate", "tools", *subagents, "__end__"),
    )
    builder.add_node(
        "approval_gate",
        _node(*make_gate_node(planner, extract), "approval_gate"),
        destinations=("tools", "model", "approval_gate", *subagents),
    )
    # The tools and delegation nodes are reached by `Send` only, whose payload (a `ToolTask`)
    # reaches them as is: declaring it as their input schema would add its seven keys to the
    # graph as channels that every step of every run carries.
    builder.add_node(
        "tools",
        _node(run_tool, arun_tool, "tools", well_typed_task),
        destinations=("approval_gate", "model"),
    )
    builder.add_conditional_edges(START, _entry(planner), ["model"])
    for key, (subgraph, _) in subagents.items():
        delegate, adelegate = make_delegate_nodes(key, subgraph, ledger, planner.path_of)
        builder.add_node(key, _node(delegate, adelegate, key, accepts=None, fenced=False),
                         destinations=("approval_gate", "model"))
    return builder
