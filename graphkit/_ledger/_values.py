"""Large arguments, stored once: a call's arguments of `STOW_BYTES` or more are kept in one
row of `graphkit_values` (by the digest of their JSON), and every ledger record that holds
them (the plan, the approval record, the call, the audit) holds a reference instead.

A 1 MiB file a model writes through a tool is then one row here, not one per record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from graphkit._ledger._sql import Tx, dumps, loads

__all__ = ["STOW_BYTES", "stowed", "unstowed"]

STOW_BYTES = 16 * 1024
"""Arguments whose JSON is at least this long are stored once and referenced."""
REF = "$graphkit_value"
ARG_KEYS = frozenset({"args", "approved_args", "args_before", "args_after", "run_args"})
"""The keys whose values are a call's arguments (always an object, or null)."""
NESTED = frozenset({"calls", "approval", "suspension"})
"""The keys under which a record holds further records (a plan's calls, a call's approval).
Nothing else is walked: a reference is read back only where `stowed` could have written one,
never from inside arguments a model wrote."""


def stowed(tx: Tx, value: Any, *, whole: bool = False) -> str:
    """`value` as JSON, its large arguments stored once (`whole`: `value` is itself a call's
    arguments)."""
    text = dumps(value)
    if len(text) < STOW_BYTES:
        return text
    return dumps(_ref(tx, text) if whole else _walk(value, lambda args: _stow(tx, args)))


def _ref(tx: Tx, text: str) -> list[str]:
    """A reference: a list, which arguments never are (so never one a model wrote)."""
    digest = hashlib.sha256(text.encode()).hexdigest()
    tx.execute("INSERT INTO graphkit_values (digest, value) VALUES (?, ?) "
               "ON CONFLICT (digest) DO NOTHING", (digest, text))
    return [REF, digest]


def _stow(tx: Tx, args: Any) -> Any:
    if not isinstance(args, Mapping):
        return args
    text = dumps(args)
    return _ref(tx, text) if len(text) >= STOW_BYTES else args


def _walk(value: Any, at_args: Callable[[Any], Any]) -> Any:
    if isinstance(value, list):
        return [_walk(item, at_args) for item in value]
    if not isinstance(value, Mapping):
        return value
    return {key: at_args(item) if key in ARG_KEYS else _walk(item, at_args) if key in NESTED
            else item for key, item in value.items()}


def unstowed(query: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]], text: Any, *,
             whole: bool = False) -> Any:
    """The value of JSON `text` written by `stowed`, its references read back."""
    value = loads(text)
    if not isinstance(text, str) or REF not in text:
        return value
    cache: dict[str, str] = {}

    def read(args: Any) -> Any:
        if not (isinstance(args, list) and len(args) == 2 and args[0] == REF):
            return args
        digest = str(args[1])
        if digest not in cache:
            rows = query("SELECT value FROM graphkit_values WHERE digest = ?", (digest,))
            cache[digest] = rows[0][0] if rows else "{}"
        return loads(cache[digest])  # a copy for each place that holds it

    return read(value) if whole else _walk(value, read)
