"""The ledger's tables, their migrations, and the constants its statements use."""

from __future__ import annotations

import hashlib

__all__ = ["ADMITTED", "DONE", "LATE", "LEASE_SECONDS", "MIGRATIONS", "NOTIFY_EVENTS",
           "NOTIFY_RECHECK", "RUN_ARGS", "SCHEMA", "SCHEMA_DIGEST", "SERVER_AGENT",
           "SERVER_THREAD", "WAIT_SECONDS"]

LEASE_SECONDS = 30.0
"""A lease outlives a crashed holder by at most this long; live holders renew it."""
SERVER_THREAD = "server-thread:"
"""The ready-queue key of a LangGraph server's run (no graphkit run id): this + its thread."""
SERVER_AGENT = "langgraph-server:"
"""The ready-queue agent of such a run: never a worker's agent name."""
WAIT_SECONDS = 120.0
"""How long a process waits for another one to finish advancing the same thread."""
DONE = "done"
"""`graphkit_calls.executed` of a call that has its result (ran, or answered without running)."""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS graphkit_calls (
        call_key TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        agent_path TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        args_digest TEXT NOT NULL,
        approval_id TEXT,
        executed TEXT,
        outcome TEXT,
        once_results TEXT,
        claim_expires DOUBLE PRECISION,
        created_at DOUBLE PRECISION NOT NULL
    ){keyed}""",
    # The gate's plan of each model turn (per thread, agent and AI message): the one record
    # of what the gate decided about the turn's calls. Only gates write it; the graph state
    # keeps a pointer to the turn, which nothing reads as true.
    """CREATE TABLE IF NOT EXISTS graphkit_turns (
        thread_id TEXT NOT NULL,
        agent_path TEXT NOT NULL,
        turn_key TEXT NOT NULL,
        plan TEXT NOT NULL,
        PRIMARY KEY (thread_id, agent_path, turn_key)
    ){keyed}""",
    """CREATE TABLE IF NOT EXISTS graphkit_approvals (
        approval_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        call_key TEXT,
        agent_path TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        args_digest TEXT NOT NULL,
        expires_at DOUBLE PRECISION,
        status TEXT NOT NULL,
        decision TEXT,
        decided_at DOUBLE PRECISION,
        run_id TEXT,
        allowed TEXT
    ){keyed}""",
    "CREATE INDEX IF NOT EXISTS graphkit_approvals_thread ON graphkit_approvals (thread_id)",
    # What an approval gate verified and let run: only these approvals admit a call to the
    # tools node (a decision claimed through another door waits for the gate's check).
    """CREATE TABLE IF NOT EXISTS graphkit_cleared (
        approval_id TEXT PRIMARY KEY,
        run_digest TEXT NOT NULL,
        cleared_at DOUBLE PRECISION NOT NULL
    ){keyed}""",
    "CREATE INDEX IF NOT EXISTS graphkit_approvals_run ON graphkit_approvals (run_id, status)",
    # What a LangGraph server's served agents asked (the server keeps its thread's state): the
    # only approvals the inbox mounted in a server may withdraw as of a thread deleted there.
    """CREATE TABLE IF NOT EXISTS graphkit_server_approvals (
        approval_id TEXT PRIMARY KEY
    ){keyed}""",
    """CREATE TABLE IF NOT EXISTS graphkit_ready (
        run_id TEXT PRIMARY KEY,
        agent TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        ready_at DOUBLE PRECISION NOT NULL,
        claimed_by TEXT,
        claimed_until DOUBLE PRECISION,
        attempts INTEGER NOT NULL DEFAULT 0
    )""",
    # User messages queued for after a turn's answers: beside the plan's copy, which lives in
    # client-writable state, so that no client write can drop one.
    """CREATE TABLE IF NOT EXISTS graphkit_queue (
        seq {serial} PRIMARY KEY,
        thread_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        ai_message_id TEXT NOT NULL,
        message_id TEXT NOT NULL,
        message TEXT NOT NULL,
        UNIQUE (thread_id, agent, message_id)
    )""",
    """CREATE TABLE IF NOT EXISTS graphkit_ended_sessions (
        nonce TEXT PRIMARY KEY,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS graphkit_audit (
        seq {serial} PRIMARY KEY,
        thread_id TEXT NOT NULL,
        approval_id TEXT,
        dedupe TEXT UNIQUE,
        entry TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS graphkit_audit_thread ON graphkit_audit (thread_id)",
    "CREATE INDEX IF NOT EXISTS graphkit_audit_approval ON graphkit_audit (approval_id)",
    """CREATE TABLE IF NOT EXISTS graphkit_grants (
        grant_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        agent_path TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        grantor TEXT,
        approval_id TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        expires_at DOUBLE PRECISION,
        revoked TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS graphkit_grants_thread ON graphkit_grants (thread_id)",
    """CREATE TABLE IF NOT EXISTS graphkit_leases (
        thread_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    ){keyed}""",
    # Which thread (and agent) a run id names: written with the run's first lease.
    """CREATE TABLE IF NOT EXISTS graphkit_runs (
        run_id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        agent TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    ){keyed}""",
    # Notifications: `notify` turns the outbox on; `notify.cursor.<target>`, per webhook.
    """CREATE TABLE IF NOT EXISTS graphkit_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS graphkit_outbox (
        event_id TEXT PRIMARY KEY,
        type TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        approval_id TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        payload TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS graphkit_outbox_created ON graphkit_outbox (created_at)",
    """CREATE TABLE IF NOT EXISTS graphkit_deliveries (
        event_id TEXT NOT NULL,
        target TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_at DOUBLE PRECISION,
        delivered_at DOUBLE PRECISION,
        last_error TEXT,
        claimed_by TEXT,
        PRIMARY KEY (event_id, target)
    )""",
    "CREATE INDEX IF NOT EXISTS graphkit_deliveries_due ON graphkit_deliveries (target, next_at)",
    # Large arguments, stored once (`_values`): records hold a reference to them.
    """CREATE TABLE IF NOT EXISTS graphkit_values (
        digest TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ){keyed}""",
    # Each agent's tool schemas, for an inbox that checks an edit without loading the agent.
    """CREATE TABLE IF NOT EXISTS graphkit_tools (
        agent_path TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        tool_schema TEXT NOT NULL,
        PRIMARY KEY (agent_path, tool_name)
    ){keyed}""",
)


ADMITTED = (
    "thread_id = ? AND agent_path = ? AND tool_name = ? AND (approval_id IS NULL OR EXISTS "
    "(SELECT 1 FROM graphkit_approvals a JOIN graphkit_cleared cl ON cl.approval_id = "
    "a.approval_id WHERE a.approval_id = graphkit_calls.approval_id AND a.status = 'approved'))")
"""A `graphkit_calls` row planned for this thread, agent and tool that may run: it needs no
approval (it runs as planned), or a gate verified its approval (it runs as cleared).
Parameters: thread id, agent path, tool name."""
RUN_ARGS = (
    "args, args_digest, (SELECT cl.run_args FROM graphkit_cleared cl WHERE cl.approval_id = "
    "graphkit_calls.approval_id), (SELECT cl.run_digest FROM graphkit_cleared cl WHERE "
    "cl.approval_id = graphkit_calls.approval_id)")
"""A call's planned arguments and digest, and those its approval cleared."""

MIGRATIONS = (("graphkit_approvals", "allowed", "TEXT"),
               ("graphkit_calls", "suspended_with", "TEXT"),
               ("graphkit_approvals", "record", "TEXT"),
               ("graphkit_calls", "turn_key", "TEXT"),
               # the conversation a call was planned in: its approval's grant holds there
               ("graphkit_calls", "conversation", "TEXT"),
               # what a paused run waits on: the run's id ('' for a server's run), else NULL
               ("graphkit_approvals", "waiting", "TEXT"),
               ("graphkit_approvals", "call_index", "INTEGER"),
               ("graphkit_approvals", "scope", "TEXT"),
               # the arguments a call runs with: as planned, and as a gate cleared them
               ("graphkit_calls", "args", "TEXT"),
               ("graphkit_cleared", "run_args", "TEXT"),
               # the model's id of the call: a task names it, and only it takes the result
               ("graphkit_calls", "tool_call_id", "TEXT"),
               # the checkpoint whose step appended a queued message to the conversation
               ("graphkit_queue", "delivered_at", "TEXT"),
               # a LangGraph server's run: the reviewer the mounted inbox continues it as (its
               # sign-in vouched for them; NULL: another door made it ready), the approval
               # whose decision they took, and why its last attempt did not start
               ("graphkit_ready", "continue_as", "TEXT"),
               ("graphkit_ready", "continue_for", "TEXT"),
               ("graphkit_ready", "held_back", "TEXT"),
               # the options of a run a new message started, kept until its graph has them
               # (`take_message`): a worker that takes the run over goes on with them
               ("graphkit_runs", "options", "TEXT"),
               # "api": the Agent API's own message, which may answer a suspended tool as
               # the process, once (`take_vouched`)
               ("graphkit_queue", "vouched", "TEXT"))
"""Columns added after a table was first made: added to an existing database on open."""
LATE = ("CREATE INDEX IF NOT EXISTS graphkit_approvals_waiting ON graphkit_approvals "
        "(waiting) WHERE waiting IS NOT NULL",
        # a turn's calls, read with its plan (`turn_and_queue`)
        "CREATE INDEX IF NOT EXISTS graphkit_calls_turn ON graphkit_calls (thread_id, turn_key)",
        # a thread's runs in the order they started (`later_run`)
        "CREATE INDEX IF NOT EXISTS graphkit_runs_thread ON graphkit_runs (thread_id, created_at)",
        # where a model turn was planned, in any thread (`planned_where`: a copied thread)
        "CREATE INDEX IF NOT EXISTS graphkit_turns_key ON graphkit_turns (turn_key)")
"""Statements on migrated columns: run after `MIGRATIONS`."""
SCHEMA_DIGEST = hashlib.sha256(repr((SCHEMA, MIGRATIONS, LATE)).encode()).hexdigest()[:32]
"""What `graphkit_meta`'s `schema` row says once this schema was made in a PostgreSQL
database: a ledger that reads it there runs none of its statements (`Ledger`)."""

NOTIFY_RECHECK = 5.0
"""Seconds a ledger trusts its cached `notify` row before it reads it again."""
NOTIFY_EVENTS = {
    "requested": "approval.requested",
    **dict.fromkeys(("approved", "edited", "rejected", "responded", "auto_approved", "resumed",
                     "cancelled", "superseded"), "approval.decided"),
    "expired": "approval.expired",
}
"""The audit events that are notified, and the type of their notification."""
