"""What a new user message does to a thread whose calls wait, in the ledger, whichever door
brings it: the Agent API's `generate` (`_control.start_payload`), or the LangGraph server's
thread protocol, whose resume value (`{"messages": [...]}`) reaches a subagent's gate
(`_gate`), or a delegation node that will not run its subagent again (`_supervisor`).

The message never approves anything: what waits is declined as superseded (a decision taken
before it stands), the message is queued for after the top agent's turn, and the delegations
nothing decided below stops are settled as stopped. All of it is on disk before the graph
goes on, so a run that stops before its gate read the message loses nothing of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.messages import (
    BaseMessage,
    HumanMessage,
    convert_to_messages,
    messages_to_dict,
)
from langchain_core.runnables import RunnableConfig
from langgraph._internal._constants import (
    CONFIG_KEY_CHECKPOINT_MAP,
    CONFIG_KEY_RESUME_MAP,
)
from langgraph.errors import GraphInterrupt
from langgraph.types import interrupt

from graphkit._digest import json_digest
from graphkit._events import marked_waiting, with_waiting_beside
from graphkit._ledger import Ledger, NewRun, QueuedFor, Stop, queued_id, same_queued
from graphkit._limits import check_value
from graphkit._review import superseded
from graphkit._sent import NO_ANSWER, taken, waiting
from graphkit._state import RunOptions
from graphkit.errors import GraphkitError
from graphkit.types import ApprovalRecord

__all__ = [
    "BY_NEW_MESSAGE",
    "DELEGATION_STOPPED",
    "STOPPED_WAITING",
    "asked_unseen",
    "check_reply",
    "mapped_messages",
    "message_input",
    "resumed_answer",
    "resumed_message",
    "resumed_with",
    "said_of",
    "says_nothing",
    "stop_delegations",
    "stopped_above",
    "take_for_the_top",
    "take_new_message",
]

BY_NEW_MESSAGE = "superseded by a new user message"
"""The comment on a decline the system made because the user said something new."""
DELEGATION_STOPPED = ("Delegation {name!r} was stopped by a new user message; it may have done "
                      "part of its work. It will not go on.")
STOPPED_WAITING = ("Tool call {name!r} was superseded by a new user message while it waited "
                   "for input; it may have done part of its work. It will not go on unless "
                   "called anew.")
"""What the model reads of a call that suspended itself (it started) and that a new message
stopped: never "not run" (helper-121)."""


def check_reply(messages: Sequence[BaseMessage],
                queued: Mapping[str | None, Mapping[str, Any]]) -> None:
    """While calls wait, a new input is queued, to join the conversation once the turn is
    over, where it is delivered by its id, and only the user's messages are: anything else,
    or a message under the id of another the queue (`queued`: its entries by id) holds,
    would be acted on and never shown, or queued for good. Refused before anything changes.
    A message the queue holds as it is (a client's retry) is taken again: it is queued
    once."""
    if not messages:  # (it would decline what waits, and say nothing: helper-132)
        msg = "while tool calls wait, a new input must carry the user's message (none given)"
        raise GraphkitError(msg)
    others = sorted({type(m).__name__ for m in messages if not isinstance(m, HumanMessage)})
    if others:
        msg = (f"while tool calls wait, a new input must be the user's messages "
               f"(HumanMessage), got {others}: it joins the conversation once the turn is over")
        raise GraphkitError(msg)
    if any(says_nothing(m) for m in messages):
        msg = "while tool calls wait, each new user message must say something (empty content)"
        raise GraphkitError(msg)
    reused = sorted({str(m.id) for m in messages if not same_queued(queued.get(m.id), m)})
    if reused:
        msg = (f"message ids {reused} are queued to join the conversation with other "
               "messages: a new message needs an id of its own (or none)")
        raise GraphkitError(msg)


def says_nothing(message: BaseMessage) -> bool:
    """Whether a message has no words and nothing else (an image says something): no content,
    blank text, or only blank text blocks (`[{"type": "text", "text": ""}]` declined what
    waited and joined the conversation empty: helper-132)."""
    content = message.content
    if isinstance(content, str):
        return not content.strip()
    return not message.text.strip() and all(
        isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text")
        for b in content)


def stop_delegations(ledger: Ledger, waits: Iterable[tuple[Sequence[str], str]], *,
                     thread_id: str) -> None:
    """Settle as stopped the delegations a new user message stops (those no decision below
    them works for: `Ledger.take_message`'s `Stop`), once the message superseded what waits;
    their delegation node answers so, and never runs their subagents again."""
    ledger.take_message(thread_id, declines=(), queue=None, run=None,
                        stop=Stop(list(waits), (), DELEGATION_STOPPED))


def take_new_message(ledger: Ledger, *, thread_id: str, top: Sequence[str],
                     found: Sequence[tuple[str, ApprovalRecord]],
                     said: Sequence[Mapping[str, Any]], auto: bool,
                     plan: Mapping[str, Any] | None, run_id: str | None,
                     decided_by: str | None = None, vouched: bool = True,
                     new_run: tuple[RunOptions, str | None] | None = None) -> bool:
    """Record what the user's new message `said` (serialised, with ids) does while `found`
    (the paused run's interrupts' records, at any depth) waits: `top` is the path of the
    thread's top agent, `plan` the ledger's plan of its last turn, `auto` whether auto-resume
    may read a suspended tool's data from the message. `vouched`: the Agent API's own message
    (a client's is judged by the approvers policy where it answers a tool); `new_run`: the
    request's options and the caller that holds the run it starts (the API's). Returns
    whether the message is queued for the top agent's turn (no gate below queues it again)."""
    # (what the agent's gates wait on beside the interrupts is superseded too)
    everything = with_waiting_beside(list(found), ledger, thread_id, top[0] if top else None)
    rows = ledger.approvals(r["id"] for _, r in everything)
    decided = any(row.decided for row in rows.values())
    reads_data = auto and any(r["kind"] == "suspension" for _, r in found)
    # What the message does is recorded here, before the graph runs, not only carried in the
    # resume value: a run stopped before its gate read that value (`on_state_change` at its
    # first step, a process that died) would lose it, and the next resume (any door's) asks
    # afresh. So the message goes into the plan's queue, to reach the conversation once the
    # turn settles, and what waits is superseded in the ledger (a decision recorded before
    # the message, in the inbox say, still runs first): the gate applies those declines like
    # any other, whoever resumes it. A supervisor whose subagent waits queues it the same way.
    # Where auto-resume may read a suspended tool's data from the message, and nothing was
    # decided, what waits is left to the gate: it reads that data from the resume value only
    # (a decline it found in the ledger would apply without reading it). The message is
    # queued all the same: a run stopped before its gate leaves the tool asking, and the
    # message waiting to be delivered once the turn settles.
    durable = decided or (plan is not None and not reads_data)
    queue_here = plan is not None or durable or any(len(r["agent_path"]) > 1 for _, r in found)
    undecided = [record for _, record in everything
                 if (row := rows.get(record["id"])) is not None and not row.decided]
    below = [record for _, record in everything
             if len(record["agent_path"]) > 1 and record.get("call_key")]
    chains = ({r["id"]: ledger.delegations_of_call(str(r["call_key"])) for r in below}
              if durable or reads_data else {})
    kept = {r["id"] for r in below if auto and r["kind"] == "suspension"}
    read_at = {tuple(r["agent_path"]) for r in below if r["id"] in kept}
    # Where auto-resume reads a suspended tool's data, a subagent's undecided approval is
    # declined here too, and its delegation stopped below: left to its gate, the subagent was
    # told its call did not run and asked again (helper-92, helper-94). One beside the
    # suspension, in the subagent whose gate reads it, is left to that gate (a decline applied
    # there first skipped reading: helper-97).
    declines = [superseded(record, comment=BY_NEW_MESSAGE, thread_id=thread_id, run_id=run_id,
                           decided_by=decided_by) for record in undecided
                if (durable or (reads_data and record["id"] in chains
                                and tuple(record["agent_path"]) not in read_at))
                and not (auto and record["kind"] == "suspension")]
    # (`_reply.left_queued` reads the queue too)
    queue = (QueuedFor("/".join(top), str(plan.get("ai_message_id")), said, vouched)
             if queue_here and plan else None)
    # The run can go on from the ledger alone once nothing waits on a person: it is queued
    # for the workers, held by the caller, who runs it next (a stream left, or a process
    # dying, before the run went on lets the hold lapse: a worker goes on). So is a run whose
    # gate may read a suspended tool's data from the message: left after its gate took the
    # data, it goes on; left before, its gate asks again.
    run = (NewRun(run_id, top[0], new_run[0], new_run[1])
           if new_run is not None and new_run[1] is not None and run_id is not None and top
           and plan is not None and (reads_data or (durable and len(declines) == len(undecided)))
           else None)
    # A delegation with nothing decided below it is stopped, as graph input stops it
    # (`_reply`): its subagent, whose calls the message superseded, went on to its model, which
    # could plan again and ask again (helper-92). Its node answers so on resume.
    stop = (Stop([(chains[r["id"]], r["id"]) for r in below], kept, DELEGATION_STOPPED)
            if (durable or reads_data) and below else None)
    # Asked of nobody, at any depth, a question is superseded whatever else the message
    # does (it cannot be what auto-resume reads the message for: helper-147)
    unseen = asked_unseen(ledger, thread_id)
    if declines or queue is not None or run is not None or stop is not None or unseen:
        ledger.take_message(thread_id, declines=declines, queue=queue, run=run, stop=stop,
                            settle=unseen)
    return queue_here


def asked_unseen(ledger: Ledger, thread_id: str, plan: Mapping[str, Any] | None = None
                 ) -> dict[str, dict[str, Any]]:
    """The answers of the thread's calls (with `plan`, of its calls only) that suspended
    themselves in a step whose gate has not run yet, so that nobody was asked (a tool beside
    a delegation that waits: the gate asks once that step ends), for a new message to
    supersede with what it supersedes: left, the message's run asked it, the message
    unanswered (helper-145, helper-146, helper-147)."""
    if plan is None:
        asked = ledger.asked_in(thread_id)
    else:
        open_calls = {c["key"]: c["tool_name"] for c in plan.get("calls") or []
                      if c.get("suspension") is None and c.get("answer") is None}
        asked = {key: open_calls[key] for key in ledger.asked_of(open_calls, thread_id)}
    return {key: {"content": STOPPED_WAITING.format(name=name), "status": "error"}
            for key, name in asked.items()}


def message_input(value: Mapping[str, Any]) -> bool:
    """Whether a resume value is graph input's new message (`{"messages": [...]}`, as
    LangGraph's server resumes a paused thread with a run's input): a 'supersede' to every
    reader of the value (one that looked for the key alone left it unread after a decision
    taken elsewhere, and the message was lost: helper-129)."""
    return set(value) == {"messages"}


def resumed_with(field: str) -> bool:
    """Whether this task was resumed with a value carrying `field` (a client's
    `Command(resume={"decisions": [...]})`; "supersede": a new message, `message_input`'s
    too), which its `interrupt()` would return at once: LangGraph's scratchpad holds the
    value for the task, or as a resume for every task. (The API's and the workers' decisions
    carry none: they are in the ledger.)"""
    value = waiting()
    return isinstance(value, Mapping) and (
        field in value or (field == "supersede" and message_input(value)))


def resumed_message() -> Any | None:
    """The messages of a `{"messages": [...]}` value this task was resumed with, taken (no
    later `interrupt` of the run reads it); None where there is none."""
    value = _resumed_value("supersede")
    return value["messages"] if isinstance(value, Mapping) and message_input(value) else None


def resumed_answer() -> Mapping[str, Any] | None:
    """A client's answer this task was resumed with, taken: its decisions
    (`{"decisions": [...]}`), or a new message as `{"messages": [...]}`; None where there is
    none. The API's and the workers' resumes answer nothing: their decisions are in the
    ledger."""
    if not resumed_with("decisions"):
        raw = resumed_message()
        return None if raw is None else {"messages": raw}
    value = _resumed_value("decisions")
    return value if isinstance(value, Mapping) else None


def _resumed_value(field: str) -> Any | None:
    """The value carrying `field` this task was resumed with, taken, if its run sent it
    (`_sent.taken`: another run's, kept in the checkpoint, is none). LangGraph's scratchpad
    still shows a plain resume another task took already: `interrupt` then pauses, which
    here only means there is nothing to read."""
    if not resumed_with(field):
        return None
    try:
        value = taken(lambda: interrupt(None))
    except GraphInterrupt:
        return None
    return None if value is NO_ANSWER else value


def mapped_messages(config: RunnableConfig) -> list[Any]:
    """The messages of the `{"messages": [...]}` values a resume map (`{interrupt id:
    value}`) gives this run's pauses: a delegation node that answers from the ledger never
    runs the subagent whose gate a value names, and reads them itself (the same message
    read by several is queued once: `said_of`)."""
    found = (config.get("configurable") or {}).get(CONFIG_KEY_RESUME_MAP)
    if not isinstance(found, Mapping):
        return []
    return [v["messages"] for v in found.values() if isinstance(v, Mapping) and message_input(v)]


def said_of(raw: Any, config: RunnableConfig, *, keep_ids: bool) -> tuple[
        list[BaseMessage], list[dict[str, Any]]]:
    """A resume value's messages, parsed, and serialised with ids (`keep_ids`: those they
    have). An id is made from the checkpoint the thread's run goes on from and the message:
    every task of one resume that reads it (two subagents' gates the same value resumed)
    and a retry of it make the same, and queue the message once (one made from each task's
    namespace queued it twice: helper-132)."""
    check_value(raw, what="the resume value's messages", error=GraphkitError)
    try:
        messages = convert_to_messages(raw if isinstance(raw, list) else [raw])
    except (ValueError, TypeError, NotImplementedError) as exc:
        msg = f"the resume value's 'messages' are not messages: {exc}"
        raise GraphkitError(msg) from None
    conf = config.get("configurable") or {}
    found = conf.get(CONFIG_KEY_CHECKPOINT_MAP)
    root = found.get("") if isinstance(found, Mapping) else None  # (LangGraph's own entry)
    base = str(root or conf.get("checkpoint_ns") or "")
    said = messages_to_dict([m if m.id and keep_ids else m.model_copy(update={
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL,
                             f"graphkit:{base}:{i}:{json_digest(messages_to_dict([m]))}"))})
        for i, m in enumerate(messages)])
    return messages, said


def take_for_the_top(ledger: Ledger, *, thread_id: str, top: Sequence[str], start: str,
                     messages: Sequence[BaseMessage], said: Sequence[Mapping[str, Any]],
                     run_id: str | None, decided_by: str | None) -> bool:
    """A new message that reached a subagent (its gate, or a delegation node), as the
    LangGraph server's thread protocol sends it: the user speaks to the top agent, whose
    conversation it joins, so it does what the API's new message does (`take_new_message`)
    for everything the top agent's gates wait on, at any depth, beside or below (only the
    reader's own waits, or those above it, left the supervisor's own call and a sibling
    subagent's waiting, to run once approved: helper-132); as a client's, never the API's.
    `start`: the delegation call the reader works for (a gate's scope), or runs (a
    delegation node's). As graph input's message through the server's runs API does, it
    answers no suspended tool of a subagent (it supersedes it). Returns whether it stopped
    the delegation of `start` or one above it: what the reader works for goes no further."""
    check_reply(messages, {queued_id(q.message): q.message
                           for q in ledger.queue_rows(thread_id, top[0])})
    chain = [start, *ledger.delegations_of_call(start)]
    link = ledger.call_links([chain[-1]]).get(chain[-1])
    plan = (ledger.turn(thread_id, top, link.turn_key)
            if link is not None and link.agent_path == top[0] and link.turn_key else None)
    if plan is None:  # (nothing to queue it for: refused, not lost)
        msg = ("a new message reached a subagent whose supervisor's turn the ledger does not "
               "hold; nothing was changed")
        raise GraphkitError(msg)
    found = marked_waiting(ledger, thread_id, lambda w: list(w.row.agent_path)[:1] == list(top))
    take_new_message(ledger, thread_id=thread_id, top=top, found=found, said=said, auto=False,
                     plan=plan, run_id=run_id, decided_by=decided_by, vouched=False)
    # (settled now, by this message or by the same one another gate of this resume took
    # first: that gate's reader went on to its model, which asked again: helper-134)
    return stopped_above(ledger, start)


def stopped_above(ledger: Ledger, start: str) -> bool:
    """Whether the delegation call `start` (a subagent's scope) has its answer in the ledger
    already: a new message stopped it (`Stop` settles every delegation of a wait's chain), and
    what works for it goes no further."""
    link = ledger.call_links([start]).get(start) if start else None
    return link is not None and link.done
