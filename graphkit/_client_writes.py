"""What a client wrote into the conversation, and what the model node makes of it.

A LangGraph server lets any client of a thread send it graph input: tool results for calls
that never ran, messages while a gated call waits, a new user message after a run that stopped
with calls unanswered. The conversation says what was said, not who wrote it: the ledger does.
These checks compare the two before the model reads a word: a result the ledger did not record
is replaced by a notice, what came while a call waited is dropped unless a user said it, and a
user's message supersedes the calls its turn left unanswered.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any, cast

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from graphkit._approvals import new_id, same_content
from graphkit._gate import (
    STILL_RUNNING,
    UNACCOUNTED,
    supersede_abandoned,
    supersede_unanswered,
    suspended_itself,
)
from graphkit._new_message import says_nothing
from graphkit._planner import GateContext
from graphkit._reply import turn_span
from graphkit._review import audit_row, supersede
from graphkit._state import AgentState, CallPlan, TurnPlan, turn_key

__all__ = [
    "discard_forged",
    "drop_written_while_waiting",
    "from_user",
    "last_planned",
    "left_to_the_gate",
    "readable",
    "refused_turn",
    "stopped_turn",
    "unplanned_turn",
    "untied_result",
    "with_fixes",
]

ORPHAN = ("A tool result written from outside the agent, for no call of the current turn, "
          "was discarded: nothing ran.")
DISCARDED = ("Tool call {name!r} did not run: a result for it was written from outside the "
             "agent (not by its tools node) and was discarded.")
DISCARDED_STARTED = ("Tool call {name!r} was stopped while it waited for input: a result for "
                     "it was written from outside the agent (not by its tools node) and was "
                     "discarded. It had started, and may have done part of its work; it will "
                     "not go on unless called anew.")
"""`DISCARDED` for a call that suspended itself, and so started: never "did not run"
(helper-125)."""
DISCARDED_DELEGATION = ("Delegation {name!r} was stopped: a result for it was written from "
                        "outside the agent (not by its tools node) and was discarded. It may "
                        "have done part of its work; it will not go on.")
"""`DISCARDED` for a delegation that went out (its subagent's tools may have run: helper-126)."""
DROPPED = ("{count} message(s) written from outside the agent while this call waited, none of "
           "them a user's, were dropped: only a user message ends a wait.")
WRITTEN_FOR_DELEGATION = "a client wrote a result for the delegation it works for"
SECOND = ("A second result for tool call {name!r}, written from outside the agent, was "
          "discarded: the call already has its answer, the one recorded for it.")
"""(Whether it ran or not: its answer may be a notice the gate gave, a suspended call's that
was stopped, say, which "the call ran" contradicted: helper-126.)"""
RESTORED = ("A result for tool call {name!r}, written from outside the agent over the one its "
            "tools node recorded, was discarded: the recorded result stands.")
REWRITTEN = ("Tool call {name!r} did not run: the model's message was rewritten from outside the "
             "agent (under its id); only the model writes its calls.")
WRITTEN = ("Tool call {name!r} did not run: it was written into the conversation from outside "
           "the agent (not by its model); only the model writes its calls.")


def _audit_refused(ctx: GateContext, notices: Sequence[ToolMessage]) -> None:
    """Audit as refused each call a notice answers in a result's place (the notice says why)."""
    if notices:
        ctx.ledger.audit([audit_row(
            "refused", {"tool_name": m.name, "tool_call_id": m.tool_call_id},
            thread_id=ctx.thread_id, run_id=ctx.run_id, detail=str(m.content))
            for m in notices])


def _moved_after(messages: list[AnyMessage], later: int, answers: list[ToolMessage]
                 ) -> tuple[list[AnyMessage], list[BaseMessage]]:
    """`answers` right after a turn whose results end at `later`: the conversation as the
    model reads it, and the writes that make the state say the same."""
    read = [*messages[:later], *answers, *messages[later:]]
    return read, _rewritten(messages, read, later)


def _rewritten(messages: list[AnyMessage], read: list[AnyMessage], at: int
               ) -> list[BaseMessage]:
    """The writes that make the state's `messages` say `read`, the two alike before `at`:
    what came from `at` on is removed, then written again in its new order. A message there
    without an id (graph input may bring one: LangGraph's delta reducer names none) cannot
    be removed alone: the whole conversation is written again instead."""
    if any(m.id is None for m in messages[at:]):
        return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *read]
    return [*(RemoveMessage(id=str(m.id)) for m in messages[at:]), *read[at:]]


def _orphans(messages: Sequence[AnyMessage]) -> list[ToolMessage]:
    """Tool results that answer no call of the last model turn with calls before them, or
    that come after the last model reply and answer none of its calls: written by a client
    (for a call nobody made, or after a turn that is over), never by graphkit. (Words a
    client wrote between a turn and a result do not hide the result: helper-83.)"""
    orphans: list[ToolMessage] = []
    asked: set[Any] = set()
    for message in messages:
        if isinstance(message, AIMessage):
            asked = {c.get("id") for c in message.tool_calls} if message.tool_calls else asked
        elif (isinstance(message, ToolMessage) and message.tool_call_id not in asked
              and message.content != ORPHAN):
            orphans.append(message)
    last = next((i for i in range(len(messages) - 1, -1, -1)
                 if isinstance(messages[i], AIMessage)), None)
    if last is not None:
        replied = {c.get("id") for c in getattr(messages[last], "tool_calls", None) or []}
        found = {id(m) for m in orphans}
        orphans += [m for m in messages[last + 1:] if isinstance(m, ToolMessage)
                    and m.tool_call_id not in replied and id(m) not in found]
    return orphans


def discard_forged(state: AgentState, plan: TurnPlan | None, ctx: GateContext
                    ) -> list[ToolMessage]:
    """Tool results the ledger did not record, replaced in place by a notice.

    A client can append a ToolMessage for a call that never ran (Agent Chat UI does, when its
    user types instead of deciding), or for a call of a turn that is over: the model must not
    be told that it ran. What waited for such a call is declined as superseded.
    """
    messages = list(state.get("messages") or [])
    fixes = [ToolMessage(ORPHAN, tool_call_id=m.tool_call_id, id=m.id, name=m.name,
                         status="error") for m in _orphans(messages)]
    _audit_refused(ctx, fixes)
    turns = _turns_back(messages)
    if not plan or not turns or messages[turns[0]].id != plan["ai_message_id"]:
        # turns no model node wrote after the last one planned (or none planned): their
        # results, then (below) the planned turn's own
        fixes += _unplanned_results(messages, ctx)
    plans = [plan] if plan else []
    own = ({w.turn_key for w in ctx.pending_turns() if w.agent_path in (None, ctx.agent)}
           if len(turns) > 1 else set())
    # and those of a turn of this agent's that still waits, wherever it is: a planned turn a
    # client wrote again after it (removed and added back) hid it (helper-87)
    for index in turns if own else ():
        key = turn_key(messages[index], ctx.scope)
        if key in own and (not plan or messages[index].id != plan["ai_message_id"]):
            found = ctx.turn(key)
            plans += [found] if found is not None else []
    stopped: list[str] = []
    for checked in plans:
        fixes += _results_checked(messages, checked, ctx, stopped)
    last = next((index for index in turns if plan and messages[index].id ==
                 plan["ai_message_id"]), None)
    read: dict[str, set[str]] = {}  # (the calls `_results_checked` read, by message id)
    for each in plans:
        read.setdefault(each["ai_message_id"], set()).update(
            c["tool_call_id"] for c in each["calls"])
    fixes += _recorded_results(messages, turns, read, ctx, last)
    if stopped:
        # a delegation answered so is stopped: what waits beneath it is declined now, not
        # left listed as pending, approved later and never run (helper-100)
        supersede_abandoned(messages, ctx, beneath=WRITTEN_FOR_DELEGATION)
    return fixes


def _results_checked(messages: list[AnyMessage], plan: TurnPlan, ctx: GateContext,
                     stopped: list[str]) -> list[ToolMessage]:
    """The fixes for the results of a planned turn's calls (every one before the next turn
    with calls): for a call with an outcome recorded, `_matched`'s; for one without, a
    notice in a client's result's place, what waited for the call declined as superseded,
    and the call recorded as not run (the keys of delegations so stopped go in
    `stopped`)."""
    calls = {c["tool_call_id"]: c for c in plan["calls"]}
    turn = next((i for i, m in enumerate(messages) if m.id == plan["ai_message_id"]), None)
    answers = [(message, calls[message.tool_call_id])
               for message in (_results_after(messages, turn) if turn is not None else [])
               if message.tool_call_id in calls]
    if not answers:
        return []
    fixes: list[ToolMessage] = []
    outcomes = ctx.outcomes(call["key"] for _, call in answers)
    ran: dict[str, list[ToolMessage]] = {}  # (the results of calls with an outcome recorded)
    for message, call in answers:
        # (whatever it says: the words of the tools node's refusal, which the ledger does not
        # record, written by a client, ended the call's wait, and its approval, taken later,
        # never ran: helper-101)
        if outcomes.get(call["key"]) is not None:
            ran.setdefault(call["key"], []).append(message)
            continue
        if _unheld(message, call["tool_name"]):
            continue
        text = _discarded(call)
        for record in (call["approval"], call["suspension"]):
            if record is not None:
                supersede(ctx.ledger, record, comment="a client wrote a result for the call",
                          thread_id=ctx.thread_id, run_id=ctx.run_id, detail=text)
        notice = ToolMessage(text, tool_call_id=message.tool_call_id, id=message.id,
                             name=call["tool_name"], status="error")
        _audit_refused(ctx, [notice])
        ctx.ledger.settle({call["key"]: {"content": text, "status": "error"}},
                          thread_id=ctx.thread_id)
        if call["node"] != "tools":
            stopped.append(call["key"])
        fixes.append(notice)
    by_key = {call["key"]: call for _, call in answers}
    for key, given in ran.items():
        fixes += _matched(given, [(by_key[key]["tool_name"], cast(dict[str, Any],
                                                                   outcomes[key]))], ctx)
    return fixes


def _against_recorded(message: ToolMessage, name: str, recorded: dict[str, Any] | None,
                      ctx: GateContext) -> list[ToolMessage]:
    """The fix, if any, for `message`, a result of a call with an outcome recorded, but not
    that one (`recorded`: the outcome no result of the call's turn says; None: each is said,
    by the call's own results): a notice for a second result; else the recorded result,
    back in its place. A recorded result a client rewrote in place (under its id) was told
    "did not run", and the model had a payment that ran made again, which a reviewer
    reading the same would approve; in an earlier turn, it reached the model as written
    (helper-101)."""
    if recorded is None:  # a second result, for a call that has its own: it ran
        if message.content == SECOND.format(name=name):  # (noticed before)
            return []
        notice = ToolMessage(SECOND.format(name=name), tool_call_id=message.tool_call_id,
                             id=message.id, name=name, status="error")
        _audit_refused(ctx, [notice])
        return [notice]
    _audit_refused(ctx, [ToolMessage(RESTORED.format(name=name), name=name,
                                     tool_call_id=message.tool_call_id)])
    return [ToolMessage(recorded.get("content", ""), id=message.id, name=name,
                        tool_call_id=message.tool_call_id,
                        status=recorded.get("status") or "success")]


def _recorded_results(messages: list[AnyMessage], turns: list[int],
                      checked: Mapping[str, Collection[str]], ctx: GateContext,
                      last: int | None) -> list[ToolMessage]:
    """The fixes for the results of every turn up to the last one this agent planned (at
    `last`; those after it are `_unplanned_results`'), but those of the calls already
    `checked` (by AI message id: the calls of a plan `_results_checked` read), against
    what the ledger recorded for each call under its turn's message id
    (`_against_recorded`). A result rewritten under its id in an earlier turn reached the
    model as written (helper-101); so did the answer of a call the gate refused (malformed,
    unknown, an id given twice), which no tools node records; and so did the results of a
    turn no gate planned here, a client's whose notices a client wrote back into results
    once a later turn was planned, or a call a client added to a model's turn rewritten
    under its id (helper-102): such results get a notice unless they are one. One read for
    them all, where a result is left to check."""
    left: dict[int, list[ToolMessage]] = {}
    for index in (i for i in turns if last is not None and i <= last):
        done = checked.get(str(messages[index].id), ())
        results = [m for m in _results_after(messages, index) if m.tool_call_id not in done]
        if results:
            left[index] = results
    if not left:
        return []
    rows = ctx.ledger.agent_outcomes(ctx.thread_id, ctx.path)
    fixes: list[ToolMessage] = []
    for index, results in left.items():
        ai = cast(AIMessage, messages[index])
        asked = {c.get("id") for c in ai.tool_calls}
        by_call: dict[str, list[ToolMessage]] = {}
        for message in results:
            if message.tool_call_id in asked:
                by_call.setdefault(message.tool_call_id, []).append(message)
        for call_id, answers in by_call.items():
            found = rows.get((str(ai.id), call_id)) if ai.id else None
            if not found:  # a call no gate of this agent planned here
                fixes += _unrecorded(ai, answers, {}, ctx)
                continue
            said = [(name, outcome) for name, outcome in found if outcome is not None]
            fixes += _matched(answers, said, ctx)
    return fixes


def _matched(answers: list[ToolMessage], recorded: list[tuple[str, dict[str, Any]]],
             ctx: GateContext) -> list[ToolMessage]:
    """The fixes (`_against_recorded`) for the results of one call, each recorded outcome
    (tool, outcome; two calls given one id have one each) matched once."""
    if not recorded:
        return []  # (it waits, or runs)
    unsaid = list(recorded)
    wrong = []
    for message in answers:
        match = next((o for o in unsaid if _is_own(message, o[1], o[0])), None)
        if match is not None:
            unsaid.remove(match)
        elif not any(_unheld(message, tool) for tool, _ in recorded):
            wrong.append(message)
    fixes: list[ToolMessage] = []
    name = recorded[0][0]
    for message in wrong:
        name, outcome = unsaid.pop(0) if unsaid else (name, None)
        fixes += _against_recorded(message, name, outcome, ctx)
    return fixes


def _results_after(messages: list[AnyMessage], turn: int) -> list[ToolMessage]:
    """The results after the turn at `turn`, up to the next turn with calls (words,
    whoever wrote them, do not end a turn's results: helper-83)."""
    found: list[ToolMessage] = []
    for message in messages[turn + 1:]:
        if isinstance(message, ToolMessage):
            found.append(message)
        elif isinstance(message, AIMessage) and message.tool_calls:
            break
    return found


def _unheld(message: ToolMessage, name: str) -> bool:
    """Whether `message` is an answer the gate gives a call in its result's place without
    the ledger holding it: a call still running when a new user message came (its result is
    recorded when it ends), or one no plan accounts for."""
    return message.status == "error" and message.content in (
        STILL_RUNNING.format(name=name), UNACCOUNTED.format(name=name))


def _is_own(message: ToolMessage, outcome: dict[str, Any] | None, name: str | None) -> bool:
    """Whether `message` is the result the call (of tool `name`) recorded: its words, and
    its status and tool as well (a payment that ran, told as failed: helper-102)."""
    return (outcome is not None and same_content(outcome.get("content"), message.content)
            and message.status == (outcome.get("status") or "success")
            and message.name == name)


def readable(messages: list[AnyMessage]) -> list[AnyMessage]:
    """The conversation as the model reads it: a result only right after its call's turn,
    once per call. A result a client wrote anywhere else stays in the state, as a notice,
    but no chat provider takes it: OpenAI's API refuses a result that follows no call of the
    turn before it, and each later model call of the thread failed (helper-99)."""
    read: list[AnyMessage] = []
    asked: Counter[str] = Counter()  # (a model may give two calls one id: each is answered)
    block: list[ToolMessage] = []
    for message in [*messages, None]:
        if isinstance(message, ToolMessage):
            block.append(message)
            continue
        if message is not None and untied_result(message):
            continue
        read += _answers(block, asked)
        if message is not None:
            calls = message.tool_calls if isinstance(message, AIMessage) else []
            asked, block = Counter(str(c.get("id")) for c in calls), []
            read.append(message)
    return read


def untied_result(message: BaseMessage) -> bool:
    """Whether `message` speaks as a tool but answers no call: a `FunctionMessage`, or a
    `ChatMessage` in a tool's or a function's role. Only a client writes one, and the model
    read the recorded result and the client's words beside it, in a tool's voice; a provider
    that needs each tool message tied to its call refuses the conversation (helper-102)."""
    return isinstance(message, FunctionMessage) or (
        isinstance(message, ChatMessage) and message.role in ("tool", "function"))


def _answers(block: list[ToolMessage], asked: Counter[str]) -> list[ToolMessage]:
    """Of the results right after a turn, one per call (in their order): a call's own
    before the notice that took a client's result's place (which the client may have written
    first: the model read the notice, never the subagent's answer: helper-100)."""
    def notice(m: ToolMessage) -> bool:
        return m.status == "error" and m.content == SECOND.format(name=m.name)

    left = Counter(asked)
    kept: set[int] = set()
    for second in (False, True):
        for index, message in enumerate(block):
            if notice(message) == second and left[message.tool_call_id] > 0:
                left[message.tool_call_id] -= 1
                kept.add(index)
    return [m for index, m in enumerate(block) if index in kept]


def last_planned(messages: list[AnyMessage], ctx: GateContext) -> TurnPlan | None:
    """The plan of the conversation's last model turn this agent planned, where words or
    turns no model node wrote came after it (the last turn's own plan is read with the pass):
    neither hides it, whoever wrote them, nor how many (a result written for its waiting
    call, then "Paid.", reached the model and left the approval pending with no run:
    helper-81; so did one written before a client's turns with calls: helper-86, helper-87)."""
    turns = _turns_back(messages)
    if not turns:
        return None
    plan = ctx.turn(turn_key(messages[turns[0]], ctx.scope))  # (one read, as the last turn's)
    if plan is not None or len(turns) == 1:
        return plan
    keys = [turn_key(messages[index], ctx.scope) for index in turns[1:]]
    planned = ctx.ledger.planned_keys(ctx.thread_id, ctx.path, keys)
    key = next((key for key in keys if key in planned), None)
    return ctx.turn(key) if key is not None else None


def _turns_back(messages: list[AnyMessage]) -> list[int]:
    """Where each model turn with calls is, the last first."""
    return [index for index in range(len(messages) - 1, -1, -1)
            if isinstance(messages[index], AIMessage)
            and cast(AIMessage, messages[index]).tool_calls]


def with_fixes(messages: list[AnyMessage], fixes: list[ToolMessage]) -> list[AnyMessage]:
    by_id = {m.id: m for m in fixes}
    return [by_id.get(m.id, m) for m in messages]


def stopped_turn(messages: list[AnyMessage], opened: list[tuple[int, int]], ctx: GateContext
                  ) -> tuple[list[AnyMessage], list[BaseMessage]]:
    """A new user message after turns whose run stopped before all their calls had a result
    (`on_state_change`, a crash; input from any client): the calls are superseded and each
    turn's answers go right after it, before the newer messages. Returns the conversation as
    the model reads it and the writes that make the state say the same."""
    # The conversation's turns with calls unanswered (`opened`, from `open_turns`, the last
    # first), every one of them: a turn a client wrote over a waiting one (with or without its
    # results) hid the waiting one, whose approval then waited for good, with no run and no
    # inbox listing it, and whose call the model was handed without a result (helper-83). The
    # ledger's plan of each, if a gate planned it, says what became of each call; else the
    # sweep answers them all.
    # (those a user message came after: one before a turn a client wrote answers the turns
    # before it, never the client's, which `refused_turn` answers: helper-85)
    users = [i for i, m in enumerate(messages) if from_user(m)]
    opened = [(turn, later) for turn, later in opened if users and users[-1] >= later]
    if not opened:
        return messages, []
    read, moved = _results_in_place(messages, opened)
    # (the earliest first: a turn no gate planned sweeps what the agent holds open, which a
    # planned turn before it answers as it was planned, "not run")
    answers = [(later, supersede_unanswered(
        str(read[turn].id), read, ctx.ledger, thread_id=ctx.thread_id,
        agent_path=ctx.path, run_id=ctx.run_id, scope=ctx.scope))
        for turn, later in reversed(opened)]
    for later, said in reversed(answers):  # (the last first: it moves no turn before it)
        if said:
            read = [*read[:later], *said, *read[later:]]
            moved = later if moved is None else min(moved, later)
    if moved is None:
        return messages, []
    return read, _rewritten(messages, read, moved)


def _results_in_place(messages: list[AnyMessage], opened: list[tuple[int, int]]
                      ) -> tuple[list[AnyMessage], int | None]:
    """The results of each open turn's calls that came after other messages (before the next
    turn with calls), moved right after the turn, and where the first move is (None: none
    moved). A user message written while a call waited, then the call decided and run: its
    result came after the message, and the model was handed a call without its result next to
    it, which providers refuse (helper-83); the decision was taken before the message was
    read, so its result goes first."""
    read = messages
    moved: int | None = None
    for turn, later in opened:  # (the last first: a move shifts no turn before it)
        calls = {c.get("id") for c in getattr(read[turn], "tool_calls", None) or []}
        found: list[AnyMessage] = []
        for message in read[later:]:
            if isinstance(message, AIMessage) and message.tool_calls:
                break
            if isinstance(message, ToolMessage) and message.tool_call_id in calls:
                found.append(message)
        if found:
            out = {id(m) for m in found}
            read = [*read[:later], *found, *(m for m in read[later:] if id(m) not in out)]
            moved = later
    return read, moved


def left_to_the_gate(plan: TurnPlan | None, messages: list[AnyMessage]) -> bool:
    """The conversation ends with a planned turn some of whose calls have no result, and no
    user message came after it: the gate still has to run, answer or ask about them."""
    span = turn_span(messages, plan["ai_message_id"]) if plan is not None else None
    if plan is None or span is None or span[1] != len(messages):
        return False
    answered = {m.tool_call_id for m in messages[span[0] + 1:] if isinstance(m, ToolMessage)}
    return any(c["tool_call_id"] not in answered for c in plan["calls"])


def from_user(message: AnyMessage) -> bool:
    """A user's message, however it came (a `ChatMessage` with the user's role is one too),
    that says something: blank text, which the API and the thread protocol refuse, came as
    graph input and superseded what waited (it is dropped as a client's write is)."""
    return (isinstance(message, HumanMessage) or (
        isinstance(message, ChatMessage) and message.role in ("user", "human"))
    ) and not says_nothing(message)


def _written_while_waiting(messages: list[AnyMessage], opened: list[tuple[int, int]],
                           ctx: GateContext) -> tuple[TurnPlan, list[AnyMessage]] | None:
    """The last turn this agent's gate planned that has calls without a result, and what came
    after it, when something did and none of it is a user's message: a client's (graph input
    open to any client of a LangGraph server's thread; helper-54). It must not end the wait:
    the model would answer over the call without its result, or read a result no tool gave,
    and the approval would wait with no run to apply it."""
    for turn, end in opened:
        newer = messages[end:]
        if any(from_user(m) for m in newer):
            return None  # a user's message: it supersedes the turn (`stopped_turn`)
        plan = ctx.turn(turn_key(messages[turn], ctx.scope))  # (else a client's turn too)
        if plan is not None:
            return (plan, newer) if newer else None
    return None


def drop_written_while_waiting(messages: list[AnyMessage], opened: list[tuple[int, int]],
                               forged: list[ToolMessage], ctx: GateContext
                               ) -> list[BaseMessage] | None:
    """The writes that drop what a client wrote while a planned call waited
    (`_written_while_waiting`), each waiting call audited as refused; None when nothing is to
    be dropped. The run then goes back to the gate, which asks again."""
    stray = _written_while_waiting(messages, opened, ctx)
    if stray is None:
        return None
    waited, newer = stray
    ctx.ledger.audit([audit_row(
        "refused", {"tool_name": c["tool_name"], "tool_call_id": c["tool_call_id"]},
        thread_id=ctx.thread_id, run_id=ctx.run_id,
        detail=DROPPED.format(count=len(newer))) for c in waited["calls"]])
    kept = messages[:len(messages) - len(newer)]
    gone = {m.id for m in newer}
    dropped: list[BaseMessage] = (  # (graph input may bring messages without an id)
        [*(m for m in forged if m.id not in gone),
         *(RemoveMessage(id=str(m.id)) for m in newer)]
        if None not in gone else [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept])
    return dropped


def _unplanned_results(messages: list[AnyMessage], ctx: GateContext) -> list[ToolMessage]:
    """Results of calls of turns no gate of this agent planned in this thread, after the
    last one it planned (all of them, whatever their number: past 20, the model read them:
    helper-87): no tool of this thread ran them (a client wrote the turn and its
    results, or rewrote a model message under its id and answered it: helper-74, the model
    read `root:$6$...`; a model's words after them hid them from a check of the last turn
    alone: helper-75). In a thread the agent planned nothing in (a copy), a result stands as
    a tools node (or the gate, for a call it refused) recorded it where a model node planned
    that very turn (the copy's history; in a thread the agent works in, such results were
    another thread's laundered: helper-76), which the copy keeps (`adopt_outcomes`), once;
    any other is replaced in place by a notice, but one that says already that the call did
    not run."""
    turns = [(index, turn_key(messages[index], ctx.scope)) for index in _turns_back(messages)]
    if not turns:
        return []
    planned = ctx.ledger.planned_keys(ctx.thread_id, ctx.path, (key for _, key in turns))
    copied = not planned and not ctx.ledger.plans_in(ctx.thread_id, ctx.path)
    fixes: list[ToolMessage] = []
    ends = {index: next((i for i in range(index + 1, len(messages))
                         if isinstance(messages[i], AIMessage)), len(messages))
            for index, _ in turns}
    rows: list[dict[tuple[str, str], list[tuple[str, dict[str, Any] | None]]]] = []
    for index, key in turns:
        if key in planned:
            break
        ai = cast(AIMessage, messages[index])
        after = messages[index + 1:ends[index]]
        names = {c.get("id"): c["name"] for c in ai.tool_calls}
        if all(_is_notice(m, names[m.tool_call_id]) for m in after
               if isinstance(m, ToolMessage) and m.tool_call_id in names):
            continue  # (nothing to look up: answered by notices, or not at all)
        if not ai.id:
            fixes += _unrecorded(ai, after, {}, ctx)
            continue
        if not rows:  # (read once: what the ledger holds under each message id here)
            rows.append(ctx.ledger.agent_outcomes(ctx.thread_id, ctx.path))
        recorded = _under(rows[0], str(ai.id))
        if not recorded and copied:  # (a copy's history: what was recorded where it was)
            elsewhere = ctx.ledger.planned_where(key, ctx.thread_id)
            adopted = (ctx.ledger.turn_calls(elsewhere[0], key)
                       if elsewhere is not None else [])
            if adopted:
                ctx.ledger.adopt_outcomes(ctx.thread_id, ctx.path, key, [
                    (new_id("call"), *row) for row in adopted])
            for call_id, tool_name, outcome in adopted:
                recorded.setdefault(call_id, []).append((tool_name, outcome))
        fixes += _unrecorded(ai, after, recorded, ctx)
    return fixes


def _under(rows: Mapping[tuple[str, str], Sequence[tuple[str, dict[str, Any] | None]]],
           message_id: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Of `Ledger.agent_outcomes`, what the calls of the turn of this AI message id got
    (tool, outcome; by tool_call_id), under any content of the message: a model's turn a
    client rewrote under its id keeps what ran."""
    return {call_id: said for (found, call_id), outcomes in rows.items()
            if found == message_id and (said := [(tool, outcome) for tool, outcome in outcomes
                                                 if outcome is not None])}


def _unrecorded(ai: AIMessage, after: Sequence[AnyMessage],
                recorded: Mapping[str, Sequence[tuple[str, dict[str, Any]]]], ctx: GateContext
                ) -> list[ToolMessage]:
    """The fixes for the results after `ai`, each audited: a call's result that is not what
    the ledger recorded for it (`recorded`: tool and outcome, by tool_call_id) goes back to
    the recorded one (`_matched`: the call ran, or was answered, whatever a client wrote
    over it since); a result of a call the ledger recorded nothing for is replaced by a
    notice that it did not run, unless it is one."""
    names = {c.get("id"): c["name"] for c in ai.tool_calls}
    answers: dict[str, list[ToolMessage]] = {}
    notices: list[ToolMessage] = []
    for message in after:
        if not isinstance(message, ToolMessage) or message.tool_call_id not in names:
            continue
        if recorded.get(message.tool_call_id):
            answers.setdefault(message.tool_call_id, []).append(message)
            continue
        name = names[message.tool_call_id]
        if not _is_notice(message, name):
            notices.append(ToolMessage(DISCARDED.format(name=name), id=message.id, name=name,
                                       tool_call_id=message.tool_call_id, status="error"))
    _audit_refused(ctx, notices)
    return [*notices, *(fix for call_id, given in answers.items()
                        for fix in _matched(given, list(recorded[call_id]), ctx))]


def _discarded(call: CallPlan) -> str:
    """The notice in the place of a result a client wrote for a call with none recorded."""
    name = call["tool_name"]
    if suspended_itself(call):
        return DISCARDED_STARTED.format(name=name)
    approval = call["approval"]
    if call["node"] != "tools" and (approval is None or approval["status"] == "approved"):
        return DISCARDED_DELEGATION.format(name=name)
    return DISCARDED.format(name=name)


def _is_notice(message: ToolMessage, name: str) -> bool:
    """Whether `message` is a notice, in a result's place, that the call did not run (or an
    answer the gate gives without the ledger holding it: `_unheld`)."""
    return (message.content in (DISCARDED.format(name=name), REWRITTEN.format(name=name),
                                WRITTEN.format(name=name), DISCARDED_STARTED.format(name=name),
                                DISCARDED_DELEGATION.format(name=name))
            or _unheld(message, name))


def unplanned_turn(messages: list[AnyMessage], opened: list[tuple[int, int]],
                   ctx: GateContext) -> AIMessage | None:
    """The conversation's last turn with calls unanswered, when no model node of this agent
    planned it in this thread and no user message came after it. Checked after
    `drop_written_while_waiting`, so nothing waits before it (a client's turn, planned by the
    gate which a client's `Command` reached while an earlier turn waited, took the waiting
    call's place in the interrupt; helper-72). Planned now only if a model node wrote it in
    another thread and this agent planned nothing here yet (a copy: `refused_turn`, which
    else answers it)."""
    if not opened:
        return None
    turn, later = opened[0]
    ai = messages[turn]
    if (not isinstance(ai, AIMessage) or any(from_user(m) for m in messages[later:])
            or ctx.turn(turn_key(ai, ctx.scope)) is not None):
        return None
    return ai


def refused_turn(messages: list[AnyMessage], turn: int, later: int, ctx: GateContext
                 ) -> tuple[list[AnyMessage], list[BaseMessage]] | None:
    """The answers, as not run, of an unplanned turn (`unplanned_turn`) no model node of this
    agent wrote in any thread: a client wrote it (`Command(update=...)`, `update_state`), new
    or as a rewrite of a model message under its id (`add_messages` replaces it in place), or
    the ledger that planned it lost its rows. Planned, the call a client wrote was asked in
    the waiting call's place, or ran beside a reject, also once the same write removed the
    waiting turn (helper-72, -73, -74). What waited on a turn the conversation no longer
    holds is declined as superseded (`supersede_abandoned`). Returns the conversation as the
    model reads it and the writes that make the state say the same; None for a turn this
    agent's model node wrote elsewhere, in a thread where it planned nothing yet (a copied
    thread's: it is planned anew). A model's turn moved into a thread where the agent works
    (the waiting turn removed in the same write) took the waiting call's place (helper-75)."""
    ai = cast(AIMessage, messages[turn])  # (`unplanned_turn` found it so)
    if (not ctx.ledger.plans_in(ctx.thread_id, ctx.path)
            and ctx.ledger.planned_where(turn_key(ai, ctx.scope),
                                         agent_path=ctx.path) is not None):
        # (a turn this agent's model wrote, in a thread it never planned in: a copy. One
        # another agent's wrote is a client's here: the copy of a thread, run by an agent
        # with a tool of the same name that needs no approval, ran the owner's waiting call
        # on a reject: helper-116)
        return None
    rewritten = ai.id is not None and ctx.ledger.planned_message(ctx.thread_id, ctx.path,
                                                                 str(ai.id))
    notice = REWRITTEN if rewritten else WRITTEN
    answered = {m.tool_call_id for m in messages[turn + 1:later] if isinstance(m, ToolMessage)}
    unanswered = list({c["id"]: c for c in ai.tool_calls
                       if c.get("id") not in answered}.values())
    answers = [ToolMessage(notice.format(name=c["name"]), tool_call_id=str(c["id"]),
                           name=c["name"], status="error") for c in unanswered]
    _audit_refused(ctx, answers)
    return _moved_after(messages, later, answers)
