"""An agent's approval settings, compiled into its graph.

They live in the graph, not in the request, so `agent.generate`, a direct `graph.invoke`, the
LangGraph server and a subagent inside a supervisor all obey the same rules. A request may only
tighten them (`require_tool_approval=True`), never loosen them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphkit.types import PendingApproval

__all__ = ["DEFAULT_GRANT_TTL", "MAX_TTL", "Approvers", "GateSettings", "checked_ttl"]

Approvers = Callable[[str | None, "PendingApproval"], bool]
"""Who may decide: `(decided_by, pending) -> bool`."""
DEFAULT_GRANT_TTL = timedelta(hours=8)
"""How long a `remember="thread"` grant approves later calls, unless the agent says."""
MAX_TTL = timedelta(days=36_500)
"""The longest lifetime an approval or a grant may be given (a hundred years)."""


def checked_ttl(value: timedelta | None, what: str) -> timedelta | None:
    """A lifetime as given, or a typed error now: an `int`, or `timedelta.max` (past the
    calendar's end), was taken as it was given and failed the first run to ask (helper-113)."""
    if value is not None and not (isinstance(value, timedelta) and value <= MAX_TTL):
        from graphkit.errors import GraphkitError

        msg = (f"{what} must be a datetime.timedelta of at most {MAX_TTL.days} days, or None; "
               f"got {value!r}")
        raise GraphkitError(msg)
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class GateSettings:
    require_tool_approval: bool = False
    """Pause every tool call (a tool's own `needs_approval` adds to this, never removes)."""
    auto_resume_suspended_tools: bool = False
    approvers: Approvers | None = None
    """Who may decide: `(decided_by, pending) -> bool`, called with the arguments that run."""
    approval_ttl: timedelta | None = None
    """Undecided this long means declined as expired (a tool's own `approval_ttl` wins)."""
    grant_ttl: timedelta | None = DEFAULT_GRANT_TTL
    """How long a `remember="thread"` grant lasts."""
    allowed_decisions: tuple[str, ...] | None = None
    """The decision types a reviewer may take on a tool that does not say (None: approve,
    edit, reject)."""

    def __post_init__(self) -> None:
        checked_ttl(self.approval_ttl, "approval_ttl")
        checked_ttl(self.grant_ttl, "grant_ttl")
