"""Blocking storage work in an async run: in a worker thread, unless the storage lives in
this process's memory, where the thread hop would cost more than the work and nothing can
block the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["offload"]

T = TypeVar("T")


async def offload(inline: bool, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)`, off the event loop unless `inline`."""
    if inline:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)
