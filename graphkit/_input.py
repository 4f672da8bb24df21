"""Which messages the graph input of the running invocation brought.

The conversation says what was said, not who said it, nor when: a run stopped before its first
node (`interrupt_before=["model"]`) leaves its input in the thread, and whoever continues the
thread (`invoke(None)`, a `Command`, an input without a message) runs the model node over it.
A reply read in its sender's name (auto-resume from graph input) must be what the sender's own
input brought.

LangGraph runs the graph's entry edge in the input's own step, as the run that sent it: there
`note_input` compares the state with the input against the state without it, and keeps what
the input brought for the next step of the same thread, in this process. The model node takes
it in that step only (`brought_by_this_run`), and never in a run LangGraph continues without
input. Nothing is kept in the graph state: no client can write it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AnyMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from graphkit._digest import json_digest

try:
    from langgraph._internal._constants import CONFIG_KEY_READ, CONFIG_KEY_RESUMING, NS_SEP
except ImportError:  # pragma: no cover - a LangGraph without them: no input is ever noted
    CONFIG_KEY_READ = CONFIG_KEY_RESUMING = NS_SEP = ""

__all__ = ["brought_by_this_run", "note_input"]

_KEPT = 10_000
"""Inputs noted and not taken yet (a run stopped before its first node leaves one)."""

_noted: OrderedDict[tuple[str, str, int], tuple[tuple[str | None, str, str], ...]] = OrderedDict()
"""What each input brought: (the id of a message it replaced, the type, the digest of the
content) per message; a digest, so that an input nobody reads back costs a few bytes."""
_lock = threading.Lock()


def note_input(state: Mapping[str, Any], config: RunnableConfig) -> None:
    """Note the messages this input brought, from the graph's entry edge: their type and
    content (LangGraph's reducer gives a message sent without an id a new one each time it
    reads the input), and the id of a message the input replaced (only that message is what
    the input brought, not another one that happens to say the same)."""
    where = _where(config)
    read = (config.get("configurable") or {}).get(CONFIG_KEY_READ) if CONFIG_KEY_READ else None
    if where is None or not callable(read):
        return
    before = read("messages", False)  # the channel as it was before this input's writes
    known = {m.id: m for m in before or () if isinstance(m, BaseMessage)}
    brought = tuple((str(m.id) if m.id in known else None, m.type, json_digest(m.content))
                    for m in state.get("messages") or ()
                    if isinstance(m, BaseMessage) and _new(known.get(m.id), m))
    thread, graph_ns, step = where
    with _lock:
        _noted[(thread, graph_ns, step + 1)] = brought
        while len(_noted) > _KEPT:
            _noted.popitem(last=False)


def brought_by_this_run(config: RunnableConfig, message: AnyMessage) -> bool:
    """Whether `message` came in the graph input of the invocation running this node, in
    the step before it. False in a run continued without input, and when nothing was noted
    (another process took the input, a LangGraph that does not say)."""
    conf: Mapping[str, Any] = config.get("configurable") or {}
    where = _where(config)
    if where is None or conf.get(CONFIG_KEY_RESUMING):
        return False
    with _lock:
        brought = _noted.pop(where, ())
    said = json_digest(message.content)
    return any((replaced is None or replaced == message.id) and kind == message.type
               and content == said for replaced, kind, content in brought)


def _new(before: BaseMessage | None, now: BaseMessage) -> bool:
    return before is None or (before is not now and before != now)


def _where(config: RunnableConfig) -> tuple[str, str, int] | None:
    """The thread, the graph's own namespace (its subgraph's, for a subagent), and the step."""
    conf: Mapping[str, Any] = config.get("configurable") or {}
    step = (config.get("metadata") or {}).get("langgraph_step")
    thread = conf.get("thread_id")
    if not NS_SEP or not isinstance(step, int) or thread is None:
        return None
    return str(thread), str(conf.get("checkpoint_ns") or "").rpartition(NS_SEP)[0], step
