"""Workers: resume runs whose waiting calls were all decided elsewhere (the inbox, the CLI, a
web page), on any number of machines that share the database.

A decision that leaves its run with nothing pending puts the run in the ledger's ready queue,
in the same transaction that claims it. Workers claim runs from that queue with the
database's own locking (`FOR UPDATE SKIP LOCKED` on PostgreSQL; SQLite has one writer at a
time), as a lease that lapses if the worker dies, and on PostgreSQL learn of new work from
`LISTEN/NOTIFY` instead of polling. Resuming goes through `agent.resume`, so the thread's lease
and the gate's checks apply as for any other door.

Why not procrastinate or pgqueuer: the queue entry must be written in the very transaction
that claims the decision (a job library would add a second transaction and its own schema),
the queue must also work on SQLite, and what is queued is already idempotent (the thread lease
and the execution claims make a second resume harmless); what is left is one table and two
statements.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphkit._owner import new_owner

if TYPE_CHECKING:
    from graphkit.agent import Agent

__all__ = ["Worker"]

logger = logging.getLogger("graphkit")

POLL_SECONDS = 0.05
"""How often an idle worker looks for work where the database cannot notify it (SQLite)."""
LISTEN_SECONDS = 1.0
"""How long a PostgreSQL worker waits for a notification before it looks anyway."""


class Worker:
    """Resume ready runs of one agent with `concurrency` threads until `stop()`.

    Args:
        agent: The agent whose runs to resume; its storage is the queue's database.
        concurrency: How many runs this process resumes at once.
        on_resumed: Called with each run id after its resume returned (for tests and metrics).
    """

    def __init__(self, agent: Agent, *, concurrency: int = 1,
                 on_resumed: Callable[[str], Any] | None = None) -> None:
        if concurrency < 1:
            msg = f"concurrency must be at least 1, got {concurrency}"
            raise ValueError(msg)
        self.agent = agent
        self.concurrency = concurrency
        self.on_resumed = on_resumed
        self._ledger = agent._storage.ledger
        self._stop = threading.Event()
        self._asked = 0
        """Stops asked for (`stop`, `stop_from_signal`, Ctrl-C), whatever the door: one
        stops, two leave (a Ctrl-C then a SIGTERM counted as one before: helper-89)."""
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        """The runs this worker's threads are resuming now."""
        self._wake = threading.Condition()
        self._listen_url = agent._storage.url if agent._storage.url.startswith(
            ("postgresql://", "postgres://")) else None
        self.resumed = 0

    def stop(self) -> None:
        """Take no more runs; `run` returns once the runs in progress finished (a tool cut
        off mid-call would run again in the worker that continues its run). Called again
        while they finish (a second SIGTERM or Ctrl-C): `run` returns now, and they are left
        as a killed worker leaves them."""
        self._asked += 1
        self._halt()

    def stop_from_signal(self) -> None:
        """`stop()`, for a signal handler: it runs in the main thread between any two of its
        steps, also inside an `Event.wait` that holds the event's lock, where `stop()`
        setting that event waited on the lock for good (a worker never exited after SIGTERM,
        found in CI). It only counts the request, which `run` acts on: one stops, two leave."""
        self._asked += 1

    @property
    def left_runs(self) -> bool:
        """Whether `run` returned leaving runs in progress (a second stop): their tools may
        still run in threads of this process, which its exit would wait for."""
        return self._asked >= 2

    def _halt(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()

    def run(self) -> None:
        """Work until `stop()` (or Ctrl-C), then let the runs in progress finish."""
        loops = [threading.Thread(target=self._loop, name=f"graphkit-worker-{i}", daemon=True)
                 for i in range(self.concurrency)]
        threads = list(loops)
        if self._listen_url:
            threads.append(threading.Thread(target=self._listen, name="graphkit-listen",
                                            daemon=True))
        for thread in threads:
            thread.start()
        try:
            while not self._stop.is_set() and not self._asked:
                time.sleep(0.2)
        except KeyboardInterrupt:  # (a library's caller: the CLI takes SIGINT as a signal)
            self._asked += 1
            raise
        finally:
            self._halt()
            self._finish(loops)
            for thread in threads[len(loops):]:
                thread.join(timeout=5)

    def _finish(self, loops: list[threading.Thread]) -> None:
        """Wait for the runs in progress, however long their tools take: a deploy cut off
        after a few seconds ran again in the next worker (helper-56). A second `stop()` (or
        a Ctrl-C, which raises here) leaves them."""
        with self._lock:
            busy = sorted(self._busy)
        if busy:
            logger.warning("worker: stopping after the %d run(s) in progress finish (%s); stop "
                           "again (SIGTERM, Ctrl-C) to leave them to another worker",
                           len(busy), ", ".join(busy))
        try:
            for thread in loops:
                while thread.is_alive() and not self.left_runs:
                    thread.join(0.2)
        except KeyboardInterrupt:
            self._asked += 1
        with self._lock:
            left = sorted(self._busy)
        if left:
            logger.warning("worker: left %d run(s) in progress (%s): another worker continues "
                           "them once their claims lapse", len(left), ", ".join(left))

    def _loop(self) -> None:
        owner = new_owner()
        while not self._stop.is_set():
            try:
                worked = self._resume_one(owner)
            except Exception:  # the queue's database is away: the worker waits, not dies
                logger.warning("worker: the ready queue could not be read or updated; "
                               "trying again", exc_info=True)
                worked = False
            if not worked:
                with self._wake:
                    self._wake.wait(LISTEN_SECONDS if self._listen_url else POLL_SECONDS)

    def _resume_one(self, owner: str) -> bool:
        """Claim the oldest ready run, with its thread's lease where that is free, and resume
        it (False: none is ready). Whatever the resume raises, the claim and the lease are
        given back on the one path out (`finally`): a thread is never left held by a worker
        that is no longer advancing it."""
        claimed = self._ledger.next_ready(owner, self.agent.name, lease=True)
        if claimed is None:
            return False
        run_id, thread = claimed.run_id, claimed.thread_id if claimed.leased else None
        resumed = False
        with self._lock:
            self._busy.add(run_id)
        try:
            self.agent._resume_ready(
                run_id, claimed.thread_id, leased_by=owner if claimed.leased else None,
                known=(run_id, claimed.later_run) if claimed.later_read else None)
            resumed = True
        except Exception as exc:  # one failing run must not stop the worker, nor be lost
            logger.warning("worker: resuming run %s failed (%s: %s); it will be tried "
                           "again", run_id, type(exc).__name__, exc)
        finally:
            if resumed:
                self._ledger.done_ready(run_id, owner, claimed.ready_at, thread_id=thread)
            else:  # (an exception, or whatever else ends this thread: SystemExit, say)
                self._ledger.retry_ready(run_id, owner, thread_id=thread)
            with self._lock:
                self._busy.discard(run_id)
        if resumed:
            self.resumed += 1
            if self.on_resumed is not None:
                self.on_resumed(run_id)
        return True

    def _listen(self) -> None:
        """Wake the workers when PostgreSQL says a run became ready."""
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(str(self._listen_url), autocommit=True) as conn:
                    conn.execute("LISTEN graphkit_ready")
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=LISTEN_SECONDS, stop_after=1):
                            with self._wake:  # one run became ready: one idle thread claims
                                self._wake.notify()  # it (a busy one claims again when done)
            except Exception:  # reconnect; the workers keep polling meanwhile
                logger.warning("worker: LISTEN connection lost; reconnecting", exc_info=True)
                with contextlib.suppress(Exception):
                    self._stop.wait(1.0)
