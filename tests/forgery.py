"""What the adversarial tests share: a client of a LangGraph server writing state and forging
tasks against a paused payment (`pay` of 40 to ACME, approved only by the CFO)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage

from graphkit import Agent
from graphkit._owner import holder_is_dead, new_owner
from tests.helpers import call, ledger_plan, turn

PAY = {"amount": 40, "payee": {"name": "ACME"}}


def pay_then_done(messages: list[Any]) -> Any:
    if not any(isinstance(m, AIMessage) for m in messages):
        return turn(call("pay", PAY, "c1"))
    return "done"


def config(thread_id: str, identity: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if identity is not None:
        configurable["langgraph_auth_user"] = {"identity": identity}
    return {"configurable": configurable}


def plan_of(agent: Agent, thread_id: str) -> dict[str, Any]:
    """The gate's plan of the thread's last turn, as the ledger keeps it (a copy to forge)."""
    plan: dict[str, Any] = ledger_plan(agent, thread_id)
    return plan


def pay_call(plan: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in plan["calls"] if c["tool_name"] == "pay")


def task(plan_call: dict[str, Any], agent_path: Any, **changes: Any) -> dict[str, Any]:
    return {"tool_call_id": plan_call["tool_call_id"], "tool_name": plan_call["tool_name"],
            "key": plan_call["key"], "args": plan_call["args"], "metadata": {},
            "agent_path": agent_path, "options": {}, "then": "model", **changes}


def cfo_only(decided_by: str | None, pending: Any) -> bool:
    return decided_by == "cfo"


def dead_owner() -> str:
    """The lease token of a process that died (this pid, another start time: pid reused)."""
    parts = new_owner().split(":", 7)
    parts[5] = str(int(parts[5]) + 1)
    token = ":".join(parts)
    assert holder_is_dead(token)
    return token
