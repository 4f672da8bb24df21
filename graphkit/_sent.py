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
plain approve a refused client had left, answered p8 too: helper-137); one the task holds as
its own, only if the run sent it under one of the task's interrupt ids (not to another
pause). A value the task holds that the run did not send so (one a refused client left on a
fork's checkpoint) is read past, to the one the run sent after it (helper-138). Where the
run sent none, the read is no answer (the gate applies what the ledger holds, and asks
again).

A graph that no door of an agent's starts (an agent's graph inside a user's own graph) says
nothing, and its gates take what they read (docs/trust.md says so).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.errors import GraphInterrupt
from langgraph.types import Command

from graphkit._digest import json_digest

try:
    from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
except ImportError:  # pragma: no cover - a LangGraph that keeps it elsewhere
    CONFIG_KEY_SCRATCHPAD = "__pregel_scratchpad"
try:
    from langgraph.types import _interrupt_id
except ImportError:  # pragma: no cover - a LangGraph that names its interrupts otherwise
    _interrupt_id = None  # type: ignore[assignment]

__all__ = ["NO_ANSWER", "SENT_KEY", "is_interrupt_id", "is_resume_map", "stamped", "taken",
           "waiting"]

SENT_KEY = "__graphkit_sent"
"""Key of `config["configurable"]` holding the digests of what the run's resume sent: its
plain value, and its values by interrupt id (LangGraph keeps keys starting with "__" out of
checkpoint metadata)."""

NO_ANSWER: Any = object()
"""What `taken` returns for a value the run did not send."""

_INTERRUPT_ID = re.compile(r"[0-9a-f]{32}")


def is_interrupt_id(key: Any) -> bool:
    """Whether a resume map's key is an interrupt id, as LangGraph tells one."""
    return isinstance(key, str) and _INTERRUPT_ID.fullmatch(key) is not None


def is_resume_map(resume: Any) -> bool:
    """Whether LangGraph reads a resume as values under interrupt ids (a dict whose keys all
    are ids: `{}` too), not as one plain value for the pause that asks."""
    return isinstance(resume, dict) and all(is_interrupt_id(k) for k in resume)


def stamped(config: RunnableConfig | None, input: Any) -> RunnableConfig:
    """`config` saying what `input` sends the thread's pauses: a `Command`'s plain resume
    value, or the values of its resume map (nothing, for graph input)."""
    config = config or {}
    plain: tuple[str, ...] = ()
    mapped: dict[str, str] = {}
    resume = input.resume if isinstance(input, Command) else None
    if isinstance(resume, dict) and is_resume_map(resume):
        mapped = {k: _digest(v) for k, v in resume.items()}
    elif resume is not None:
        plain = (_digest(resume),)
    sent = {"plain": plain, "mapped": mapped}
    return {**config, "configurable": {**(config.get("configurable") or {}), SENT_KEY: sent}}


def taken(ask: Callable[[], Any]) -> Any:
    """`ask()` (a task's `interrupt`: the value it was resumed with, or `GraphInterrupt`),
    or `NO_ANSWER` where the run did not send that value, or not so.

    A value the task holds as its own that the run did not send is another run's, kept in the
    checkpoint the run resumed (a fork's, where a refused client's run had left it): the read
    goes on past it, to what the run sent after (read first and judged no answer, it hid the
    later run's decision, or message, which was never read: helper-138)."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # pragma: no cover - (not inside a run: nothing asks)
        return ask()
    sent = configurable.get(SENT_KEY)
    if not isinstance(sent, dict):
        return ask()  # (no door of an agent's started the run: nothing to judge by)
    # a read of the task's own values leaves them as they are; one of the run's plain value
    # (the slot every task shares, read once the task's own are all read) adds it to them
    held = _held(configurable)
    before = len(held)
    value = ask()
    while True:
        shared = len(held) > before
        if _digest(value) in (sent["plain"] if shared else _own(configurable, sent, held)):
            return value
        if shared:
            return NO_ANSWER
        before = len(held)
        try:
            value = ask()  # (the task's next value, or the run's plain one)
        except GraphInterrupt:
            return NO_ANSWER  # (nothing more: the caller asks)


def waiting() -> Any:
    """The value a read of this task (`taken`) would take first, without reading it, or
    `NO_ANSWER`. (LangGraph's scratchpad shows the values a pass took already too: a read
    then pauses, which a caller reads as nothing more.)"""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:
        return NO_ANSWER
    held = _held(configurable)
    # (the run's plain value, unless a task took it already)
    peek = getattr(configurable.get(CONFIG_KEY_SCRATCHPAD), "get_null_resume", None)
    plain = peek(False) if callable(peek) else None
    sent = configurable.get(SENT_KEY)
    if not isinstance(sent, dict):
        return held[0] if held else NO_ANSWER if plain is None else plain
    own = _own(configurable, sent, held)
    mine = next((v for v in held if _digest(v) in own), NO_ANSWER)
    if mine is not NO_ANSWER or plain is None:
        return mine
    return plain if _digest(plain) in sent["plain"] else NO_ANSWER


def _own(configurable: Mapping[str, Any], sent: Mapping[str, Any], held: list[Any]
         ) -> set[str]:
    """Digests of the values the run sent under this task's interrupt ids: LangGraph gives a
    task the value under the id of the answer it waits for next, or under its first id. Not
    any value the run sent: one it sent another pause, equal to a value this task held from
    another run, was taken here as this run's (pooled, a refused client's approve on a fork
    answered one pause because the next run approved another)."""
    mapped = sent.get("mapped") or {}
    ns = configurable.get("checkpoint_ns")
    if _interrupt_id is None or not isinstance(ns, str):  # pragma: no cover
        return set(mapped.values())
    return {d for i in range(len(held) + 1) if (d := mapped.get(_interrupt_id(ns, i)))}


def _held(configurable: Mapping[str, Any]) -> list[Any]:
    """The values the task holds as its own (LangGraph's scratchpad: kept in the checkpoint
    for its interrupts, and the value a resume map gives it)."""
    held = getattr(configurable.get(CONFIG_KEY_SCRATCHPAD), "resume", None)
    return held if isinstance(held, list) else []


def _digest(value: Any) -> str:
    try:
        return json_digest(value)
    except (TypeError, ValueError):  # (keys of mixed types, a cycle)
        return json_digest(repr(value))
