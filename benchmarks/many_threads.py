"""Many paused threads resumed by 4 `graphkit worker` processes as decisions arrive.

The main process pauses N runs (one approval each), starts 4 worker processes (the CLI, one
thread each), then approves every approval through `Inbox.approve`, noting when: all at once
(a burst), or at a steady rate (decisions/s). The tool notes when it runs. Reported: round
trips per second, and the latency from `inbox.approve` to the tool running.

A burst's deciding shares the machine with the workers (each `approve` is a transaction of its
own). The floor's runs are decided beforehand (its `Command` carries the decision), so the
like-for-like row is "decided": the workers are stopped (SIGSTOP) once they listen, every
approval is recorded, and the workers are let go at once (SIGCONT); its rate counts from then.

The floor beside it (PostgreSQL): N paused runs of the minimal hand-written graph on LangGraph's
own `PostgresSaver`, resumed by 4 processes at once, a quarter each, with
`graph.invoke(Command(resume=True))`: the rate LangGraph itself reaches on this machine.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from benchmarks.contestants import EQUAL
from graphkit import Agent, Inbox, ToolContext, create_tool
from graphkit.testing import ScriptedChatModel

WORKERS = 4
CONCURRENCY = 1
"""Threads per worker process: on a 2-core machine, one per process resumed more runs per
second than two (their Python threads share one interpreter lock)."""
STEADY_RATE = 50.0
ROOT = Path(__file__).resolve().parent.parent
EFFECTS_ENV = "GRAPHKIT_BENCH_EFFECTS"


READY_PAUSE = 0.5
"""Seconds given to processes that said they are ready, to open their connections: the
decisions and the floor's clock start after every process of a row is ready, not after a
fixed wait that a slow start outlasts (the first decisions would then wait on imports)."""


def ready(proc: subprocess.Popen[str], line: str) -> None:
    """Wait until `proc` prints a line starting with `line`."""
    assert proc.stdout is not None
    for text in proc.stdout:
        if text.startswith(line):
            return
    raise AssertionError(f"a process ended before it said {line!r}")


def effects_db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=60, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS ran (tool_call_id TEXT PRIMARY KEY, at REAL)")
    return conn


def make(url: str) -> Agent:
    """The benchmark's agent (`graphkit worker --agent benchmarks.many_threads:make`)."""
    conn = effects_db(os.environ[EFFECTS_ENV])

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


def close_storage(storage: Any) -> None:
    """Close a PostgreSQL storage's connection pool now: a pool left to the garbage collector
    joins its threads wherever that happens to run (an event loop, say)."""
    pool = getattr(storage.ledger._sql, "pool", None)
    if hasattr(pool, "close"):
        pool.close()


def run(url: str, directory: Path, threads: int, *, rate: float | None,
        decided: bool = False) -> dict[str, Any]:
    """`decided`: every approval is recorded while the workers are stopped, then they resume
    the runs (no deciding shares the machine with them, as for the floor)."""
    effects = str(directory / f"effects-{time.time_ns()}.db")
    os.environ[EFFECTS_ENV] = effects
    bot = make(url)
    started = time.perf_counter()
    for _ in range(threads):
        assert bot.generate("move 1").finish_reason == "suspended"
    pause_s = time.perf_counter() - started
    inbox = Inbox(url)
    pending = inbox.pending()
    assert len(pending) == threads
    command = [sys.executable, "-m", "graphkit.cli", "worker", "--db", url, "--agent",
               "benchmarks.many_threads:make", "--concurrency", str(CONCURRENCY)]
    procs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
             for _ in range(WORKERS)]
    for proc in procs:  # each says so once it has imported and built its agent
        ready(proc, "worker: resuming ready runs")
    time.sleep(READY_PAUSE)  # (and opened its LISTEN connection)
    if decided:
        for proc in procs:
            proc.send_signal(signal.SIGSTOP)
    approved_at: dict[str, float] = {}
    first = time.time()
    for index, item in enumerate(pending):
        if rate is not None:  # a steady stream of decisions, as reviewers make them
            delay = first + index / rate - time.time()
            if delay > 0:
                time.sleep(delay)
        inbox.approve(item.id, decided_by="bench")
        approved_at[item.tool_call_id] = time.time()
    if decided:
        first = time.time()  # (the rate counts from when the workers may go)
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
    conn = effects_db(effects)
    deadline = time.time() + 1800
    while conn.execute("SELECT COUNT(*) FROM ran").fetchone()[0] < threads:
        assert time.time() < deadline, "the workers did not keep up"
        time.sleep(0.05)
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        proc.wait(timeout=60)
    ran = dict(conn.execute("SELECT tool_call_id, at FROM ran").fetchall())
    assert set(ran) == set(approved_at), "every approved call ran exactly once"
    close_storage(bot._storage)
    close_storage(inbox._storage)
    latencies = sorted((ran[k] - max(approved_at[k], first)) * 1000 for k in ran)
    span = max(ran.values()) - first
    return {
        "threads": threads,
        "workers": WORKERS,
        "worker_threads": CONCURRENCY,
        "decisions": "decided" if decided else "burst" if rate is None else f"{rate:g}/s",
        "pause_s": pause_s,
        "throughput_per_s": threads / span,
        "latency_median_ms": statistics.median(latencies),
        "latency_p90_ms": latencies[int(0.9 * (len(latencies) - 1))],
    }


def floor_graph(url: str, effects: str) -> Any:
    """The minimal graph on LangGraph's PostgresSaver (one connection, as
    `PostgresSaver.from_conn_string` opens it); its tool notes when it runs."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    from benchmarks.contestants import minimal_graph

    conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)
    saver.setup()
    ran = effects_db(effects)

    def note(tool_call_id: str) -> None:
        ran.execute("INSERT INTO ran VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (tool_call_id, time.time()))

    return minimal_graph("memory", Path(effects).parent, checkpointer=saver, on_call=note)


def _floor_worker(url: str, effects: str, todo: str, index: int) -> None:
    """One of the floor's processes: resume its share of the paused threads, from the moment
    it is given once every floor process is ready."""
    from langgraph.types import Command

    graph = floor_graph(url, effects)
    mine = json.loads(Path(todo).read_text())[index::WORKERS]
    print("floor: ready", flush=True)
    start_at = float(sys.stdin.readline())  # the same moment for every floor process
    time.sleep(max(0.0, start_at - time.time()))
    for thread_id in mine:
        out = graph.invoke(Command(resume=True), {"configurable": {"thread_id": thread_id}},
                           **EQUAL)
        assert out["messages"][-1].text == "Deployed."


def floor(url: str, directory: Path, threads: int) -> dict[str, Any]:
    """Round trips per second of 4 processes resuming the minimal graph's paused runs."""
    effects = str(directory / f"floor-effects-{time.time_ns()}.db")
    graph = floor_graph(url, effects)
    ids = [os.urandom(8).hex() for _ in range(threads)]
    for thread_id in ids:
        out = graph.invoke({"messages": [("user", "ship 1.4.2")]},
                           {"configurable": {"thread_id": thread_id}})
        assert "__interrupt__" in out
    todo = directory / f"floor-{time.time_ns()}.json"
    todo.write_text(json.dumps(ids))
    procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.many_threads", "--floor", url,
                               effects, str(todo), str(i)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
             for i in range(WORKERS)]
    for proc in procs:
        ready(proc, "floor: ready")
    start_at = time.time() + READY_PAUSE  # as the workers are given once ready
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(f"{start_at!r}\n")
        proc.stdin.close()
    for proc in procs:
        assert proc.wait(timeout=1800) == 0, "a floor process failed"
    graph.checkpointer.conn.close()
    ran = dict(effects_db(effects).execute("SELECT tool_call_id, at FROM ran").fetchall())
    assert len(ran) == threads, "every resumed run ran its tool once"
    return {"threads": threads, "processes": WORKERS,
            "throughput_per_s": threads / (max(ran.values()) - start_at)}


def many_threads(directory: Path, *, quick: bool = False) -> list[dict[str, Any]]:
    from tests.postgres_server import PostgresServer

    threads = 100 if quick else 1000
    rows: list[dict[str, Any]] = []
    for rate in (None, STEADY_RATE):
        name = f"many-{'burst' if rate is None else 'steady'}.db"
        rows.append({"storage": "sqlite",
                     **run(f"sqlite:///{directory / name}", directory, threads, rate=rate)})
    server = PostgresServer(durable=True)  # commits synced, as in production
    server.start()
    try:
        # The floor is measured before each row it is set beside and once after the last, and
        # each row is compared with the mean of the floors either side of it: the machine's
        # pace drifts over a bench (a floor measured once moved from 102 to 269 runs/s between
        # runs of this bench on one machine), and the rows cannot share a process with it.
        floors = [floor(server.create_database("many_floor_0"), directory, threads)]
        for name, rate, decided in (("decided", None, True), ("burst", None, False),
                                    ("steady", STEADY_RATE, False)):
            url = server.create_database(f"many_{name}")
            row = run(url, directory, threads, rate=rate, decided=decided)
            if rate is None:  # (at a steady rate the decisions, not the workers, set the pace)
                floors.append(floor(server.create_database(f"many_floor_{len(floors)}"),
                                    directory, threads))
                either_side = [f["throughput_per_s"] for f in floors[-2:]]
                base = statistics.mean(either_side)
                row.update({"minimal_throughput_per_s": base,
                            "minimal_throughput_either_side_per_s": either_side,
                            "graphkit/minimal": row["throughput_per_s"] / base})
            rows.append({"storage": "postgresql", **row})
    finally:
        server.stop()
    return rows


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:2] == ["--floor"]:
        _floor_worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        raise SystemExit(0)
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(many_threads(Path(tmp), quick="--quick" in sys.argv), indent=2))
