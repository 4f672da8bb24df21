"""Many paused threads resumed by 4 worker processes pulling from the inbox.

The main process pauses N runs (one approval each), starts 4 workers, then approves every
approval through `Inbox.approve`, noting when. Workers poll `inbox.ready()` and resume the runs
that hash to them; the tool notes when it runs. Reported: round trips per second, and the
latency from `inbox.approve` to the tool running.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from graphkit import Agent, Inbox, ToolContext, create_tool
from graphkit.testing import ScriptedChatModel

WORKERS = 4
ROOT = Path(__file__).resolve().parent.parent


def agent(url: str, effects: str) -> Agent:
    conn = sqlite3.connect(effects, timeout=60, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS ran (tool_call_id TEXT PRIMARY KEY, at REAL)")

    @create_tool(needs_approval=True)
    def transfer(amount: int, ctx: ToolContext) -> str:
        """Move money."""
        conn.execute("INSERT INTO ran VALUES (?, ?) ON CONFLICT DO NOTHING",
                     (ctx.tool_call_id, time.time()))
        return "moved"

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("done")
        return AIMessage("", tool_calls=[{"name": "transfer", "args": {"amount": 1},
                                          "id": f"call-{len(messages)}-{time.time_ns()}"}])

    return Agent(name="bank", model=ScriptedChatModel(reply), tools=[transfer], checkpointer=url)


def worker(url: str, effects: str, index: int, total: int) -> None:
    bot = agent(url, effects)
    inbox = Inbox(url)
    conn = sqlite3.connect(effects, timeout=60)
    while conn.execute("SELECT COUNT(*) FROM ran").fetchone()[0] < total:
        mine = [r for r in inbox.ready()
                if int(hashlib.md5(r.encode()).hexdigest(), 16) % WORKERS == index]
        for run_id in mine:
            bot.resume(run_id=run_id)
        if not mine:
            time.sleep(0.02)


def run(url: str, directory: Path, threads: int) -> dict[str, Any]:
    effects = str(directory / f"effects-{time.time_ns()}.db")
    bot = agent(url, effects)
    started = time.perf_counter()
    for _ in range(threads):
        assert bot.generate("move 1").finish_reason == "suspended"
    pause_s = time.perf_counter() - started
    inbox = Inbox(url)
    pending = inbox.pending()
    assert len(pending) == threads
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.many_threads", url, effects,
                               str(i), str(threads)], cwd=ROOT) for i in range(WORKERS)]
    time.sleep(2.0)  # let the workers import and start polling
    approved_at: dict[str, float] = {}
    first = time.time()
    for item in pending:
        inbox.approve(item.id, decided_by="bench")
        approved_at[item.tool_call_id] = time.time()
    for proc in procs:
        proc.wait(timeout=1800)
    conn = sqlite3.connect(effects)
    ran = dict(conn.execute("SELECT tool_call_id, at FROM ran").fetchall())
    assert set(ran) == set(approved_at), "every approved call ran exactly once"
    latencies = sorted((ran[k] - approved_at[k]) * 1000 for k in ran)
    span = max(ran.values()) - first
    return {
        "threads": threads,
        "workers": WORKERS,
        "pause_s": pause_s,
        "throughput_per_s": threads / span,
        "latency_median_ms": statistics.median(latencies),
        "latency_p90_ms": latencies[int(0.9 * (len(latencies) - 1))],
    }


def many_threads(directory: Path, *, quick: bool = False) -> list[dict[str, Any]]:
    from tests.postgres_server import PostgresServer

    threads = 100 if quick else 1000
    rows = [{"storage": "sqlite", **run(f"sqlite:///{directory / 'many.db'}", directory,
                                         threads)}]
    server = PostgresServer()
    server.start()
    try:
        url = server.create_database("many_threads")
        rows.append({"storage": "postgresql", **run(url, directory, threads)})
    finally:
        server.stop()
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 5:
        worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(many_threads(Path(tmp), quick="--quick" in sys.argv), indent=2))
