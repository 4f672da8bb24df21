"""One daemon thread per process that renews the leases this process holds."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

from graphkit._ledger._schema import LEASE_SECONDS

if TYPE_CHECKING:
    from graphkit._ledger._base import LedgerBase

__all__ = ["KEEPER", "LeaseKeeper"]


class LeaseKeeper:
    """One daemon thread per process renews every lease this process holds (on a thread, or
    on a call's execution), so a lease costs no thread of its own and still outlives a slow
    run (but not a dead process)."""

    def __init__(self) -> None:
        self._held: dict[tuple[tuple[str, str], str], LedgerBase] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.lease_seconds = LEASE_SECONDS
        """The shortest lease held: renewed three times in its span."""

    def hold(self, ledger: LedgerBase, what: tuple[str, str], owner: str,
             lease_seconds: float = LEASE_SECONDS) -> None:
        with self._lock:
            self._held[(what, owner)] = ledger
            self.lease_seconds = min(self.lease_seconds, lease_seconds)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="graphkit-leases",
                                                daemon=True)
                self._thread.start()

    def drop(self, what: tuple[str, str], owner: str) -> None:
        with self._lock:
            self._held.pop((what, owner), None)

    def _run(self) -> None:
        while True:
            time.sleep(self.lease_seconds / 3)
            with self._lock:
                held = list(self._held.items())
            for ((kind, key), owner), ledger in held:
                with contextlib.suppress(Exception):  # retried on the next round
                    if kind == "thread":
                        ledger._renew(key, owner)
                    elif kind == "ready":
                        ledger._renew_ready(key, owner)
                    else:
                        ledger._renew_call(key, owner)


KEEPER = LeaseKeeper()
