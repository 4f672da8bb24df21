"""One daemon thread per process that renews the leases this process holds."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphkit._ledger._schema import LEASE_SECONDS

if TYPE_CHECKING:
    from graphkit._ledger._base import LedgerBase

__all__ = ["KEEPER", "LeaseKeeper"]


class LeaseKeeper:
    """A daemon thread per database renews every lease this process holds there (on a thread,
    on a call's execution, on a queued run), so a lease costs no thread of its own and still
    outlives a slow run (but not a dead process). Per database: a database that stops
    answering (locked for long, unreachable) lets its own leases lapse, never another's."""

    def __init__(self) -> None:
        self._held: dict[tuple[tuple[str, str], str], LedgerBase] = {}
        self._threads: dict[tuple[str, str], _ThreadLease] = {}
        """The thread leases held, by (thread id, owner): what `lapsed` reads. An owner is
        one lease's own token, so two leases (two runs, two ledgers) never share an entry."""
        self._lock = threading.Lock()
        self._loops: dict[int, threading.Thread] = {}
        """The renewing thread of each ledger (by id) with leases held."""
        self.lease_seconds = LEASE_SECONDS
        """The shortest lease held: renewed three times in its span."""

    def hold(self, ledger: LedgerBase, what: tuple[str, str], owner: str,
             lease_seconds: float = LEASE_SECONDS) -> None:
        with self._lock:
            self._held[(what, owner)] = ledger
            if what[0] == "thread":
                self._threads[(what[1], owner)] = _ThreadLease(ledger, time.monotonic())
            self.lease_seconds = min(self.lease_seconds, lease_seconds)
            loop = self._loops.get(id(ledger))
            if loop is None or not loop.is_alive():
                loop = self._loops[id(ledger)] = threading.Thread(
                    target=self._run, args=(id(ledger),), name="graphkit-leases", daemon=True)
                loop.start()

    def drop(self, what: tuple[str, str], owner: str) -> None:
        with self._lock:
            self._held.pop((what, owner), None)
            if what[0] == "thread":
                self._threads.pop((what[1], owner), None)

    def held_here(self, thread_id: str) -> bool:
        """Whether a run of this process holds the thread's lease."""
        return any(held == thread_id for held, _ in list(self._threads))

    def holds(self, thread_id: str, owner: object) -> bool:
        """Whether `owner` (a run of this process) holds the thread's lease."""
        return isinstance(owner, str) and (thread_id, owner) in self._threads

    def lapsed(self, thread_id: str, owner: str) -> bool:
        """Whether the thread lease `owner` (taken by this process) is no longer its own:
        another process took it over after it expired (this one stalled, or its renewals
        could not reach the database, for longer than the lease), so that process may be
        advancing the thread. A run checks before each step and each checkpoint write, and
        stops instead of writing beside it. A lease this process does not hold has not
        lapsed. Costs no statement unless the renewals are late; then one, to renew the lease
        or learn it was taken."""
        held = self._threads.get((thread_id, owner))
        if held is None:
            return False
        if not held.lost and self.late(thread_id, owner):
            self._renew(thread_id, owner, held)
        return held.lost

    def late(self, thread_id: str, owner: str) -> bool:
        """Whether `lapsed` would need a statement (the renewals are late)."""
        held = self._threads.get((thread_id, owner))
        return (held is not None and not held.lost
                and time.monotonic() - held.confirmed >= self.lease_seconds / 2)

    def _renew(self, thread_id: str, owner: str, held: _ThreadLease) -> None:
        at = time.monotonic()
        if held.ledger._renew(thread_id, owner):
            held.confirmed = max(held.confirmed, at)
        else:
            held.lost = True  # taken over: it is never this owner's again

    def _run(self, ledger_id: int) -> None:
        while True:
            time.sleep(self.lease_seconds / 3)
            with self._lock:
                held = [(k, ledger) for k, ledger in self._held.items()
                        if id(ledger) == ledger_id]
                if not held:  # nothing left to renew here: `hold` starts another
                    self._loops.pop(ledger_id, None)
                    return
            for ((kind, key), owner), ledger in held:
                with contextlib.suppress(Exception):  # retried on the next round
                    if kind == "thread":
                        lease = self._threads.get((key, owner))
                        if lease is not None and not lease.lost:
                            self._renew(key, owner, lease)
                    elif kind == "ready":
                        ledger._renew_ready(key, owner)
                    else:
                        ledger._renew_call(key, owner)


@dataclass(slots=True)
class _ThreadLease:
    ledger: LedgerBase
    confirmed: float
    """When (monotonic) the lease was last known to be this owner's."""
    lost: bool = False


KEEPER = LeaseKeeper()


def _forked() -> None:
    """A forked child holds none of its parent's leases (renewing them would keep a dead
    parent's leases alive), nor a lock a parent's thread held as it forked."""
    KEEPER.__init__()  # type: ignore[misc]  # (in place: modules hold it by name)


os.register_at_fork(after_in_child=_forked)

