"""The agent graph's `tools` node (the `approval_gate` is `graphkit._gate`, the `model` node
`graphkit._model_node`).

Each tool call is its own `Send` task. LangGraph then keeps a finished call's writes when a
sibling pauses, gives each paused task its own interrupt id, and runs independent calls of a
superstep concurrently; `ToolNode` running several interrupting calls in one task does not.

The tools node trusts no task it is sent: a call runs only when the ledger says it needs no
approval, or holds an approval for exactly the arguments in the task, and only the first
process to claim its execution runs it (a replay gets the recorded result).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, TypeVar

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command

from graphkit._context import PATH_KEY, thread_id_of
from graphkit._ids import stored
from graphkit._ledger import ApprovalRow, CallRow, Ledger, RunBusyError, _schema
from graphkit._offload import apart, offload
from graphkit._owner import holder_is_dead, new_owner
from graphkit._review import audit_row
from graphkit._secrets import observed, scrub_exception, scrubbed, secret_values, still_shows
from graphkit._state import ToolTask
from graphkit._validate import (
    declares_resume_secrets,
    declares_secrets,
    resume_secrets,
    secret_paths_of,
)
from graphkit.errors import WithheldToolError
from graphkit.tools import (
    CONTEXT_KEY,
    STARTED_KEY,
    DelegationTool,
    GraphkitTool,
    ToolContext,
    ToolSuspended,
)
from graphkit.types import args_digest

__all__ = [
    "REASONS",
    "REFUSED",
    "make_tools_nodes",
    "result_command",
    "runs_as_recorded",
]

ToolTarget = Literal["approval_gate", "model"]

REFUSED = "Refused: tool call {name!r} did not run: {why}."
NOT_PLANNED = "it was not planned by this agent's approval gate"
ELSEWHERE = "it was planned for another thread, agent, tool or call"
OTHER_ARGS = "its arguments are not the ones planned"
NO_APPROVAL = "it has no approval"
NOT_APPROVED_ARGS = "its arguments are not the ones that were approved"
RUNNING = "it is already running in another process"
REASONS = (NOT_PLANNED, ELSEWHERE, OTHER_ARGS, NO_APPROVAL, NOT_APPROVED_ARGS, RUNNING)
"""Why the tools node refuses a task. Its refusals are the only results the ledger does not
record (the call stays as it was), so the model node knows them by their exact words."""
DONE_UNKNOWN = ("Tool call {name!r} is recorded as done, with no outcome: whether it took "
                "effect is unknown. It will not run again.")
FAILED = ("Tool call {name!r} failed ({error}); an approved call is attempted once, so it "
          "will not run again unless the model calls it anew.")
INTERRUPTED = ("Tool call {name!r} was interrupted while it ran (the run was cancelled); its "
               "outcome is unknown, and it will not run again unless the model calls it anew.")


def _tool_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=64, thread_name_prefix="graphkit-tool")


_SYNC_TOOL_POOL = _tool_pool()
"""Sync tools called from an async run. The event loop's default pool has cpu+4 threads,
which would run eight 50 ms tools in two waves on a 2-core machine."""


def _forked() -> None:
    """A forked child has none of its parent's pool threads, which the pool would count as
    idle and wait on for ever: it gets a pool of its own."""
    global _SYNC_TOOL_POOL
    _SYNC_TOOL_POOL = _tool_pool()


os.register_at_fork(after_in_child=_forked)


def _is_sync(tool: BaseTool) -> bool:
    if isinstance(tool, StructuredTool):
        return tool.coroutine is None
    return type(tool)._arun is BaseTool._arun


@dataclass(frozen=True, slots=True)
class _Admitted:
    owner: str
    resume_values: list[Any]
    once: dict[str, Any]
    args: dict[str, Any]
    """The arguments the ledger holds for the call: those it runs with."""
    claimed_at: float
    """When (monotonic) its claim statement was sent (its age counts from there, whatever
    ran since): `confirm_claim`."""

    def may_have_lapsed(self) -> bool:
        """Whether the claim is old enough to have lapsed (the process stalled since:
        paused, swapped out, its renewals late)."""
        return time.monotonic() - self.claimed_at >= _schema.LEASE_SECONDS / 2


def confirm_claim(ledger: Ledger, key: str, admitted: _Admitted) -> None:
    """Right before the tool starts. A claim that may have lapsed is confirmed in the
    ledger as still this owner's; one another process took over (and maybe ran) stops the
    run, the tool not started. A fresh claim costs no statement."""
    if not admitted.may_have_lapsed():
        return
    if not ledger.confirm(key, admitted.owner):
        msg = (f"call {key!r}: this process's claim on it lapsed and another process took it "
               "over; the run stopped before starting the tool again")
        raise RunBusyError(msg)


def _why_not(row: CallRow | None, approval: ApprovalRow | None, task: Mapping[str, Any],
             config: RunnableConfig) -> str | None:
    """Why the ledger does not allow this task to run, or None when it does."""
    if row is None:
        return NOT_PLANNED
    if (row.thread_id != thread_id_of(config) or list(row.agent_path) != list(
            task.get("agent_path") or []) or row.tool_name != task.get("tool_name")
            or row.tool_call_id not in (None, task.get("tool_call_id"))):
        return ELSEWHERE
    if row.approval_id is None:
        return None if runs_as_recorded(row.args, row.args_digest) else OTHER_ARGS
    if approval is None or approval.status != "approved" or row.cleared is None:
        return NO_APPROVAL  # (a decision the gate has not verified yet is not one)
    if not runs_as_recorded(row.args, row.cleared):
        return NOT_APPROVED_ARGS
    return None


def runs_as_recorded(args: Any, digest: str) -> TypeGuard[Mapping[str, Any]]:
    """Whether the ledger's arguments for a call are the ones its gate digested (they always
    are, unless the database was written by hand)."""
    return isinstance(args, Mapping) and args_digest(args) == digest


def _comparable(text: Any) -> bool:
    """Text every database can compare: a string without NUL (PostgreSQL refuses it) that
    encodes as UTF-8 (SQLite refuses lone surrogates). A forged task's odd key or path is
    refused by the checks, not turned into a database error."""
    return isinstance(text, str) and stored(text)


def _plain(task: Mapping[str, Any]) -> bool:
    """A task whose fields the one-statement claim compares exactly as `_why_not` does."""
    path = task.get("agent_path")
    return (_comparable(task.get("key")) and _comparable(task.get("tool_name"))
            and _comparable(task.get("tool_call_id"))
            and isinstance(path, list)
            and all(_comparable(p) and p and "/" not in p for p in path))


def _admit(ledger: Ledger, task: ToolTask, config: RunnableConfig, *, context: bool
           ) -> _Admitted | ToolMessage | _Busy | None:
    """Verify a task against the ledger and claim its one execution (with what a tool that
    takes a `ToolContext` needs: its resume data and once-results). A call that already ran
    gets its recorded result; one another run holds is BUSY (the caller waits and asks
    again); a task refused is audited
    and answers nothing (None): an answer in the conversation would end a turn whose call
    still waits on its approval, with no run waiting on that approval any more."""
    name = str(task.get("tool_name"))
    key = task.get("key")
    owner = new_owner()
    thread_id = thread_id_of(config)
    at = time.monotonic()
    claimed = ledger.start_admitted(
        str(key), owner, thread_id=thread_id, agent_path=task["agent_path"],
        tool_name=name, tool_call_id=str(task.get("tool_call_id"))) if _plain(task) else None
    if claimed is not None and runs_as_recorded(claimed.args, claimed.digest):
        with _given_back(ledger, str(key), owner):
            return _Admitted(owner, ledger.resume_values(str(key), thread_id)
                             if context and claimed.resumed else [], claimed.once,
                             dict(claimed.args), at)
    if claimed is not None:  # arguments the gate never digested: never run them
        ledger.release(str(key), owner)
    row, approval = ledger.admission(key) if _comparable(key) else (None, None)
    why = _why_not(row, approval, task, config)
    if why is None and row is not None and row.args is not None:
        at = time.monotonic()
        outcome, held = ledger.start(row.call_key, owner, holder_dead=holder_is_dead)
        if outcome == "busy":
            return BUSY  # the caller waits, and asks again
        if outcome == "won":
            if not context:
                return _Admitted(owner, [], {}, dict(row.args), at)
            with _given_back(ledger, row.call_key, owner):
                return _Admitted(owner, ledger.resume_values(row.call_key, row.thread_id),
                                 dict(row.once_results or {}), dict(row.args), at)
        if outcome == "done":
            recorded = (held.outcome if held is not None and held.outcome is not None
                        else ledger.outcome_of_done(row.call_key, {
                            "content": DONE_UNKNOWN.format(name=name), "status": "error"}))
            return ToolMessage(recorded.get("content", ""), id=result_id(row.call_key),
                               tool_call_id=task["tool_call_id"], name=name,
                               status=recorded.get("status") or "success")
        why = RUNNING
    ledger.audit([audit_row("refused", {"tool_name": name,
                                        "tool_call_id": task.get("tool_call_id"),
                                        "agent_path": task.get("agent_path")},
                            thread_id=thread_id, run_id=(task.get("options") or {}).get("run_id"),
                            detail=f"tools node: {why}")])
    if why != RUNNING:
        return None
    return ToolMessage(REFUSED.format(name=name, why=why),
                       tool_call_id=str(task.get("tool_call_id") or ""), name=name,
                       status="error")


@contextlib.contextmanager
def _given_back(ledger: Ledger, key: str, owner: str) -> Iterator[None]:
    """Between a call's claim and its tool's start: anything raised (a database error, a
    bug) gives the claim back, so the call may run again, not left to this process's
    keeper, which would renew it for as long as the process lives."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            ledger.release(key, owner)
        raise


class _Busy:
    """Another process holds the call's claim (`_admit`): wait for its result, or for the
    claim to lapse, and ask again (`Waiting`); never answer the call in its place."""


BUSY = _Busy()


class Waiting:
    """The pauses of one task waiting on a call another process holds: growing, up to a
    thread lease's wait, after which the run stops unanswered (a later resume looks again).
    A call refused as "running elsewhere" would end its turn unrun, if its holder had died
    where it cannot be proven dead (its claim lapses a moment after its thread lease)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.deadline = time.monotonic() + _schema.WAIT_SECONDS
        self.pause = 0.01

    def next_pause(self) -> float:
        if time.monotonic() >= self.deadline:
            msg = (f"call {self.name!r} is claimed by another run that neither finished it "
                   "nor let its claim lapse; the run stopped without answering it")
            raise RunBusyError(msg)
        self.pause = min(self.pause * 2, 1.0)
        return self.pause


def _says_when_it_starts(tool: BaseTool) -> bool:
    """Whether the tool's body starts only through `GraphkitTool._arun`, which sets
    `STARTED_KEY` right before it: not a subclass that runs its body another way (which
    would never say so, and a cancelled call that did run would be given back, to run
    again)."""
    kind = type(tool)
    return isinstance(tool, GraphkitTool) and all(
        getattr(kind, name) is getattr(GraphkitTool, name)
        for name in ("_arun", "arun", "ainvoke"))


class _Handoff:
    """A claim taken in a worker thread for a run that awaits it: given back by whichever
    side learns last that the run was cancelled (the thread, if it lands after; the run, if
    the thread landed before), so a cancelled run never leaves a claim behind, whatever
    cancels it (a timeout, `asyncio.run` ending). Once taken by whoever starts the tool, it
    is theirs: a cancellation then leaves the tool to run and record, as always."""

    def __init__(self, ledger: Ledger, key: str) -> None:
        self._ledger, self._key = ledger, key
        self._lock = threading.Lock()
        self.cancelled = False
        self.started = False
        """Whether the thread took the claim to start the tool (a sync tool's whole call)."""
        self._landed: _Admitted | None = None

    def landed(self, admitted: _Admitted, *, take: bool = False) -> bool:
        """In the thread, the claim taken (`take`: by this thread, which starts the tool):
        False, and the claim given back, if the run was cancelled meanwhile."""
        with self._lock:
            if not self.cancelled:
                self._landed = None if take else admitted
                self.started = self.started or take
                return True
        self._ledger.release(self._key, admitted.owner)
        return False

    @contextlib.contextmanager
    def _on_the_loop(self) -> Iterator[None]:
        """The lock, taken on the event loop without a blocking wait (the thread holds it for
        a few instructions; `langgraph dev` refuses a blocking lock wait on its loop)."""
        while not self._lock.acquire(blocking=False):
            pass
        try:
            yield
        finally:
            self._lock.release()

    def take(self) -> None:
        """The run starts the tool: the claim is its own now."""
        with self._on_the_loop():
            self._landed = None

    def cancel(self) -> None:
        """The run was cancelled: a claim landed and not taken is given back (in a thread of
        its own: not the event loop's, nor an executor an ending loop shuts down)."""
        with self._on_the_loop():
            self.cancelled = True
            left, self._landed = self._landed, None
        if left is not None:
            apart(self._ledger.release, self._key, left.owner, name="graphkit-give-back")


T = TypeVar("T")


def _no_stop_iteration(func: Callable[..., T], *args: Any) -> T:
    """`func(*args)` in an executor: a StopIteration it raises is a RuntimeError (set on an
    asyncio future, it would leave the future pending for good), as LangChain's
    `run_in_executor` does."""
    try:
        return func(*args)
    except StopIteration as exc:
        raise RuntimeError from exc


def _prepare(
    tools: Mapping[str, BaseTool], task: ToolTask, config: RunnableConfig, ledger: Ledger,
    admitted: _Admitted,
) -> tuple[BaseTool, dict[str, Any], RunnableConfig]:
    tool = tools[task["tool_name"]]
    settings = tool if isinstance(tool, GraphkitTool) else None
    key = task["key"]
    ctx = ToolContext(
        tool_call_id=task["tool_call_id"],
        thread_id=thread_id_of(config),
        agent_path=task["agent_path"],
        resume_values=admitted.resume_values,
        once_results=admitted.once,
        suspend_schema=settings.suspend_schema if settings else None,
        resume_schema=settings.resume_schema if settings else None,
        keep_once=lambda results: ledger.save_once(key, results),
        idempotency_key=key,
    )
    call = {"name": task["tool_name"], "args": admitted.args, "id": task["tool_call_id"],
            "type": "tool_call"}
    metadata = task.get("metadata")
    tool_config: RunnableConfig = {
        **config,
        "metadata": {**(config.get("metadata") or {}),
                     **(metadata if isinstance(metadata, dict) else {})},
        "configurable": {
            **(config.get("configurable") or {}),
            CONTEXT_KEY: ctx,
            PATH_KEY: task["agent_path"],
            "graphkit_options": task.get("options") or {},
        },
    }
    return tool, call, tool_config


def _brief(exc: BaseException, secrets: Sequence[str]) -> str:
    """An error's type and message without `secrets`, short (cut once they are out: a cut
    could leave part of one); never raises (it is recorded as an outcome)."""
    try:  # (its message: a secret "Error" is no reason to mask the name `ValueError`)
        text = f"{type(exc).__name__}: {str.__str__(scrubbed(str(exc), secrets))}"
    except BaseException:  # an error whose message cannot be made, however it fails
        text = f"{type(exc).__name__} (its message could not be read)"
    return text if len(text) <= 300 else text[:299] + "…"


def result_id(key: str) -> str:
    """The id of a call's result message: one per call (its ledger key)."""
    return f"result-{key}"


def result_command(task: ToolTask, output: Any) -> Command[ToolTarget]:
    """The command that hands one tool call's result back to its turn, under an id of the
    call's own: a call's result written again (a replay, a task sent to this node more than
    once: helper-72) takes its own place, never a second one beside it."""
    if isinstance(output, ToolMessage):
        # (the answer of the call this task ran, whatever id the tool wrote in it: one under
        # another id answered nothing, and was audited as a client's result: helper-82)
        message = (output if output.tool_call_id == task["tool_call_id"] else
                   output.model_copy(update={"tool_call_id": task["tool_call_id"]}))
    else:
        message = ToolMessage(str(output), tool_call_id=task["tool_call_id"])
    if not message.name:
        message.name = task["tool_name"]
    if task.get("key"):
        message.id = result_id(task["key"])
    goto: ToolTarget = "model" if task.get("then") == "model" else "approval_gate"
    return Command(update={"messages": [message]}, goto=goto)


WITHHELD_ERROR = "its error is withheld: it could not be checked for the call's secret values"
WITHHELD = ("[the result of {name!r} is withheld: it could not be checked for the secret "
            "values of the call's arguments]")


def _secrets_of(tool: BaseTool, call: Mapping[str, Any], resumed: Sequence[Any]
                ) -> list[str] | None:
    """The secret values of a call's arguments (`secret_values`; none for a tool that
    declares no secret) and of the data it was resumed with (`resume_secrets`); None where
    they could not be found."""
    found = resume_secrets(tool, resumed)
    if found is None or not declares_secrets(tool):
        return found
    try:
        return [*secret_values(call["args"], secret_paths_of(tool, call["args"])), *found]
    except Exception:
        return None


def _sees_secrets(tool: BaseTool) -> bool:
    """Whether a call of `tool` may see a secret: in its arguments, or in the data it is
    resumed with (its output may show either to LangChain's callbacks: `observed`)."""
    return declares_secrets(tool) or declares_resume_secrets(tool)


def _said(tool: BaseTool, call: Mapping[str, Any], resumed: Sequence[Any], value: Any) -> Any:
    """What a call says back (its result, with its artifact, or what it asks when it
    suspends) without the secret values of its arguments: a tool that echoes its key (or a
    key a reviewer typed in an edit) would show it to the model, the conversation's
    checkpoints, streams, webhooks and every view, where the call's own arguments show the
    mask; and so would one that echoes a secret it was resumed with. (Its errors:
    `_failed`.)"""
    secrets = _secrets_of(tool, call, resumed)
    if secrets == []:
        return value
    if secrets is None:  # (not known: nothing said can be checked)
        return WITHHELD.format(name=tool.name)
    try:
        if isinstance(value, ToolMessage):
            return value.model_copy(update={"content": scrubbed(value.content, secrets),
                                            "artifact": scrubbed(value.artifact, secrets)})
        if isinstance(value, Mapping):  # a suspension's payload
            return scrubbed(value, secrets)
        return scrubbed(str(value), secrets)  # (as `result_command` would show it)
    except Exception:  # the tool ran: its outcome must still be recorded, never its secret
        return WITHHELD.format(name=tool.name)


def _failed(tool: BaseTool, call: Mapping[str, Any], resumed: Sequence[Any],
            exc: BaseException, outer: BaseException | None) -> list[str] | None:
    """Take the call's secret values out of the error it raised (`scrub_exception`; `outer`:
    what the caller was handling as the tool began); they are returned to take out of the
    outcome recorded too (None: they could not be found, and the error's text is withheld
    from it)."""
    secrets = _secrets_of(tool, call, resumed)
    if secrets:
        with contextlib.suppress(BaseException):  # the outcome is recorded whatever happens
            scrub_exception(exc, secrets, outer)
    return secrets


def _shown(exc: BaseException, secrets: list[str] | None, outer: BaseException | None
           ) -> bool:
    """Whether a failed call's error may be raised as it is: none of the call's secrets shows
    in it once `_failed` took them out (LangGraph stores it in the checkpoint, and hands it
    to the caller). Where the secrets are not known, the error is not raised either."""
    return secrets is not None and not (secrets and still_shows(exc, secrets, outer))


def _withheld(exc: BaseException, recorded: str) -> BaseException:
    """What is raised in place of an error that would show a secret: an error of its kind
    for those that stop a process or a task (`KeyboardInterrupt`, `SystemExit`), else a
    `WithheldToolError`; its message is the outcome recorded, which is scrubbed."""
    if not isinstance(exc, Exception):
        with contextlib.suppress(Exception):
            return type(exc)(recorded)
    return WithheldToolError(recorded)


def _suspended(task: ToolTask, signal: ToolSuspended) -> Command[ToolTarget]:
    """Back to the gate, which asks what the ledger was told (`Ledger.suspend`): the report
    in the state only says where to look (a client can write it)."""
    report = {task["tool_call_id"]: {"payload": signal.payload, "key": task["key"]}}
    return Command(update={"reports": report}, goto="approval_gate")


def _refused(message: ToolMessage | None) -> Command[ToolTarget]:
    """Back to the gate, with the call's recorded result or what became of it, if any."""
    return Command(update={"messages": [message]} if message is not None else None,
                   goto="approval_gate")


def make_tools_nodes(
    tools: Mapping[str, BaseTool], ledger: Ledger,
    path_of: Callable[[RunnableConfig], list[str]] | None = None,
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The `tools` node (sync and async): runs the one tool call it was sent, if allowed."""

    def finish(task: ToolTask, owner: str, output: Any) -> Command[ToolTarget]:
        command = result_command(task, output)
        (message,) = command.update["messages"]  # type: ignore[index]
        ledger.finish(task["key"], owner, {"content": message.content, "status": message.status})
        return command

    def admit(task: ToolTask, config: RunnableConfig
              ) -> _Admitted | ToolMessage | _Busy | None:
        tool = tools.get(str(task.get("tool_name")))
        if path_of is not None and task.get("agent_path") != path_of(config):
            tool = None  # another agent's call (a subagent's, say): never this agent's tool
        if isinstance(tool, DelegationTool):
            tool = None  # a delegation runs in its own node, never here
        if tool is None:
            return _admit(ledger, {**task, "key": None}, config,  # type: ignore[typeddict-item]
                          context=False)
        context = isinstance(tool, GraphkitTool) and tool.context_param is not None
        return _admit(ledger, task, config, context=context)

    def admit_when_free(task: ToolTask, config: RunnableConfig,
                        handoff: _Handoff | None = None) -> _Admitted | ToolMessage | None:
        """`admit`, waiting (in this task's own thread) while another run holds the call;
        with `handoff` (an async run's), never past the run's cancellation."""
        waiting = Waiting(str(task.get("tool_name")))
        while True:
            if handoff is not None and handoff.cancelled:
                return None  # (nobody reads it)
            admitted = admit(task, config)
            if not isinstance(admitted, _Busy):
                break
            time.sleep(waiting.next_pause())
        if isinstance(admitted, _Admitted) and handoff is not None and not handoff.landed(
                admitted, take=True):
            return None
        return admitted

    def stopped(task: ToolTask, owner: str, text: str, exc: BaseException | None = None,
                secrets: list[str] | None = None) -> str:
        """The call stopped without a result: record why, so it never runs again unasked
        (its error's text without the call's `secrets`; None: they are not known, and the
        text is withheld). Returns what it recorded."""
        error = ("" if exc is None else WITHHELD_ERROR if secrets is None
                 else _brief(exc, secrets))
        content = text.format(name=task["tool_name"], error=error)
        ledger.finish(task["key"], owner, {"content": content, "status": "error"})
        return content

    def execute(tool: BaseTool, call: dict[str, Any], tool_config: RunnableConfig,
                task: ToolTask, admitted: _Admitted) -> Command[ToolTarget]:
        """Run a sync tool and record its outcome, whatever becomes of whoever awaits it (a
        cancelled async run leaves the tool running in its thread; it still records)."""
        owner = admitted.owner
        confirm_claim(ledger, task["key"], admitted)
        outer = sys.exc_info()[1]  # (the caller's: Python makes it the context of the tool's)
        withheld: BaseException | None = None
        try:
            with observed(tool_config, secret=_sees_secrets(tool)) as seen:
                output = tool.invoke(call, seen)
        except ToolSuspended as signal:
            signal.payload = _said(tool, call, admitted.resume_values, signal.payload)
            ledger.suspend(task["key"], owner, signal.payload)
            return _suspended(task, signal)
        except GraphBubbleUp:  # a tool's own interrupt(): it runs again on resume
            ledger.release(task["key"], owner)
            raise
        except BaseException as exc:
            secrets = _failed(tool, call, admitted.resume_values, exc, outer)
            recorded = stopped(task, owner, FAILED, exc, secrets)
            if _shown(exc, secrets, outer):
                raise
            withheld = _withheld(exc, recorded)
        if withheld is not None:
            raise withheld  # (out of the `except`: not even its context is the tool's)
        return finish(task, owner, _said(tool, call, admitted.resume_values, output))

    def run_tool(task: ToolTask, config: RunnableConfig, handoff: _Handoff | None = None
                 ) -> Command[ToolTarget]:
        admitted = admit_when_free(task, config, handoff)
        if not isinstance(admitted, _Admitted):
            return _refused(admitted)
        with _given_back(ledger, task["key"], admitted.owner):
            tool, call, tool_config = _prepare(tools, task, config, ledger, admitted)
        return execute(tool, call, tool_config, task, admitted)

    def begin(task: ToolTask, config: RunnableConfig, handoff: _Handoff
              ) -> (tuple[BaseTool, dict[str, Any], RunnableConfig, _Admitted] | ToolMessage
                    | _Busy | None):
        admitted = admit(task, config)
        if not isinstance(admitted, _Admitted):
            return admitted
        if not handoff.landed(admitted):
            return None  # the run was cancelled: the claim is given back (nobody reads this)
        with _given_back(ledger, task["key"], admitted.owner):
            return (*_prepare(tools, task, config, ledger, admitted), admitted)

    async def abegin(task: ToolTask, config: RunnableConfig) -> Any:
        """`begin` off the event loop, waiting on the loop (no thread held) while another
        run holds the call; a cancellation never leaves a claim behind (`_Handoff`)."""
        waiting = Waiting(str(task.get("tool_name")))
        handoff = _Handoff(ledger, task["key"])
        while True:
            try:
                begun = await offload(begin, task, config, handoff)
            except asyncio.CancelledError:
                handoff.cancel()
                raise
            if not isinstance(begun, _Busy):
                handoff.take()
                return begun
            await asyncio.sleep(waiting.next_pause())

    async def arun_tool(task: ToolTask, config: RunnableConfig) -> Command[ToolTarget]:
        named = tools.get(str(task.get("tool_name")))
        if named is not None and _is_sync(named):
            # the whole call in one hop: admitted, run and recorded in the tool's thread
            handoff = _Handoff(ledger, task["key"])
            # a future, not a task: `asyncio.run` ending cancels every task, and a task that
            # ran the tool would give up waiting for it (helper-98)
            running = asyncio.get_running_loop().run_in_executor(
                _SYNC_TOOL_POOL, _no_stop_iteration, run_tool, task, config, handoff)
            try:
                command: Command[ToolTarget] = await asyncio.shield(running)
            except asyncio.CancelledError:
                handoff.cancel()  # a waiting thread stops waiting, and never starts the tool
                if handoff.started:
                    # A tool that started runs on in its thread, whatever cancels the run:
                    # the run ends when it ends, so that its thread's lease is not let go
                    # while it runs (the next run told its payment's outcome was unknown,
                    # while it paid: helper-96). A second cancel leaves it at once.
                    with contextlib.suppress(Exception):
                        await asyncio.shield(running)
                raise
            return command
        begun = await abegin(task, config)
        if not isinstance(begun, tuple):
            return _refused(begun)
        tool, call, tool_config, admitted = begun
        owner = admitted.owner
        started: threading.Event | None = None
        if _says_when_it_starts(tool):
            started = threading.Event()
            tool_config = {**tool_config, "configurable": {
                **(tool_config.get("configurable") or {}), STARTED_KEY: started}}
        if admitted.may_have_lapsed():
            try:
                await offload(confirm_claim, ledger, task["key"], admitted)  # a statement
            except asyncio.CancelledError:
                await asyncio.shield(offload(ledger.release, task["key"], owner))
                raise
        outer = sys.exc_info()[1]
        withheld: BaseException | None = None
        try:
            with observed(tool_config, secret=_sees_secrets(tool)) as seen:
                output = await tool.ainvoke(call, seen)
        except ToolSuspended as signal:
            signal.payload = await offload(_said, tool, call, admitted.resume_values,
                                           signal.payload)
            await offload(ledger.suspend, task["key"], owner, signal.payload)
            return _suspended(task, signal)
        except GraphBubbleUp:
            await offload(ledger.release, task["key"], owner)
            raise
        except asyncio.CancelledError as exc:
            if started is not None and not started.is_set():
                # cancelled before its body started: it did not run, and may run again
                await asyncio.shield(offload(ledger.release, task["key"], owner))
                raise
            # recorded before the cancellation goes on (in its thread even if cancelled again)
            await asyncio.shield(offload(stopped, task, owner, INTERRUPTED))
            if _shown(exc, _failed(tool, call, admitted.resume_values, exc, outer),
                      outer):  # (the tool's own?)
                raise
            withheld = asyncio.CancelledError()
        except BaseException as exc:
            secrets = _failed(tool, call, admitted.resume_values, exc, outer)
            recorded = await offload(stopped, task, owner, FAILED, exc, secrets)
            if _shown(exc, secrets, outer):
                raise
            withheld = _withheld(exc, recorded)
        if withheld is not None:
            raise withheld
        return await offload(lambda: finish(task, owner, _said(
            tool, call, admitted.resume_values, output)))

    return run_tool, arun_tool
