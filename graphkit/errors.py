"""Errors raised by graphkit.

Every error a user can cause derives from `GraphkitError`. A refused decision changes
nothing: the approval stays pending and can still be decided.

```
GraphkitError
├── SnapshotNotFoundError          (LookupError)   unknown run, or storage that cannot see it
├── ApprovalNotFoundError          (LookupError)   no approval with that id / tool_call_id
├── AmbiguousApprovalError         (LookupError)   several pending, none named
├── ApprovalAlreadyResolvedError                   decided before
├── ApprovalsPendingError                          resume() while some are undecided
├── RunSupersededError                             resume() of a run its thread went on from
├── InvalidApprovedArgsError       (ValueError)    edited args fail the tool's schema
│   └── ArgsDigestMismatchError                    the reviewed args_digest is not the one waiting
├── ResumeDataError                (ValueError)    resume data fails the tool's resume_schema
├── SuspendPayloadError            (ValueError)    suspend payload fails the tool's suspend_schema
├── ApproverNotAllowedError        (PermissionError) the approvers policy refused the decider
├── DecisionNotAllowedError        (ValueError)    the tool does not allow that decision type
├── InterruptNotWaitingError       (ValueError)    a resume answers a pause that no longer waits
└── WithheldToolError              (RuntimeError)  a tool's error still showed its call's secrets
```

LangGraph's control-flow signals (`GraphInterrupt`) are never wrapped in these: a pause is
not a failure.
"""

from __future__ import annotations

from langgraph.errors import UnknownInterruptError

__all__ = [
    "AmbiguousApprovalError",
    "ApprovalAlreadyResolvedError",
    "ApprovalNotFoundError",
    "ApprovalsPendingError",
    "ApproverNotAllowedError",
    "ArgsDigestMismatchError",
    "DecisionNotAllowedError",
    "GraphkitError",
    "InterruptNotWaitingError",
    "InvalidApprovedArgsError",
    "ResumeDataError",
    "RunSupersededError",
    "SnapshotNotFoundError",
    "SubgraphCheckpointError",
    "SuspendPayloadError",
    "WithheldToolError",
]

SNAPSHOT_NOT_FOUND = (
    "snapshot not found for run_id {run_id!r}: no paused or finished run with that id is in "
    "this agent's storage ({storage}). Runs live in the checkpointer that started them; to decide "
    "or resume from another process, give every process the same durable storage, e.g. "
    "Agent(..., checkpointer='sqlite:///graphkit.db') or 'postgresql://...'."
)


class GraphkitError(Exception):
    """Base class of every error graphkit raises on bad input."""


class SnapshotNotFoundError(GraphkitError, LookupError):
    """The run is unknown to this agent's storage (or there is no storage to look in)."""


class ApprovalNotFoundError(GraphkitError, LookupError):
    """No pending approval or suspension matches the id or tool_call_id given."""


class AmbiguousApprovalError(GraphkitError, LookupError):
    """Several approvals are pending and the call did not say which one it means."""

    def __init__(self, message: str, *, pending_ids: list[str]) -> None:
        super().__init__(message)
        self.pending_ids = pending_ids
        """The tool_call_ids (or approval ids) that are pending, any of which may be named."""


class ApprovalAlreadyResolvedError(GraphkitError):
    """The approval was decided before; a decision is final."""


class ApprovalsPendingError(GraphkitError):
    """`resume()` was asked to continue while some approvals are still undecided."""


class RunSupersededError(GraphkitError):
    """`resume()` named a run whose thread went on in a later run (a new message started it),
    which now rests on its own calls or has ended: nothing of this run is left to continue,
    and continuing the thread under its id would run the later run's calls as this one's."""

    def __init__(self, message: str, *, later_run_id: str) -> None:
        super().__init__(message)
        self.later_run_id = later_run_id
        """The run the thread went on in: decide and resume that one."""


class InvalidApprovedArgsError(GraphkitError, ValueError):
    """Edited arguments do not validate against the tool's argument schema."""


class ArgsDigestMismatchError(InvalidApprovedArgsError):
    """The decision was made on other arguments than the ones now waiting (the run was
    re-planned): it is refused, and the approval stays pending."""


class ResumeDataError(GraphkitError, ValueError):
    """Resume data does not validate against the suspended tool's `resume_schema`."""


class SuspendPayloadError(GraphkitError, ValueError):
    """A tool called `ctx.suspend()` with a payload its `suspend_schema` rejects."""


class ApproverNotAllowedError(GraphkitError, PermissionError):
    """The agent's `approvers` policy refused this decider for this approval."""


class DecisionNotAllowedError(GraphkitError, ValueError):
    """The decision's type (approve, edit, reject, respond) is not among the tool's
    `allowed_decisions`."""


class InterruptNotWaitingError(GraphkitError, UnknownInterruptError, ValueError):
    """A resume answers, under its interrupt id, a pause the thread does not wait on (the run
    moved on since the client read it, or the id is another thread's). Refused before
    anything runs. Also LangGraph's own `UnknownInterruptError` (its strict resume's), and a
    `ValueError`, whose message the LangGraph server shows its client (it hides those of
    other errors)."""


class SubgraphCheckpointError(GraphkitError, ValueError):
    """A run started on a subagent's own checkpoint (a config whose `checkpoint_ns` names
    one): LangGraph runs the graph's own nodes over it, not the subagent's, under interrupt
    ids other than the thread's. Refused before anything runs: run the thread from its root
    (a subagent's state may still be read, and written, at its namespace)."""


class WithheldToolError(GraphkitError, RuntimeError):
    """Raised in place of a tool's own error that still showed a secret value of the call
    after they were taken out (in a part of it that cannot be set): LangGraph stores a
    node's error in the checkpoint, and hands it to every caller. Its message is the
    outcome recorded for the call."""
