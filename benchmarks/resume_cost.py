"""What one resume of a decided run costs on PostgreSQL: graphkit's worker against the minimal
graph on LangGraph's own `PostgresSaver`.

    python -m benchmarks.resume_cost [--runs N]

In `many_threads`, 4 worker processes share the machine's cores with the database server, so
their rate follows the CPU each resume costs, in the worker and in the server. This resumes N
decided runs in one process, each way: graphkit's worker, by its own step (claim the ready
run, resume it, mark it done), and the minimal graph's `invoke(Command(resume=True))`. Per
resume it prints the wall time, this process's CPU, the server's CPU (its processes' times in
/proc: Linux), and the statements sent to the server, by kind (each is a round trip, but for
LangGraph's batched writes, which go in one pipeline; a transaction adds two: BEGIN and
COMMIT).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks import many_threads
from benchmarks.contestants import EQUAL

COUNTED_RUNS = 20
"""Runs resumed again with every statement counted (the counting costs CPU of its own)."""


def server_cpu() -> float:
    """CPU seconds the PostgreSQL processes of this machine have used so far."""
    ticks = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")].startswith("postgres"):
            fields = stat[stat.rindex(")") + 2:].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def counting() -> Iterator[collections.Counter[str]]:
    """Count the statements psycopg sends meanwhile, by their first words."""
    import psycopg

    counts: collections.Counter[str] = collections.Counter()
    execute, executemany, transaction = (psycopg.Cursor.execute, psycopg.Cursor.executemany,
                                         psycopg.Connection.transaction)

    def kind(query: Any) -> str:
        return " ".join(str(query).split())[:72]

    def counted(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        counts[kind(query)] += 1
        return execute(self, query, *args, **kwargs)

    def counted_many(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        counts["(batch) " + kind(query)] += 1
        return executemany(self, query, *args, **kwargs)

    def counted_tx(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts["BEGIN ... COMMIT (two round trips)"] += 1
        return transaction(self, *args, **kwargs)

    psycopg.Cursor.execute = counted  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counted_many  # type: ignore[method-assign]
    psycopg.Connection.transaction = counted_tx  # type: ignore[method-assign]
    try:
        yield counts
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]
        psycopg.Connection.transaction = transaction  # type: ignore[method-assign]


def _cost(resume: Callable[[], bool], runs: int) -> dict[str, float]:
    """Per-resume wall, CPU and server CPU of `resume()` (False: nothing left) over `runs`."""
    wall, cpu, server = time.perf_counter(), time.process_time(), server_cpu()
    for _ in range(runs):
        assert resume(), "a run to resume was missing"
    return {"wall_ms": (time.perf_counter() - wall) * 1000 / runs,
            "cpu_ms": (time.process_time() - cpu) * 1000 / runs,
            "server_cpu_ms": (server_cpu() - server) * 1000 / runs}


def _measure(resume: Callable[[], bool], runs: int) -> dict[str, Any]:
    row: dict[str, Any] = _cost(resume, runs)
    with counting() as counts:
        for _ in range(COUNTED_RUNS):
            assert resume(), "a run to resume was missing"
    row["statements"] = {k: n / COUNTED_RUNS for k, n in counts.most_common()}
    row["statements_per_resume"] = sum(row["statements"].values())
    return row


def graphkit(url: str, directory: Path, runs: int) -> dict[str, Any]:
    """graphkit's worker, one run at a time, over `runs` (+ the counted ones) decided runs."""
    from graphkit import Inbox
    from graphkit._owner import new_owner
    from graphkit._worker import Worker

    total = runs + COUNTED_RUNS
    os.environ[many_threads.EFFECTS_ENV] = str(directory / "graphkit-effects.db")
    bot = many_threads.make(url)
    for _ in range(total):
        assert bot.generate("move 1").finish_reason == "suspended"
    inbox = Inbox(bot._storage)
    for item in inbox.pending():
        inbox.approve(item.id, decided_by="bench")
    worker, owner = Worker(bot), new_owner()
    row = _measure(lambda: worker._resume_one(owner), runs)
    assert worker.resumed == total, "a resume failed (the worker logged why)"
    ran = many_threads.effects_db(os.environ[many_threads.EFFECTS_ENV])
    assert ran.execute("SELECT COUNT(*) FROM ran").fetchone()[0] == total, "each ran once"
    many_threads.close_storage(bot._storage)
    return row


def minimal(url: str, directory: Path, runs: int) -> dict[str, Any]:
    """The minimal graph's resumes of `runs` (+ the counted ones) paused runs."""
    from langgraph.types import Command

    graph = many_threads.floor_graph(url, str(directory / "minimal-effects.db"))
    ids = [os.urandom(8).hex() for _ in range(runs + COUNTED_RUNS)]
    for thread_id in ids:
        graph.invoke({"messages": [("user", "ship 1.4.2")]},
                     {"configurable": {"thread_id": thread_id}})
    todo = iter(ids)

    def resume() -> bool:
        thread_id = next(todo, None)
        if thread_id is None:
            return False
        out = graph.invoke(Command(resume=True), {"configurable": {"thread_id": thread_id}},
                           **EQUAL)
        return bool(out["messages"][-1].text == "Deployed.")

    row = _measure(resume, runs)
    graph.checkpointer.conn.close()
    return row


def main() -> None:
    from tests.postgres_server import PostgresServer

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args()
    server = PostgresServer(durable=True)  # commits synced, as in production
    server.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rows = {"graphkit": graphkit(server.create_database("cost_graphkit"), Path(tmp),
                                         args.runs),
                    "minimal": minimal(server.create_database("cost_minimal"), Path(tmp),
                                       args.runs)}
    finally:
        server.stop()
    print(f"one resume of a decided run on PostgreSQL ({args.runs} runs, one process)")
    print(f"{'':<24} {'graphkit':>9} {'minimal':>9}")
    for key in ("wall_ms", "cpu_ms", "server_cpu_ms", "statements_per_resume"):
        print(f"{key:<24} " + " ".join(f"{rows[n][key]:9.2f}" for n in rows))
    for name, row in rows.items():
        print(f"\n{name}: statements per resume")
        for statement, count in row["statements"].items():
            print(f"  {count:5.2f}  {statement}")


if __name__ == "__main__":
    main()
