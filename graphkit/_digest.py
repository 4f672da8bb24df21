"""The digest of tool arguments that binds a decision to what was reviewed (a leaf module:
every other one may use it)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["args_digest", "json_digest"]


def json_digest(value: Any) -> str:
    """The sha256 (hex) of a JSON value in canonical key order: what a turn's calls are, what a
    message said."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def args_digest(args: Mapping[str, Any]) -> str:
    """A stable digest of tool arguments, so a decision can be bound to what was reviewed."""
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
