"""Builds an agent's LangGraph graph: `model` -> `approval_gate` -> `tools` -> `approval_gate`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import START, StateGraph

from graphkit.autoresume import make_extractor
from graphkit.nodes import make_gate_node, make_model_node, make_tools_nodes
from graphkit.state import AgentState, InputState, ToolTask

__all__ = ["build_graph"]


def build_graph(
    *,
    name: str,
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    instructions: str,
) -> StateGraph[AgentState, None, InputState, AgentState]:
    """The uncompiled graph; the agent compiles it with its checkpointer and store."""
    by_name: Mapping[str, BaseTool] = {tool.name: tool for tool in tools}
    call_model, acall_model = make_model_node(model, tools, instructions)
    run_tool, arun_tool = make_tools_nodes(by_name)

    builder = StateGraph(AgentState, input_schema=InputState)
    builder.add_node(
        "model",
        RunnableLambda(call_model, acall_model, name="model"),
        destinations=("approval_gate", "__end__"),
    )
    builder.add_node(
        "approval_gate",
        make_gate_node(by_name, name, make_extractor(model, by_name)),
        destinations=("tools", "model", "approval_gate"),
    )
    builder.add_node(
        "tools",
        RunnableLambda(run_tool, arun_tool, name="tools"),
        input_schema=ToolTask,
    )
    builder.add_edge(START, "model")
    builder.add_edge("tools", "approval_gate")
    return builder
