"""The LangGraph server the web inbox is mounted in, seen through its in-process loopback client.

The server keeps the state of the graphs it serves and runs them on its own queue and
workers. The mounted inbox reads a run's messages from it, and once a reviewer has taken the
last decision a run waits on, hands the continuation to it (`runs.create` with a resume
command) under the reviewer's identity: the server's workers run it, and the approval gate
checks every decision again, as for any other resume. Nobody needs to resume the thread by
hand. (Without a LangGraph server, `graphkit worker` is the engine that continues runs.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import BaseMessage, convert_to_messages

from graphkit._approvals import INTERRUPT_MARKER
from graphkit._ledger import SERVER_THREAD, Ledger
from graphkit._review import audit_row, tool_call_id_of, withdraw_thread
from graphkit.server_auth import REVIEWERS_ENV, reviewers_of
from graphkit.types import PendingApproval

__all__ = ["Continuation", "ServerRuns", "thread_messages"]

logger = logging.getLogger("graphkit")
RETRY_SECONDS = 2.0
"""How often the mounted inbox looks for continuations to start again."""
THREAD_DELETED = "its thread was deleted on the LangGraph server"
ALIVE_SECONDS = 3.0
"""How long the lists take a thread the server was found to hold to be there still (the live
list asks every half second); a card and a decision ask every time."""
LOOKUP_SECONDS = 10.0
"""How long the inbox waits for the server to say whether a reviewer may read a thread."""
LOOKUPS = 8
"""Threads looked up on the server at once."""
MAX_ALIVE = 4096
"""Past this many threads remembered, those whose time is up are forgotten."""


@dataclass(frozen=True, slots=True)
class Continuation:
    """What became of a decided run on the server, for its card."""

    status: str
    """The status of the server run that continued it (pending, running, success, error,
    interrupted, timeout); or `waiting` (other decisions are still to be taken), `queued`
    (the continuation did not start yet: it is tried again), `resume` (the last decision was
    taken through another door: a client's resume continues the run); without a server,
    `ready` (nothing is left to decide) or `continued` (the call has its result)."""
    outcome: dict[str, Any] | None
    """The decided call's recorded result (`content`, `status`), once it has one."""
    why: str | None = None
    """Of a `queued` continuation: why its last attempt did not start, if it failed."""

    @property
    def finished(self) -> bool:
        return self.status not in ("pending", "running", "waiting", "queued", "ready",
                                   "resume")


DELETED = Continuation(status="deleted", outcome=None)
"""A decided run whose thread was deleted on the server: nothing continues it."""


def _queue_key(item: PendingApproval) -> str:
    """The ready-queue key of the item's run (a server's run: its thread stands for it)."""
    return item.run_id or SERVER_THREAD + str(item.thread_id)


def _served(item: PendingApproval) -> bool:
    """Whether the item is of a run of the server's (a run of graphkit's API on a shared
    database has a run id, and its thread lives in its own agent's checkpointer)."""
    return bool(item.thread_id) and not item.run_id


def _recorded(ledger: Ledger, item: PendingApproval
              ) -> tuple[str | None, dict[str, Any] | None, tuple[bool, str | None, str | None]]:
    """The item's call key, the call's recorded result (if any), and its run's entry in the
    ready queue (`Ledger.queue_entry`): what the ledger says of a decided approval, in one
    place."""
    row = ledger.approval(item.id)
    key = row.call_key if row is not None else None
    outcome = ledger.outcomes([key], thread_id=item.thread_id).get(key) if key else None
    return key, outcome, ledger.queue_entry(_queue_key(item))


def local_continuation(ledger: Ledger, item: PendingApproval) -> Continuation | None:
    """What became of a decided approval's run where no LangGraph server continues it (a
    `graphkit worker`, or whoever resumes it): queued for a worker, waiting for its other
    decisions, or done, with the call's result."""
    if item.status == "pending" or not item.thread_id:
        return None
    _, outcome, (queued, _, _) = _recorded(ledger, item)
    if outcome is not None:
        return Continuation(status="continued", outcome=outcome)
    if queued:
        return Continuation(status="ready", outcome=None)
    others = [r for r in ledger.approvals_of_run(item.run_id) if not r.decided] \
        if item.run_id else []
    return Continuation(status="waiting" if others else "ready", outcome=None)


def _client() -> Any:
    from langgraph_sdk import get_client

    return get_client(url=None, api_key=None)


def _no_such_thread(exc: Exception, thread_id: str) -> bool:
    """Whether `exc` is the server's own answer that it holds no such thread: a 404 whose
    detail names the thread (a 404 of a route the deployment disabled, `disable_threads`,
    names none)."""
    from langgraph_sdk.errors import NotFoundError

    if not isinstance(exc, NotFoundError):
        return False
    body = exc.body if isinstance(exc.body, Mapping) else {}
    detail = str(body.get("detail") or "").lower()
    return "thread" in detail and thread_id.lower() in detail


async def _holds(thread_id: str) -> bool:
    """Whether the server holds the thread: False only when it says so (`_no_such_thread`).
    Asked as the server itself, with no one's auth context: a reviewer's (a request of the
    inbox, where the deployment authenticates its custom routes) would let the deployment's
    thread filters hide a live thread, whose approvals would then be declined."""
    try:
        async with _as_nobody():
            await _client().threads.get(thread_id)
    except Exception as exc:
        if _no_such_thread(exc, thread_id):
            return False
        logger.warning("inbox: could not look up thread %s on the server", thread_id,
                       exc_info=True)  # not known now: taken to be there
    return True


@contextlib.asynccontextmanager
async def _as_reviewer(identity: str) -> AsyncIterator[None]:
    """Requests of the loopback client skip the server's auth; the run they create takes its
    user from the request's auth context, set here to the reviewer who decided (the gate then
    judges the run as theirs, as it would a run the reviewer had sent with their token)."""
    try:
        from langgraph_api.auth.custom import SimpleUser
        from langgraph_api.utils import AuthContext, set_auth_ctx
    except ImportError:  # pragma: no cover - not inside a LangGraph server
        yield
        return
    token = AuthContext.set(AuthContext.get())
    try:
        set_auth_ctx(SimpleUser(identity), [])
        yield
    finally:
        AuthContext.reset(token)


@contextlib.asynccontextmanager
async def _as_nobody() -> AsyncIterator[None]:
    """Loopback requests made here carry no auth context (the server's handlers and filters
    do not run for them)."""
    try:
        from langgraph_api.utils import AuthContext
    except ImportError:  # pragma: no cover - not inside a LangGraph server
        yield
        return
    token = AuthContext.set(None)
    try:
        yield
    finally:
        AuthContext.reset(token)


REFUSED = ("the deployment's auth {how} {reviewer} (whose decision this is): it is tried "
           "again, and the decision applies when someone it lets run resumes the thread")
BUSY = "the thread's run still goes on: it is continued once its approval gate waits"


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class _Refused(Exception):
    """The server refused the reviewer the continuation (their auth does not reach it)."""


async def _create_run(client: Any, thread_id: str, assistant: Any,
                      command: dict[str, Any] | None, reviewer: str,
                      input: dict[str, Any] | None = None) -> Any:
    """The server run that continues a decided thread, created as the reviewer who decided:
    the run is theirs, as one they sent with their token, and the deployment's auth judges
    it as it would theirs. Never with more: where it refuses them (a handler's 403) or hides
    the thread from them (an owner filter's "not found"), the continuation stays queued (it
    is tried again, after a growing pause), and the decision, which the ledger keeps, applies
    when someone the deployment lets run resumes the thread."""
    from langgraph_sdk.errors import NotFoundError, PermissionDeniedError

    try:
        async with _as_reviewer(reviewer):
            return await client.runs.create(thread_id, assistant, command=command,
                                             input=input, multitask_strategy="enqueue")
    except (NotFoundError, PermissionDeniedError) as exc:
        logger.warning(
            "inbox: the server refuses reviewer %r the continuation of thread %s (%s: the "
            "deployment's auth); it is tried again, and the decision applies when someone the "
            "deployment lets run resumes the thread", reviewer, thread_id, type(exc).__name__)
        hidden = isinstance(exc, NotFoundError)
        raise _Refused(REFUSED.format(
            reviewer=reviewer, how="hides the thread from" if hidden else "refuses")) from exc


def _said_gates(state: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(interrupt id, the approval ids its value names) of each interrupt of the thread whose
    value says it is a gate's (`INTERRUPT_MARKER`, and the approvals it waits on). Whatever
    task it surfaces in: a graphkit agent may run inside a user's own graph, in a node of any
    name (`ServerRuns._gates` asks the ledger whether it is one)."""
    said: dict[str, list[str]] = {}
    for task in state.get("tasks") or []:
        if not isinstance(task, Mapping):
            continue
        for item in task.get("interrupts") or []:
            value = item.get("value") if isinstance(item, Mapping) else None
            if not isinstance(value, Mapping) or INTERRUPT_MARKER not in value or not item.get(
                    "id"):
                continue
            records = value.get("approvals")
            if not isinstance(records, list):
                continue
            ids = [str(r["id"]) for r in records if isinstance(r, Mapping) and r.get("id")]
            if ids and len(ids) == len(records):
                said[str(item["id"])] = ids
    return list(said.items())


async def thread_messages(thread_id: str) -> list[BaseMessage]:
    """A thread's messages, from the server's state (the server trusts its loopback client as
    its own code: the inbox shows reviewers the context of what they decide)."""
    state = await _client().threads.get_state(thread_id)
    values = state.get("values") if isinstance(state, Mapping) else None
    raw = values.get("messages") if isinstance(values, Mapping) else None
    return convert_to_messages(raw) if isinstance(raw, list) else []


async def _reads(reviewer: str, thread_id: str) -> bool:
    """Whether the deployment's auth lets `reviewer` read the thread: asked as them, so its
    thread filters (private threads, `GRAPHKIT_REVIEWERS`) decide, as they do for the run a
    decision of theirs is continued as. Not known (the server failed): not readable."""
    try:
        async with _as_reviewer(reviewer):
            await _client().threads.get(thread_id)
    except Exception as exc:
        from langgraph_sdk.errors import NotFoundError, PermissionDeniedError

        if not isinstance(exc, NotFoundError | PermissionDeniedError):
            logger.warning("inbox: could not ask the server whether %r may read thread %s",
                           reviewer, thread_id, exc_info=True)
        return False
    return True


async def _may_read(reviewer: str, thread_id: str) -> bool:
    """`_reads`, or the thread is gone from the server (asked as the server itself) and the
    deployment's threads are not private: what the ledger kept of it (a declined approval)
    is the inbox's policies' to show. With `GRAPHKIT_REVIEWERS` only a reviewer reads what
    is left of a deleted thread: its creator's arguments, audit and grants read as anyone's
    own otherwise (helper-62)."""
    if await _reads(reviewer, thread_id):
        return True
    private = reviewers_of(os.environ.get(REVIEWERS_ENV, ""))
    if private and reviewer not in private:
        return False
    return not await _holds(thread_id)


class ServerRuns:
    """The loopback face of the server for the mounted inbox."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger
        self._alive: dict[str, float] = {}
        """Threads the server was found to hold, and until when that is taken to hold."""
        self._marked: dict[str, bool] = {}
        """Approvals known to be, or not to be, the served agents' (`_asked_here`)."""
        self._read: dict[tuple[str, str], tuple[float, bool]] = {}
        """Whether a reviewer may read a thread (`_reads`), and until when that holds."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The server's event loop, where `readers` asks it (set on the inbox's first
        request)."""

    def readers(self, reviewer: str, item: PendingApproval) -> bool:
        """`Inbox.readers` for the server's runs: whether `reviewer` may read `item`'s thread
        on the server (helper-61: with private threads, any token holder signed into the
        inbox saw and decided the approvals of threads the server hid from them). Called
        from the inbox's worker threads; an item of a run the server does not keep (graphkit's
        API on a shared database) is judged by the inbox's policies alone."""
        if not _served(item) or not self._asked_here(item.id):
            return True
        key, now = (reviewer, str(item.thread_id)), time.monotonic()
        known = self._read.get(key)
        if known is not None and known[0] > now:
            return known[1]
        loop = self.loop
        if loop is None or _on(loop):  # (never waited for on its own loop: not readable)
            return False
        try:
            readable = asyncio.run_coroutine_threadsafe(
                _may_read(reviewer, key[1]), loop).result(timeout=LOOKUP_SECONDS)
        except Exception:
            logger.warning("inbox: could not ask the server whether %r may read thread %s",
                           reviewer, key[1], exc_info=True)
            return False
        if len(self._read) > MAX_ALIVE:
            self._read = {k: v for k, v in self._read.items() if v[0] > now}
        self._read[key] = (now + ALIVE_SECONDS, readable)
        return readable

    def _asked_here(self, approval_id: str) -> bool:
        """Whether a served agent asked it (`Ledger.server_approvals`): a graph driven
        directly on the shared database asks in threads the server never kept."""
        known = self._marked.get(approval_id)
        if known is None:
            known = approval_id in self._ledger.server_approvals([approval_id])
            if len(self._marked) > MAX_ALIVE:
                self._marked.clear()
            self._marked[approval_id] = known
        return known

    async def present(self, items: Sequence[PendingApproval], *, fresh: bool = False
                      ) -> list[PendingApproval]:
        """The items whose thread the server still holds. What waits in a thread deleted on
        the server (Studio's delete, the API's) is declined as superseded, audited: no run
        will ever take its decision, so no reviewer is asked for one. `fresh`: ask the server
        now, whatever it answered a moment ago."""
        served = [i for i in items if _served(i)]
        marked = (await asyncio.to_thread(self._ledger.server_approvals, [i.id for i in served])
                  if served else set())
        asked = [i for i in served if i.id in marked]
        gone = await self.deleted({str(i.thread_id) for i in asked}, fresh=fresh)
        withdrawn: set[str] = set()
        for thread_id in gone:  # only what was read before the server was asked
            ids = {i.id for i in asked if i.thread_id == thread_id}
            await asyncio.to_thread(self._withdraw, thread_id, ids)
            withdrawn |= ids
        return [i for i in items if i.id not in withdrawn]

    async def deleted(self, thread_ids: set[str], *, fresh: bool = False) -> set[str]:
        """Those of `thread_ids` the server now answers it does not hold (a thread it cannot
        be asked about now is taken to be there). Callers ask only of threads the served
        agents asked in (`Ledger.server_approvals`, `server_threads`)."""
        now = time.monotonic()
        asked = [t for t in thread_ids if fresh or self._alive.get(t, 0.0) <= now]
        if not asked:
            return set()
        limit = asyncio.Semaphore(LOOKUPS)

        async def held(thread_id: str) -> bool:
            async with limit:
                return await _holds(thread_id)

        found = await asyncio.gather(*(held(t) for t in asked))
        if len(self._alive) > MAX_ALIVE:
            self._alive = {t: until for t, until in self._alive.items() if until > now}
        for thread_id, there in zip(asked, found, strict=True):
            if there:
                self._alive[thread_id] = now + ALIVE_SECONDS
            else:
                self._alive.pop(thread_id, None)
        return {t for t, there in zip(asked, found, strict=True) if not there}

    def _withdraw(self, thread_id: str, only: set[str]) -> None:
        withdraw_thread(self._ledger, thread_id, comment=THREAD_DELETED, served_only=True,
                        only=only)

    async def continue_run(self, item: PendingApproval, reviewer: str) -> str | None:
        """Start the continuation of `item`'s run on the server, as `reviewer` (the inbox's
        sign-in vouched for them), if nothing of it waits any more; the server's run id, or
        None (something still waits, another reviewer's decision started it, or the server
        refused: then it stays queued, and `retry_due` tries it again as them)."""
        if not _served(item):  # a run of graphkit's API: a `graphkit worker` continues it
            return None
        return await self._start(_queue_key(item), str(item.thread_id), reviewer, item.id)

    async def retry_due(self) -> None:
        """Start every continuation that is due again (its last attempt did not start), as
        the reviewer whose decision in this inbox made its run ready."""
        for key, thread_id, reviewer, approval_id in await asyncio.to_thread(
                self._ledger.server_runs_due):
            await self._start(key, thread_id, reviewer, approval_id)

    async def keep_continuing(self) -> None:
        """`retry_due`, every few seconds, for as long as the app serves."""
        while True:
            await asyncio.sleep(RETRY_SECONDS)
            try:
                await self.retry_due()
            except Exception:  # the next round tries again
                logger.warning("inbox: retrying continuations failed", exc_info=True)

    async def _start(self, key: str, thread_id: str, reviewer: str, approval_id: str
                     ) -> str | None:
        owner = f"inbox-{uuid.uuid4().hex[:12]}"
        ready_at = await asyncio.to_thread(self._ledger.take_ready, key, owner,
                                           continue_as=reviewer, continue_for=approval_id)
        if ready_at is None:
            return None

        async def again(why: str) -> None:
            await asyncio.to_thread(self._ledger.retry_ready, key, owner, why=why)

        try:
            client = _client()
            try:
                async with _as_nobody():  # as the server: no reviewer's filters hide it
                    thread = await client.threads.get(thread_id)
            except Exception as exc:
                if not _no_such_thread(exc, thread_id) or not await asyncio.to_thread(
                        self._ledger.server_threads, [thread_id]):
                    raise
                # deleted on the server: nothing will ever continue the run, so the entry is
                # dropped (retried, it would fail every few seconds for as long as it serves)
                logger.warning("inbox: thread %s was deleted on the LangGraph server; its "
                               "decided run is not continued", thread_id)
                await asyncio.to_thread(self._ledger.done_ready, key, owner, ready_at)
                # nothing waited in it as this run was claimed: what waits now is of a thread
                # recreated under its id since (its grants go, and its other queued runs)
                await asyncio.to_thread(self._withdraw, thread_id, set())
                return None
            metadata = thread.get("metadata") or {}
            assistant = metadata.get("assistant_id") or metadata.get("graph_id")
            async with _as_nobody():
                state = await client.threads.get_state(thread_id)
            gates = await asyncio.to_thread(self._gates, thread_id, state)
            if not gates and thread.get("status") == "busy":
                # a run goes on: its gate may be about to pause (its interrupt not written yet)
                await again(BUSY)
                return None
            ended = not gates and not state.get("next") and bool(await asyncio.to_thread(
                self._ledger.waiting_in, thread_id, [approval_id]))
            if not gates and not ended:
                # Nothing of graphkit's waits: the run waits on something else (a tool's own
                # question) or is over. Whoever answers passes the gate, which applies what the
                # ledger holds: nothing is answered here in anyone's place.
                logger.info("inbox: no approval gate waits in thread %s; its decision applies "
                            "as the run next passes its gate", thread_id)
                await asyncio.to_thread(self._ledger.done_ready, key, owner, ready_at)
                return None
            if ended:
                # A client's state write ended the run while the approval waited (a server
                # without sign-in lets any client write state): no gate's interrupt is left to
                # resume, and a resume there runs nothing. Graph input without messages goes
                # through the model node, which takes the run back to its gate (what the
                # client wrote is dropped, audited as refused), and the gate applies the
                # decision (helper-106: the decision waited for the thread's next message).
                run = await _create_run(client, thread_id, assistant, None, reviewer,
                                        input={"messages": []})
            else:
                # each waiting gate applies what the ledger holds (the Agent API resumes so too)
                command: dict[str, Any] = {"resume": {i: {} for i in gates}}
                run = await _create_run(client, thread_id, assistant, command, reviewer)
        except _Refused as refused:
            await again(str(refused))
            return None
        except Exception as exc:
            logger.warning("inbox: the server did not take the continuation of thread %s; "
                           "it is tried again", thread_id, exc_info=True)
            await again(f"the LangGraph server did not take it ({type(exc).__name__})")
            return None
        server_run = str(run["run_id"])
        await asyncio.to_thread(self._done, key, thread_id, reviewer, approval_id, server_run,
                                owner, ready_at)
        return server_run

    def _gates(self, thread_id: str, state: Mapping[str, Any]) -> list[str]:
        """The ids of the interrupts graphkit's gates wait on in the thread: each names only
        approvals the ledger says a run of this thread waits on now. A tool's own
        `interrupt()` asks a question of its own, with any value (graphkit's marker and a real
        approval id too, where a model wrote its arguments): a decision in the inbox never
        answers it."""
        said = _said_gates(state)
        waiting = self._ledger.waiting_in(thread_id, (a for _, ids in said for a in ids))
        return [interrupt_id for interrupt_id, ids in said if waiting.issuperset(ids)]

    def _done(self, key: str, thread_id: str, reviewer: str, approval_id: str,
              server_run: str, owner: str, ready_at: float) -> None:
        self._ledger.done_ready(key, owner, ready_at)
        run_id = None if key.startswith(SERVER_THREAD) else key
        row = self._ledger.approval(approval_id)
        # under the approval whose decision made the run ready: its viewers see it in the audit
        self._ledger.audit([audit_row(
            "continued", {"id": approval_id, "tool_name": row.tool_name if row else None,
                          "tool_call_id": tool_call_id_of(self._ledger,
                                                          row.call_key if row else None)},
            thread_id=thread_id, run_id=run_id, decided_by=reviewer, comment=server_run,
            detail=f"the LangGraph server continues the run (its run {server_run}), started "
                   "by the inbox")])

    async def continuation(self, item: PendingApproval) -> Continuation | None:
        """What became of a decided approval's run: the status of the server run that
        continued it (the inbox recorded its id) and the call's recorded result."""
        if item.status == "pending" or not item.thread_id:
            return None
        key, outcome, (queued, continued_for, why) = await asyncio.to_thread(
            _recorded, self._ledger, item)
        if queued and continued_for is not None:
            # why it did not start names its reviewer: said on their approval's card alone
            # (a viewer of another approval of the thread may not see who decided that one)
            return Continuation(status="queued", outcome=outcome,
                                why=why if continued_for == item.id else None)
        if queued and outcome is None:  # made ready by another door: no sign-in vouches
            return Continuation(status="resume", outcome=None)  # for anyone to run it as
        server_run = await asyncio.to_thread(self._continued, item)
        if server_run is None:
            if outcome is not None:
                return Continuation(status="continued", outcome=outcome)
            marked = await asyncio.to_thread(self._ledger.server_approvals, [item.id]) \
                if _served(item) else set()
            if marked and await self.deleted({str(item.thread_id)}, fresh=True):
                return DELETED
            return Continuation(status="waiting", outcome=outcome)
        try:
            run = await _client().runs.get(item.thread_id, server_run)
            status = str(run["status"])
        except Exception:  # context only: the card is shown without it
            logger.warning("inbox: could not read run %s", server_run, exc_info=True)
            status = "running"
        if status == "success" and outcome is None and key is not None:
            status = "running"  # finished, but its result is not read yet: look again
        return Continuation(status=status, outcome=outcome)

    def _continued(self, item: PendingApproval) -> str | None:
        """The server run the inbox started to continue the item's run, if it did."""
        decided = item.decided_at or ""
        found = [e for e in self._ledger.read_audit(thread_id=item.thread_id)
                 if e.get("event") == "continued" and e.get("run_id") == item.run_id
                 and str(e.get("at") or "") >= decided and e.get("comment")]
        return str(found[-1]["comment"]) if found else None
