"""Blocking storage work in an async run always goes to a worker thread.

The ledger, the stores and the checkpointers graphkit opens are synchronous (SQLite's and
psycopg's sync drivers, an in-memory SQLite for memory storage), and every call may wait on a
lock another thread holds. On an event loop that is a blocking call: the LangGraph server's
detector (blockbuster) refuses it, and it stalls every other run the loop serves. So nothing
of it runs on the loop, whatever the storage.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["apart", "offload"]

T = TypeVar("T")


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread (the context, and so the node's config, goes along)."""
    return await asyncio.to_thread(fn, *args)


def apart(fn: Callable[..., object], *args: Any, name: str) -> None:
    """`fn(*args)` in a daemon thread of its own, not awaited: for giving something back where
    nobody waits for it (a cancelled run, a finalizer), which may be on an event loop, or in
    one whose executor is shutting down. At interpreter exit no thread starts: what was to be
    given back lapses instead."""
    with contextlib.suppress(RuntimeError):
        threading.Thread(target=fn, args=args, name=name, daemon=True).start()
