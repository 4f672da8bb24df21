"""Blocking storage work in an async run always goes to a worker thread.

The ledger, the stores and the checkpointers graphkit opens are synchronous (SQLite's and
psycopg's sync drivers, an in-memory SQLite for memory storage), and every call may wait on a
lock another thread holds. On an event loop that is a blocking call: the LangGraph server's
detector (blockbuster) refuses it, and it stalls every other run the loop serves. So nothing
of it runs on the loop, whatever the storage.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["offload"]

T = TypeVar("T")


async def offload(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread (the context, and so the node's config, goes along)."""
    return await asyncio.to_thread(fn, *args)
