"""A graph for tests/test_server_auth.py that writes down who the server says is running it.

`model` and `approval_gate` each record `config["configurable"]["langgraph_auth_user"]` (its
type and identity) into the state; `approval_gate` pauses with `interrupt()` first, so its
record is made by the run that resumed it. `tools` only runs after the gate.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    seen: Annotated[list[dict[str, Any]], operator.add]
    decision: Any
    tools_ran: bool


def who(node: str, config: RunnableConfig) -> dict[str, Any]:
    """What the server put in this node's config for the authenticated user."""
    user = (config.get("configurable") or {}).get("langgraph_auth_user")
    if isinstance(user, Mapping):
        identity = user.get("identity")
    else:
        identity = getattr(user, "identity", None)
    return {"node": node, "type": type(user).__name__, "identity": identity,
            "has_identity_attr": hasattr(user, "identity"), "is_dict": isinstance(user, dict),
            "user_id": (config.get("configurable") or {}).get("langgraph_auth_user_id")}


def model(state: State, config: RunnableConfig) -> State:
    return {"seen": [who("model", config)]}


def approval_gate(state: State, config: RunnableConfig) -> State:
    decision = interrupt({"question": "run the tool?"})
    return {"seen": [who("approval_gate", config)], "decision": decision}


def tools(state: State, config: RunnableConfig) -> State:
    return {"seen": [who("tools", config)], "tools_ran": True}


builder = StateGraph(State)
builder.add_node("model", model)
builder.add_node("approval_gate", approval_gate)
builder.add_node("tools", tools)
builder.add_edge(START, "model")
builder.add_edge("model", "approval_gate")
builder.add_edge("approval_gate", "tools")
builder.add_edge("tools", END)
graph = builder.compile()
