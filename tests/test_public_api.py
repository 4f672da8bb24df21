"""The public surface is curated: `graphkit.__all__` is pinned, internals are private."""

from __future__ import annotations

from pathlib import Path

import graphkit

PUBLIC = [
    "Agent", "AgentStream", "AmbiguousApprovalError", "ApprovalAlreadyResolvedError",
    "ApprovalNotFoundError", "ApprovalsPendingError", "ApproverNotAllowedError",
    "AsyncAgentStream", "GenerateResult", "GraphkitError", "GraphkitTool", "Inbox",
    "InvalidApprovedArgsError", "PendingApproval", "ResumeDataError", "RunState",
    "SnapshotNotFoundError", "StreamChunk", "SuspendPayloadError", "ToolContext", "Webhook",
    "create_tool", "verify_signature",
]


def test_all_is_pinned_and_importable() -> None:
    assert sorted(graphkit.__all__) == sorted(PUBLIC)
    for name in graphkit.__all__:
        assert getattr(graphkit, name) is not None


def test_internal_modules_are_private() -> None:
    modules = {p.stem for p in Path(graphkit.__file__).parent.glob("*.py")}
    public = {m for m in modules if not m.startswith("_")}
    assert public == {"agent", "cli", "errors", "examples", "inbox", "server_auth", "testing",
                      "tools", "types"}
