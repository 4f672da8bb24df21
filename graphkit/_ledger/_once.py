"""`ctx.once` results as the ledger keeps them: in LangGraph's own serializer, the one its
checkpoints keep a graph's values in, so a result comes back as a state value would (a set, a
datetime, a `Decimal`, bytes, a dict with int keys, a pydantic model), not as JSON's text of
it. The tool gets the kept value on its first run too: every run of it reads the same thing.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from graphkit._ledger._sql import dumps, loads

__all__ = ["once_text", "once_values"]

logger = logging.getLogger("graphkit")

_SERDE = JsonPlusSerializer()
FORMAT = "$graphkit_once"
"""The first item of a row of typed results, a list (a row from before is an object of plain
JSON values, whatever its keys)."""


def _typed(key: str, value: Any) -> list[str]:
    try:
        kind, blob = _SERDE.dumps_typed(value)
    except Exception:  # (a type LangGraph cannot keep either: its text, as JSON would)
        logger.warning("ctx.once(%r, ...): its result, a %s, cannot be kept as it is; its text "
                       "is kept (and returned) instead", key, type(value).__name__)
        return ["json", dumps(value)]
    return [kind, base64.b64encode(blob).decode("ascii")]


def _value(typed: Any) -> Any:
    kind, text = typed
    if kind == "json":
        return loads(text)
    return _SERDE.loads_typed((kind, base64.b64decode(text)))


def once_text(results: Mapping[str, Any]) -> str:
    """The row's text for these results."""
    return dumps([FORMAT, {key: _typed(key, value) for key, value in results.items()}])


def once_values(text: Any) -> dict[str, Any]:
    """The results a row's text holds (None or empty: none)."""
    found = loads(text) or {}
    if isinstance(found, list):
        return {key: _value(typed) for key, typed in found[1].items()}
    return dict(found)

