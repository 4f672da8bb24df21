"""Bounds on JSON-like values that come from models, reviewers and clients.

Tool arguments, edited arguments, resume data and suspension payloads are written to
checkpoints and the ledger, rendered on review cards and hashed into digests. A value that is
too deep, too large, cyclic or not valid Unicode fails somewhere in that chain
(`copy.deepcopy`, the checkpoint serialiser, a JSON encoder) with an error that says nothing
useful, possibly after part of a decision was already recorded. These checks run first, refuse
such a value with a clear message, and never raise `RecursionError` themselves: they walk the
value with an explicit stack and stop as soon as a bound is crossed, without serialising it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_TEXT", "check_text", "check_value", "human_size",
           "storable"]

MAX_DEPTH = 32
"""Nesting of objects and arrays (`{"a": 1}` is 1 level). Real tool arguments rarely go past
5. The first thing that breaks on deeper values is LangGraph's checkpoint serialiser and the
SQLite store's encoder (msgpack/orjson stop near 255 levels, counting the wrappers around the
arguments), then `copy.deepcopy` (about 330 to 500 levels, depending on the stack already in
use); 32 stays far below all of them, whatever wraps the value."""

MAX_BYTES = int(os.environ.get("GRAPHKIT_MAX_VALUE_BYTES") or 2 * 1024 * 1024)
"""Approximate size of the value as compact JSON (UTF-8, escapes not counted): 2 MiB, or
`$GRAPHKIT_MAX_VALUE_BYTES`. Enough for a tool that writes a file of a few hundred KB or a
MiB (a model's whole output fits many times over); a paused call's arguments are stored in
its message and once in the ledger (`graphkit._ledger._values`), which this bound keeps
finite. It also bounds the work of a check: every item costs at least two
bytes, so no separate limit on the number of keys or items is needed."""

MAX_TEXT = 10_000
"""Characters of a free-text field a reviewer or client sends (`comment`, `decided_by`,
a reject message): enough for a paragraph of reasoning, small enough for a review card and an
audit line."""


def human_size(size: int) -> str:
    """`2 MiB`, `256 KiB`, `1000 bytes`."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} bytes"


def check_text(
    value: str | None, *, what: str, error: type[Exception], limit: int = MAX_TEXT
) -> None:
    """Refuse text that is not a string, longer than `limit` characters, not valid Unicode, or
    holding a NUL.

    `None` is accepted (the field was not given).
    """
    if value is None:
        return
    if not isinstance(value, str):
        raise error(f"{what}: must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise error(f"{what}: {len(value)} characters; at most {limit} are accepted")
    if "\x00" in value:  # (other controls are kept, and shown escaped: `graphkit._text`)
        raise error(f"{what}: holds a NUL character, which PostgreSQL's text cannot store")
    _utf8_size(value, what=what, error=error, budget=limit)


def check_value(value: object, *, what: str, error: type[Exception]) -> None:
    """Refuse a JSON-like value that is nested too deeply, too large, or contains itself.

    Dicts, lists and tuples are descended into; str, int, float, bool and None are measured;
    any other object is measured by `len(str(value))` and not descended into (callers dump
    pydantic models first). Raises `error(message)`; `what` names the value in the message,
    e.g. "edited arguments for tool 'pay'".
    """
    size = 0
    # One iterator over the children still to visit per open container, outermost first; the
    # ids of the open containers detect a value that contains itself.
    stack: list[Iterator[object]] = []
    open_ids: list[int] = []
    node: object = value
    while True:
        if isinstance(node, (dict, list, tuple)):
            if id(node) in open_ids:
                raise error(f"{what}: contains itself (a reference cycle), which is not JSON")
            if len(stack) >= MAX_DEPTH:
                raise error(
                    f"{what}: nested deeper than {MAX_DEPTH} levels of objects and arrays; "
                    "send a flatter value"
                )
            count = len(node)
            size += 2 + max(count - 1, 0)  # brackets and commas
            if isinstance(node, dict):
                size += count  # colons
                for key in node:
                    if size > MAX_BYTES:
                        break
                    if not isinstance(key, str):
                        raise error(f"{what}: object keys must be text, got {type(key).__name__}")
                    size += _scalar_size(key, what=what, error=error)
                stack.append(iter(node.values()))
            else:
                stack.append(iter(node))
            open_ids.append(id(node))
        else:
            size += _scalar_size(node, what=what, error=error)
        if size > MAX_BYTES:
            raise error(f"{what}: larger than {human_size(MAX_BYTES)} as JSON; send less (the "
                        "bound is GRAPHKIT_MAX_VALUE_BYTES)")
        # The next node: the first unvisited child of the innermost open container.
        while stack:
            child = next(stack[-1], _DONE)
            if child is not _DONE:
                node = child
                break
            stack.pop()
            open_ids.pop()
        else:
            return


_DONE = object()


def _scalar_size(value: object, *, what: str, error: type[Exception]) -> int:
    """Approximate JSON size of a leaf (or a dict key), without building the JSON."""
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, str):
        return _utf8_size(value, what=what, error=error) + 2
    if isinstance(value, int):
        if not -(2**63) <= value < 2**64:  # what a checkpoint (msgpack) holds
            raise error(f"{what}: an integer beyond 64 bits cannot be stored in a checkpoint; "
                        "send it as text")
        return len(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):  # (JSON has none: a store writes null, or refuses it)
            raise error(f"{what}: {value!r} is not a number JSON can hold; send a finite "
                        "number")
        return len(repr(value))
    try:
        text = str(value)
    except Exception as exc:  # a broken or deeply nested object: it cannot be shown either
        raise error(f"{what}: a {type(value).__name__} value cannot be shown as text") from exc
    return len(text)


def _utf8_size(text: str, *, what: str, error: type[Exception], budget: int = MAX_BYTES) -> int:
    """UTF-8 size of `text`; refuses lone surrogates, which the stores cannot encode (the
    SQLite store's orjson raises, the checkpoint's msgpack silently writes `?`)."""
    if len(text) > budget or text.isascii():
        return len(text)  # over the budget anyway, or one byte a character
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise error(f"{what}: text is not valid Unicode (a lone surrogate)") from exc


_SERDE = JsonPlusSerializer()


def storable(value: Any, what: str, error: type[Exception]) -> None:
    """Refuse a value the checkpointer could not store (e.g. an integer beyond 64 bits, at
    any depth, in a set or a model too) before it is written anywhere: LangGraph would fail
    on it mid-run."""
    try:
        _SERDE.dumps_typed(value)
    except (TypeError, ValueError, OverflowError) as exc:
        msg = f"{what} cannot be stored in a checkpoint: {exc}"
        raise error(msg) from exc
