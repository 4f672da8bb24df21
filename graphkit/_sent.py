"""A resume value is read only by the run that sent it, the way it sent it.

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
replaced): a plain value, which LangGraph gives the first pause to ask with no answer of its
own (a "shared" read), or values under interrupt ids, each its pause's own. A gate takes a
value (`taken`) only if its run sent it, and sent it so: a value read from the shared slot
counts only if the run sent it plain (the DBA's approve of p7 under its id, equal to the
plain approve a refused client had left, answered p8 too: helper-137). Any other is read as
no answer (the gate applies what the ledger holds, and asks again).

A graph that no door of an agent's starts (an agent's graph inside a user's own graph) says
nothing, and its gates take what they read: resume such a graph under interrupt ids.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.types import Command

from graphkit._digest import json_digest

try:
    from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
except ImportError:  # pragma: no cover - a LangGraph that keeps it elsewhere
    CONFIG_KEY_SCRATCHPAD = "__pregel_scratchpad"

__all__ = ["NO_ANSWER", "SENT_KEY", "is_resume_map", "stamped", "taken"]

T = TypeVar("T")

SENT_KEY = "__graphkit_sent"
"""Key of `config["configurable"]` holding the digests of what the run's resume sent, plain
and in all (LangGraph keeps keys starting with "__" out of checkpoint metadata)."""

NO_ANSWER: Any = object()
"""What `taken` returns for a value the run did not send."""

_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")


def is_resume_map(resume: Any) -> bool:
    """Whether LangGraph reads a resume as values under interrupt ids (a dict whose keys all
    are ids: `{}` too), not as one plain value for the pause that asks."""
    return isinstance(resume, dict) and all(
        isinstance(k, str) and _INTERRUPT_ID.fullmatch(k) for k in resume)


def stamped(config: RunnableConfig | None, input: Any) -> RunnableConfig:
    """`config` saying what `input` sends the thread's pauses: a `Command`'s plain resume
    value, or the values of its resume map (nothing, for graph input)."""
    config = config or {}
    plain: set[str] = set()
    mapped: set[str] = set()
    resume = input.resume if isinstance(input, Command) else None
    if isinstance(resume, dict) and is_resume_map(resume):
        mapped.update(_digest(v) for v in resume.values())
    elif resume is not None:
        plain.add(_digest(resume))
    sent = {"plain": tuple(sorted(plain)), "all": tuple(sorted(plain | mapped))}
    return {**config, "configurable": {**(config.get("configurable") or {}), SENT_KEY: sent}}


def taken(ask: Callable[[], T]) -> T:
    """`ask()` (a task's `interrupt`: the value it was resumed with, or `GraphInterrupt`),
    or `NO_ANSWER` where the run did not send that value, or not so."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # pragma: no cover - (not inside a run: nothing asks)
        return ask()
    # whether `ask` reads the run's plain value (the slot every task shares), the task having
    # no value of its own (LangGraph's scratchpad): asked before it reads, which fills it
    scratchpad = configurable.get(CONFIG_KEY_SCRATCHPAD)
    shared = scratchpad is not None and not getattr(scratchpad, "resume", None)
    value = ask()
    sent = configurable.get(SENT_KEY)
    if not isinstance(sent, dict):
        return value  # (no door of an agent's started the run: nothing to judge by)
    return value if _digest(value) in sent["plain" if shared else "all"] else NO_ANSWER


def _digest(value: Any) -> str:
    try:
        return json_digest(value)
    except (TypeError, ValueError):  # (keys of mixed types, a cycle)
        return json_digest(repr(value))
