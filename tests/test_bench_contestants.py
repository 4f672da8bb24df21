"""The benchmark's contestants do the work they are timed for: each round trip runs to its
final answer, the floor's processes resume every paused run once. (No timing here: speed is
measured by `make bench`, never in a unit test.)"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from benchmarks import contestants as c
from benchmarks import many_threads


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_every_round_trip_reaches_its_answer(kind: c.Storage, tmp_path: Path) -> None:
    for run in (c.graphkit_round(c.graphkit_agent(kind, tmp_path)),
                c.langchain_round(c.langchain_agent(kind, tmp_path)),
                c.minimal_round(c.minimal_graph(kind, tmp_path)),
                c.graphkit_round(c.graphkit_supervisor(kind, tmp_path)),
                c.langchain_round(c.langchain_supervisor(kind, tmp_path)),
                c.minimal_round(c.minimal_supervisor(kind, tmp_path))):
        run()  # each asserts its own final answer


def test_the_async_round_trips_reach_their_answer(tmp_path: Path) -> None:
    async def main() -> None:
        for run in (c.graphkit_async_round(c.graphkit_agent("memory", tmp_path)),
                    c.langchain_async_round(c.langchain_agent("memory", tmp_path)),
                    c.minimal_async_round(c.minimal_graph("memory", tmp_path))):
            await run()

    asyncio.run(main())


def test_the_long_thread_rounds_all_run_on_one_thread_each(tmp_path: Path) -> None:
    """`bench.long_thread`: every round of a contestant reaches its answer on that one thread,
    whose conversation holds them all."""
    from langchain_core.messages import HumanMessage

    from benchmarks.bench import _async_sqlite_samples

    samples = _async_sqlite_samples(tmp_path, 3, thread_id="one-thread")
    assert sorted(samples) == ["graphkit", "langchain", "minimal"]
    assert all(len(v) == 3 for v in samples.values())
    agent = c.graphkit_agent("sqlite", tmp_path)
    state = agent.graph.get_state({"configurable": {"thread_id": "one-thread"}})
    assert sum(isinstance(m, HumanMessage) for m in state.values["messages"]) == 3


def test_the_minimal_parallel_graph_runs_every_call_at_once(tmp_path: Path) -> None:
    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("done")
        return AIMessage("", tool_calls=[{"name": "nap", "args": {"i": i}, "id": f"n{i}"}
                                         for i in range(4)])

    # in parallel: no call can pass the barrier until all four are running at once; run one
    # after another, the first would wait out the timeout and break it
    barrier = threading.Barrier(4, timeout=10)

    def nap(i: int) -> str:
        barrier.wait()
        return str(i)

    graph = c.minimal_parallel(reply, nap, c.saver("sqlite", tmp_path, "parallel"))
    out = graph.invoke({"messages": [("user", "go")]}, {"configurable": {"thread_id": "t"}})
    assert [m.content for m in out["messages"] if isinstance(m, ToolMessage)] == \
        ["0", "1", "2", "3"]
    assert out["messages"][-1].text == "done"


def test_the_floor_resumes_every_paused_run_once(postgres_url: str, tmp_path: Path) -> None:
    row = many_threads.floor(postgres_url, tmp_path, threads=8)
    assert row["threads"] == 8 and row["processes"] == 4
    assert row["throughput_per_s"] > 0


def test_workers_stopped_while_every_run_is_decided_resume_each_once(postgres_url: str,
                                                                    tmp_path: Path) -> None:
    # (run asserts that each approved call ran once)
    row = many_threads.run(postgres_url, tmp_path, 6, rate=None, decided=True)
    assert row["decisions"] == "decided" and row["throughput_per_s"] > 0
    assert row["latency_median_ms"] >= 0  # counted from when the workers were let go


def test_the_resume_cost_counts_what_each_resume_sends(postgres_url: str, tmp_path: Path) -> None:
    from benchmarks import resume_cost

    for row in (resume_cost.graphkit(postgres_url, tmp_path, runs=2),  # (each ran once)
                resume_cost.minimal(postgres_url, tmp_path, runs=2)):
        assert row["statements_per_resume"] > 0 and row["cpu_ms"] > 0
        assert any("checkpoints" in statement for statement in row["statements"])
