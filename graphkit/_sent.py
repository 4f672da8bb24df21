"""A resume value is read only by the run that sent it.

LangGraph keeps the value a run resumed a thread with in the checkpoint it resumed (a pending
write), for the tasks that run from there. Where a subagent's gate took it, refused it and
asked again, the supervisor's checkpoint did not move on, and the next run that resumed the
thread without a value of its own for that gate (`Command(resume={})`, the documented "go
on"; an interrupt id gone stale) had the gate read the refused client's value again, judged as
that run's user: a client the policy refused had its approval, or its edited arguments, taken
as the approver's who went on next (helper-136). Identity comes from the run, so a value must
be the run's own.

The doors of an agent's graph (`LeasedGraph`: the API's, the server's, `invoke`) say what
their run sends (`stamped`, in the run's config, where a client's key of the same name is
replaced); a gate takes only a value its run sent (`sent_here`), and reads any other as no
answer (it applies what the ledger holds, and asks again). A value equal to one the run sent
is taken: its sender sent that very value.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.types import Command

from graphkit._digest import json_digest

__all__ = ["SENT_KEY", "sent_here", "stamped"]

SENT_KEY = "__graphkit_sent"
"""Key of `config["configurable"]` holding the digests of what the run's resume sent (LangGraph
keeps keys starting with "__" out of checkpoint metadata)."""


def stamped(config: RunnableConfig | None, input: Any) -> RunnableConfig:
    """`config` saying what `input` sends the thread's pauses: a `Command`'s resume value,
    and each value of a resume map (nothing, for graph input)."""
    config = config or {}
    sent: set[str] = set()
    if isinstance(input, Command) and input.resume is not None:
        sent.add(_digest(input.resume))
        if isinstance(input.resume, dict):
            sent.update(_digest(v) for v in input.resume.values())
    return {**config, "configurable": {**(config.get("configurable") or {}),
                                       SENT_KEY: tuple(sorted(sent))}}


def sent_here(value: Any) -> bool:
    """Whether the run this task is in sent `value` (a run no door of an agent's graph
    started, as a user's own graph around the agent's, says nothing: taken)."""
    try:
        sent = (get_config().get("configurable") or {}).get(SENT_KEY)
    except RuntimeError:  # (not inside a run)
        return True
    return sent is None or _digest(value) in sent


def _digest(value: Any) -> str:
    try:
        return json_digest(value)
    except (TypeError, ValueError):  # (keys of mixed types, a cycle)
        return json_digest(repr(value))
