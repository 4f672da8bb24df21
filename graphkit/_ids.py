"""The ids a caller gives to name what it decides or reads (an approval, a run, a grant).

Where an id is given, it names exactly one thing or nothing: a lookup filtered by it never
widens to "any". `Inbox.approve(None)` read the missing id as no filter at all and decided
whichever approval of any agent or thread waited first, and a payment nobody reviewed ran
(helper-104); `resolve_tool_approval(id=None)` took the run's single pending approval, then
said it found none; `approve_tool_call_generate(run_id=None)` looked for checkpoints whose run
is None, which every thread a graph was driven on directly matched, and paid on a thread
nobody named (helper-105). Every door checks the ids it is given here, before it reads or
writes.
"""

from __future__ import annotations

from graphkit.errors import GraphkitError

__all__ = ["given_id", "stored"]


def given_id(value: object, what: str, error: type[GraphkitError]) -> str:
    """`value` as the id of `what` it must be: a non-empty string, else `error` (a lookup
    error of the kind the door raises for an id it cannot find), nothing read or changed.
    Text no database stores (a NUL, which PostgreSQL refuses; a lone surrogate, which SQLite
    refuses) names nothing: it raised the driver's error, or a web inbox's 500 (helper-109)."""
    if isinstance(value, str) and value:
        if stored(value):
            return value
        msg = f"no {what} {value!r}: an id holds no NUL and encodes as UTF-8"
        raise error(msg)
    msg = f"{what} must be a non-empty string naming one {what.split()[0]}, got {value!r}"
    raise error(msg)


def stored(value: str) -> bool:
    """Whether every database stores `value` as it is."""
    if "\x00" in value:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
