"""Every run of an agent's graph advances its thread under the thread's lease, whoever starts it.

graphkit's API and workers take a thread's lease before they stream its graph
(`Agent._prepare`), so two of them never advance one thread at once. LangGraph itself does not
order a thread's runs: graph input given to the compiled graph directly (`agent.graph.invoke`,
a notebook, an app of the user's own) beside a worker's run wrote from the same checkpoint as
it, and the later writer's checkpoints hid the other's: the user's message and its answer were
lost, and a delegation the message stopped was told it "did not run" while it paid (helper-95).

So the graph's own `stream` and `astream`, which `invoke`, `ainvoke`, `astream_events` and
the LangGraph server all go through, and its state writes (`update_state` and its kin), take
the lease as graphkit's doors do, waiting for its holder as they do. The thread is the one
LangGraph itself reads: the config given, over the one a surrounding runnable passes down.
graphkit's doors, which hold the lease already, stream through `stream_held` and
`astream_held`: nothing in a config says a run holds the lease (a key there was a bearer
token, which a run's own debug stream shows its client: helper-96). The lease's owner does
go in the config, for the run's nodes and writes to check that it is still theirs
(`graphkit._fence`); a client that names one only has its run fenced by a lease it does not
hold.

The same doors give each message that comes without an id one drawn at random
(`_state.named_input`): LangGraph's delta reducer names none, and graphkit finds messages by
their ids. And graph input that brings messages starts a run in the ledger, as the agent's
API does for a new message, on a thread that has its agent's runs already: what the run asks
is filed under it, and a decision that names an earlier run never takes it. Filed under the
earlier run, a call a client's message made the model ask (its tool_call_id reused) was paid
on a decision an operator took for the call it superseded (helper-108). A thread the agent's
API never ran (a LangGraph server's) keeps its runs unrecorded, as the server's own. A state
write starts one only for a user's message (a message written, then graph input with none,
had the model answer it under the earlier run: helper-110); any other write changes the run
it writes in, which goes on under its id (`Agent.resume` of it). A client's resume of a
thread such a write left with nothing next, while a gate of the agent waited, goes back to
the gate as graphkit's own resume does (`_control.back_to_gate`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config
from langgraph.errors import UnknownInterruptError
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, StateSnapshot, StateUpdate

from graphkit._context import LEASE_KEY
from graphkit._control import back_to_gate
from graphkit._ids import stored
from graphkit._ledger import Ledger, RunBusyError, RunToRecord, _keeper, _schema
from graphkit._offload import apart, offload
from graphkit._sent import is_resume_map, stamped
from graphkit._state import brings_messages, named_input
from graphkit.errors import GraphkitError, InterruptNotWaitingError, SubgraphCheckpointError

try:
    from langgraph._internal._config import ensure_config
    from langgraph._internal._constants import CONFIG_KEY_TASK_ID
except ImportError:  # pragma: no cover - a LangGraph without them: LangChain's merge
    from langchain_core.runnables.config import ensure_config as _ensure
    from langchain_core.runnables.config import merge_configs

    CONFIG_KEY_TASK_ID = "__pregel_task_id"

    def ensure_config(*configs: RunnableConfig | None) -> RunnableConfig:
        return _ensure(merge_configs(*configs))

__all__ = ["LeasedGraph", "until_free"]

T = TypeVar("T")


class LeasedGraph(CompiledStateGraph[Any, Any, Any, Any]):
    """A compiled agent graph whose runs hold their thread's lease in `leases`."""

    def __init__(self, *, leases: Ledger, agent: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # (attributes of their own names: `copy` passes them back in)
        self.leases = leases
        self.agent = agent

    @classmethod
    def of(cls, compiled: CompiledStateGraph[Any, Any, Any, Any], leases: Ledger, agent: str
           ) -> LeasedGraph:
        attrs = {k: v for k, v in compiled.__dict__.items() if k != "__orig_class__"}
        return cls(leases=leases, agent=agent, **attrs)

    def _run(self, starts: bool) -> RunToRecord:
        """The run to record as the lease is taken: a new one for a call that `starts` one
        (it brings messages), recorded only where the agent has runs (`follows`), else none;
        and either way, on a thread no other agent's runs hold (another agent's graph, given
        the thread's decisions, left its owner's approved call waiting for good: helper-110)."""
        return RunToRecord(str(uuid.uuid4()) if starts else None, self.agent)

    def _thread(self, config: RunnableConfig | None, *, runs: bool = False) -> str | None:
        """The thread a run with `config` advances, as LangGraph reads it; None for none, and
        for a graph called inside a running graph's task (a subgraph, an agent a tool calls),
        as LangGraph tells one: the run of that task advances the thread, under its lease
        if it is an agent's (waiting for it there hung the run for the whole wait:
        helper-97). Only LangGraph's own context says so, never a key a client passed.
        `RunBusyError` at once for a run of the thread an agent's run inside it holds.
        `SubgraphCheckpointError` for a call that `runs` the graph (not a state write) on a
        subagent's own checkpoint (its `checkpoint_ns`): LangGraph runs this graph's nodes
        over it, not the subagent's, and its gates compute interrupt ids other than the
        thread's, so a decision under the id a client read was never read, nothing audited,
        the client asked again (helper-141). (A subagent's state is still read and written
        at its namespace: LangGraph hands those to the subgraph.)"""
        configurable = ensure_config(self.config, config).get("configurable") or {}
        thread_id = configurable.get("thread_id")
        ambient = (var_child_runnable_config.get() or {}).get("configurable") or {}
        if thread_id is None or (
                ambient.get(CONFIG_KEY_TASK_ID) is not None
                and configurable.get(CONFIG_KEY_TASK_ID) == ambient.get(CONFIG_KEY_TASK_ID)
                and thread_id == ambient.get("thread_id")):
            return None  # (the task's own thread, and the task LangGraph runs: helper-98)
        if runs and (namespace := configurable.get("checkpoint_ns")):
            msg = (f"checkpoint_ns {namespace!r} names a subagent's own checkpoint, which a "
                   "run cannot start from: run the thread from its root (a config without "
                   "checkpoint_ns; a root checkpoint's checkpoint_id to fork). Nothing was "
                   "run or recorded")
            raise SubgraphCheckpointError(msg)
        if not stored(str(thread_id)):  # (the driver's own error reached the caller)
            msg = f"thread id {thread_id!r} holds a NUL or does not encode as UTF-8"
            raise GraphkitError(msg)
        if (thread_id == ambient.get("thread_id")
                and _keeper.KEEPER.holds(str(thread_id), ambient.get(LEASE_KEY))):
            # a task of an agent's run on this thread (a tool that names its own thread in
            # a config of its own): the lease it would wait for is its own run's, which
            # waits for it to return; it waited out the whole wait and failed its run
            msg = (f"this call runs inside a run of thread {thread_id!r}, which holds the "
                   "thread until the call returns: it cannot start a run of that thread. "
                   "Give it a thread of its own, or no config (it then runs inside the "
                   "caller's run)")
            raise RunBusyError(msg)
        return str(thread_id)

    def _hold(self, thread_id: str, run: RunToRecord) -> str:
        """The thread's lease for a sync call, as `Ledger.hold_thread` takes it; at once or
        not at all on a running event loop while a run of this process holds it (a
        notebook's cell beside a task it started): the wait would block the loop that run
        may need to finish, for the whole wait (helper-96)."""
        hold = functools.partial(self.leases.hold_thread, thread_id, run=run, follows=True)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return hold(wait=_schema.WAIT_SECONDS)
        if not _keeper.KEEPER.held_here(thread_id):
            return hold(wait=_schema.WAIT_SECONDS)
        try:
            return hold(wait=0.0)
        except RunBusyError as exc:
            msg = (f"thread {thread_id!r} is being advanced by another run of this process, "
                   "and this call would wait for it on the event loop that run may need: "
                   "await `ainvoke` or `astream` instead")
            raise RunBusyError(msg) from exc

    @contextlib.contextmanager
    def _leased(self, config: RunnableConfig | None, *, starts: bool = False,
                runs: bool = False) -> Iterator[tuple[RunnableConfig | None, str | None]]:
        """`config` for a sync call, the lease of its thread held (and named in it) while
        the body runs, and the run it `starts` recorded; as it is for a call that names no
        thread or runs nested. And the thread leased (None for those). A call that `runs`
        the graph (not a state write) starts at the thread's root (`_thread`)."""
        thread_id = self._thread(config, runs=runs)
        if thread_id is None:
            yield config, None
            return
        run = self._run(starts)
        owner = self._hold(thread_id, run)
        try:
            yield _with_owner(config, owner), thread_id
        except UnknownInterruptError:  # (refused before it ran: `answers_no_pause`)
            self._forget(run)
            raise
        finally:
            self.leases.release_thread(thread_id, owner)

    def _forget(self, run: RunToRecord) -> None:
        """Drop the record of a run its resume's refusal kept from running: a decision that
        named no run went to it (helper-136), as the API's refused runs leave none."""
        if run.run_id is not None:
            self.leases.forget_run(run.run_id)

    @contextlib.asynccontextmanager
    async def _aleased(self, config: RunnableConfig | None, *, starts: bool = False,
                       runs: bool = False
                       ) -> AsyncIterator[tuple[RunnableConfig | None, str | None]]:
        """`_leased` for an async call: the lease waited for on the event loop (`_ahold`),
        and given back even when a cancel comes as it is given back (shielded)."""
        thread_id = self._thread(config, runs=runs)
        if thread_id is None:
            yield config, None
            return
        run = self._run(starts)
        owner = await _ahold(self.leases, thread_id, run)
        try:
            yield _with_owner(config, owner), thread_id
        except UnknownInterruptError:
            await offload(self._forget, run)
            raise
        finally:
            await asyncio.shield(offload(self.leases.release_thread, thread_id, owner))

    def stream(self, input: Any, config: RunnableConfig | None = None,
               **kwargs: Any) -> Iterator[Any]:
        with self._leased(config, starts=brings_messages(input), runs=True) as (
                leased, thread_id):
            if thread_id is not None and _resumes(input):
                input = self._resumed(input, self.get_state(cast(RunnableConfig, leased)),
                                      thread_id)
            if thread_id is not None:
                leased = stamped(leased, input)
            yield from super().stream(named_input(input), leased, **kwargs)

    async def astream(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any) -> AsyncIterator[Any]:
        async with self._aleased(config, starts=brings_messages(input), runs=True) as (
                leased, thread_id):
            if thread_id is not None and _resumes(input):
                snapshot = await self.aget_state(cast(RunnableConfig, leased))
                input = await offload(self._resumed, input, snapshot, thread_id)
            if thread_id is not None:
                leased = stamped(leased, input)
            async for part in super().astream(named_input(input), leased, **kwargs):
                yield part

    def _resumed(self, command: Command[Any], snapshot: StateSnapshot, thread_id: str) -> Any:
        """A client's resume, refused where it answers a pause no longer waiting
        (`answers_no_pause`), or carries an answer where nothing waits on an interrupt:
        LangGraph ran no node, or nodes that never read it, and the decision was dropped
        without a word (helper-134, helper-136 F2). For a thread a state write left with
        nothing next while a gate of this agent waited, a bare resume with no answer (`{}`)
        goes back to the gate, which applies what the ledger holds and asks again
        (`_control.back_to_gate`, as the API's resume does), where it ran nothing."""
        answers_no_pause(command.resume, snapshot)
        back = back_to_gate(snapshot, self.leases, thread_id, self.agent) if _bare_resume(
            command) else None
        if not snapshot.interrupts and command.resume != {}:
            raise InterruptNotWaitingError(NOTHING_WAITS if back is None else ENDED_BY_A_WRITE,
                                           reason="not_pending")
        return back or command

    def stream_held(self, input: Any, config: RunnableConfig, **kwargs: Any) -> Iterator[Any]:
        """`stream`, for a door that holds the thread's lease already (its owner in
        `config`)."""
        return super().stream(named_input(input), stamped(config, input), **kwargs)

    def astream_held(self, input: Any, config: RunnableConfig, **kwargs: Any
                     ) -> AsyncIterator[Any]:
        """`astream`, for a door that holds the thread's lease already."""
        return super().astream(named_input(input), stamped(config, input), **kwargs)

    def bulk_update_state(self, config: RunnableConfig,
                          supersteps: Sequence[Sequence[StateUpdate]]) -> RunnableConfig:
        with self._leased(config, starts=_say(supersteps)) as (leased, _):
            return super().bulk_update_state(cast(RunnableConfig, leased),
                                             _named_updates(supersteps))

    async def abulk_update_state(self, config: RunnableConfig,
                                 supersteps: Sequence[Sequence[StateUpdate]]
                                 ) -> RunnableConfig:
        async with self._aleased(config, starts=_say(supersteps)) as (leased, _):
            return await super().abulk_update_state(cast(RunnableConfig, leased),
                                                    _named_updates(supersteps))


NOTHING_WAITS = ("the resume answers no pause: nothing in the thread waits on an interrupt (its "
                 "run ended; or it stopped between steps, where a resume with no answer, {}, "
                 "goes on). Nothing was run or recorded; a new message goes as graph input")
ENDED_BY_A_WRITE = ("the resume answers no pause: a state write ended the run while tool calls "
                    "waited, and no interrupt waits for an answer. Nothing was run or "
                    "recorded; resume with no answer ({}) to have the gate ask again, then "
                    "answer it")


def answers_no_pause(resume: Any, snapshot: StateSnapshot) -> None:
    """Refuse a resume map that answers, under its id, an interrupt the thread no longer
    waits on: a client read the pause's ids, a reviewer's decision (or a new message) moved
    the run on, and it paused again under new ones. LangGraph resumed the run with no node
    answered, and the message or decision the map carried was dropped without a word, the
    run paused as before (helper-135). Refused before anything runs
    (`InterruptNotWaitingError`, LangGraph's `UnknownInterruptError` too), naming the ids
    that wait. An empty answer (`{}`, "apply what the ledger holds", as the mounted inbox's
    continuation sends under the ids it read) is no answer, and goes through: the gates read
    the ledger whatever their ids."""
    if not is_resume_map(resume):
        return  # (a single value, as LangGraph reads it: it answers the one pause)
    waiting = sorted({i.id for i in snapshot.interrupts})
    stale = sorted(k for k, value in resume.items() if k not in waiting and value != {})
    if stale:
        # (an id may never have been this thread's: helper-143 L3)
        msg = (f"the resume answers interrupt {stale[0]}, which does not wait here: the run "
               "moved on since its interrupts were read, or the id is not this thread's; it "
               f"waits on {waiting or 'nothing'}. Nothing was run or recorded; read the "
               "thread's interrupts again and resend under their ids")
        raise InterruptNotWaitingError(msg, reason="not_pending", interrupt_ids=stale,
                                       pending_ids=waiting)


def _resumes(input: Any) -> bool:
    """Whether graph input is a `Command` that resumes (whatever else it carries)."""
    return isinstance(input, Command) and input.resume is not None


def _bare_resume(input: Any) -> bool:
    """Whether graph input is a resume and nothing else (no goto, update or graph)."""
    return (_resumes(input) and not input.goto and input.update is None
            and input.graph is None)


def _named_updates(supersteps: Sequence[Sequence[StateUpdate]]) -> list[list[StateUpdate]]:
    """The state writes with an id on each message they bring (`named_input`)."""
    return [[update._replace(values=named_input(update.values)) for update in step]
            for step in supersteps]


def _say(supersteps: Sequence[Sequence[StateUpdate]]) -> bool:
    """Whether state writes bring a user's message (a new turn of the conversation, which
    starts a run as graph input does; other writes change the run they write in)."""
    return any(brings_messages(update.values, users=True) for step in supersteps
               for update in step)


def _with_owner(config: RunnableConfig | None, owner: str) -> RunnableConfig:
    config = config or {}
    return {**config, "configurable": {**(config.get("configurable") or {}), LEASE_KEY: owner}}


async def until_free(attempt: Callable[[], Awaitable[T]], wait: float) -> T:
    """`attempt()` (one try, in a worker thread, raising `RunBusyError` while another run
    holds the thread) until it goes through, for up to `wait` seconds, sleeping on the event
    loop in between: runs that waited in worker threads filled the loop's default pool,
    which the holder needs to finish (helper-8, helper-97). The last refusal is raised."""
    deadline = time.monotonic() + wait
    pause = 0.005
    while True:
        try:
            return await attempt()
        except RunBusyError:
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.1)


async def _ahold(leases: Ledger, thread_id: str, run: RunToRecord) -> str:
    """The thread's lease, as `Ledger.hold_thread` takes it, waited for on the event loop
    (`until_free`). One try cancelled as it runs gives the lease back once taken (kept, it
    would be renewed for as long as the process lives)."""

    async def attempt() -> str:
        taking = asyncio.ensure_future(offload(_hold_now, leases, thread_id, run))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            taking.add_done_callback(functools.partial(_give_back, leases, thread_id))
            raise

    return await until_free(attempt, _schema.WAIT_SECONDS)


def _hold_now(leases: Ledger, thread_id: str, run: RunToRecord) -> str:
    return leases.hold_thread(thread_id, wait=0.0, run=run, follows=True)


def _give_back(leases: Ledger, thread_id: str, taking: asyncio.Future[str]) -> None:
    if not taking.cancelled() and taking.exception() is None:
        apart(leases.release_thread, thread_id, taking.result(), name="graphkit-release")
