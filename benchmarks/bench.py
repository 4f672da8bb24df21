"""`make bench`: graphkit against LangChain's create_agent + HumanInTheLoopMiddleware and a
minimal hand-written LangGraph graph, in one process, interleaved, on the same scripted model
and storage. Prints medians, p90s and ratios; writes benchmarks/results.json.

    python -m benchmarks.bench [--rounds N] [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import contestants as c

Row = dict[str, Any]


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {"median_ms": statistics.median(ordered) * 1000, "p90_ms": p90 * 1000,
            "n": len(ordered)}


def interleaved(runs: dict[str, Callable[[], Any]], rounds: int, warmup: int = 5,
                is_async: bool = False) -> dict[str, dict[str, float]]:
    """Time each contestant once per round, in rotation, so drift hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    loop = asyncio.new_event_loop() if is_async else None

    def once(fn: Callable[[], Any]) -> float:
        start = time.perf_counter()
        if loop is not None:
            loop.run_until_complete(fn())
        else:
            fn()
        return time.perf_counter() - start

    for _ in range(warmup):
        for fn in runs.values():
            once(fn)
    names = list(runs)
    for index in range(rounds):
        order = names[index % len(names):] + names[: index % len(names)]
        for name in order:
            samples[name].append(once(runs[name]))
    if loop is not None:
        loop.close()
    return {name: _stats(values) for name, values in samples.items()}


def ratio(stats: dict[str, dict[str, float]], a: str, b: str) -> float:
    return stats[a]["median_ms"] / stats[b]["median_ms"]


def round_trips(rounds: int, directory: Path) -> list[Row]:
    rows: list[Row] = []
    for kind in ("memory", "sqlite"):
        sub = directory / f"rt-{kind}"
        sub.mkdir()
        stats = interleaved({
            "graphkit": c.graphkit_round(c.graphkit_agent(kind, sub)),
            "langchain": c.langchain_round(c.langchain_agent(kind, sub)),
            "minimal": c.minimal_round(c.minimal_graph(kind, sub)),
        }, rounds)
        rows.append({"scenario": f"approval round trip, {kind}, sync", "stats": stats,
                     "graphkit/langchain": ratio(stats, "graphkit", "langchain"),
                     "graphkit/minimal": ratio(stats, "graphkit", "minimal")})

        asub = directory / f"rt-async-{kind}"
        asub.mkdir()
        stats = interleaved({
            "graphkit": c.graphkit_async_round(c.graphkit_agent(kind, asub)),
            "langchain": c.langchain_async_round(c.langchain_agent(kind, asub)),
            "minimal": c.minimal_async_round(c.minimal_graph(kind, asub)),
        }, rounds, is_async=True) if kind == "memory" else _async_sqlite(asub, rounds)
        rows.append({"scenario": f"approval round trip, {kind}, async", "stats": stats,
                     "graphkit/langchain": ratio(stats, "graphkit", "langchain"),
                     "graphkit/minimal": ratio(stats, "graphkit", "minimal")})

        nsub = directory / f"plain-{kind}"
        nsub.mkdir()
        stats = interleaved({
            "graphkit": c.graphkit_round(c.graphkit_agent(kind, nsub, approval=False),
                                         approval=False),
            "langchain": c.langchain_round(c.langchain_agent(kind, nsub, approval=False),
                                           approval=False),
        }, rounds)
        rows.append({"scenario": f"round trip without approval, {kind}", "stats": stats,
                     "graphkit/langchain": ratio(stats, "graphkit", "langchain")})

        ssub = directory / f"sup-{kind}"
        ssub.mkdir()
        stats = interleaved({
            "graphkit": c.graphkit_round(c.graphkit_supervisor(kind, ssub)),
            "langchain": c.langchain_round(c.langchain_supervisor(kind, ssub)),
            "minimal": c.minimal_round(c.minimal_supervisor(kind, ssub)),
        }, max(10, rounds // 2))
        rows.append({"scenario": f"supervisor round trip (approval one level down), {kind}",
                     "stats": stats, "graphkit/langchain": ratio(stats, "graphkit", "langchain"),
                     "graphkit/minimal": ratio(stats, "graphkit", "minimal")})
    return rows


def _async_sqlite(directory: Path, rounds: int) -> dict[str, dict[str, float]]:
    """LangChain's async SQLite saver is bound to one loop: build both inside it."""
    return {n: _stats(v[5:]) for n, v in _async_sqlite_samples(directory, rounds + 5).items()}


def long_thread(directory: Path, rounds: int = 40) -> Row:
    """Async approval round trips on SQLite, all on one thread per contestant: the first
    rounds against the last, so a cost that grows with the thread shows (each round trip of
    `round_trips` starts a new thread)."""
    directory.mkdir()
    samples = _async_sqlite_samples(directory, rounds, thread_id="one-thread")
    row: Row = {"scenario": f"async approval round trips on one SQLite thread ({rounds})"}
    for name, values in samples.items():
        early, late = _stats(values[:5]), _stats(values[-10:])
        row[name] = {"first_5_median_ms": early["median_ms"],
                     "last_10_median_ms": late["median_ms"],
                     "last/first": late["median_ms"] / early["median_ms"]}
    return row


def _async_sqlite_samples(directory: Path, rounds: int, thread_id: str | None = None
                          ) -> dict[str, list[float]]:
    """Each contestant's async round trips on SQLite, interleaved, in seconds (on new
    threads, or each contestant's all on `thread_id`)."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    loop = asyncio.new_event_loop()

    connections: list[Any] = []

    async def build() -> dict[str, Callable[[], Any]]:
        import aiosqlite
        from langchain.agents import create_agent
        from langchain.agents.middleware import HumanInTheLoopMiddleware
        from langchain_core.tools import tool

        conn = await aiosqlite.connect(directory / "langchain-async.db")
        minimal_conn = await aiosqlite.connect(directory / "minimal-async.db")
        connections.extend((conn, minimal_conn))
        graph = create_agent(c.model(), tools=[tool("deploy")(c._deploy)],
                             middleware=[HumanInTheLoopMiddleware(interrupt_on={"deploy": True})],
                             checkpointer=AsyncSqliteSaver(conn))
        minimal = c.minimal_graph("sqlite", directory,
                                  checkpointer=AsyncSqliteSaver(minimal_conn))
        return {"graphkit": c.graphkit_async_round(c.graphkit_agent("sqlite", directory),
                                                   thread_id),
                "langchain": c.langchain_async_round(graph, thread_id),
                "minimal": c.minimal_async_round(minimal, thread_id)}

    runs = loop.run_until_complete(build())
    samples: dict[str, list[float]] = {n: [] for n in runs}
    for index in range(rounds):
        names = list(runs)
        for name in names[index % len(names):] + names[: index % len(names)]:
            start = time.perf_counter()
            loop.run_until_complete(runs[name]())
            samples[name].append(time.perf_counter() - start)
    for conn in connections:
        loop.run_until_complete(conn.close())
    loop.close()
    return samples


def storage_growth(directory: Path, checkpoints: tuple[int, ...] = (1, 10, 100)) -> list[Row]:
    """One thread, many approval rounds: bytes on disk and rows, graphkit and LangChain."""
    import uuid

    from langgraph.types import Command

    rows: list[Row] = []
    gk_path = directory / "growth-graphkit.db"
    lc_dir = directory / "growth-lc"
    lc_dir.mkdir()
    agent = c.graphkit_agent("sqlite", directory)
    agent = type(agent)(name="growth", model=c.model(), tools=agent.tools,
                        checkpointer=f"sqlite:///{gk_path}")
    lc = c.langchain_agent("sqlite", lc_dir)
    thread = uuid.uuid4().hex
    config = {"configurable": {"thread_id": thread}}
    for n in range(1, max(checkpoints) + 1):
        result = agent.generate(f"ship round {n}", thread_id=thread)
        agent.approve_tool_call_generate(run_id=result.run_id)
        lc.invoke({"messages": [("user", f"ship round {n}")]}, config, **c.EQUAL)
        lc.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config, **c.EQUAL)
        if n in checkpoints:
            rows.append({"rounds": n, "graphkit": _size(gk_path),
                         "langchain": _size(lc_dir / "langchain.db")})
    # resumability and history after 100 rounds
    state = agent.graph.get_state({"configurable": {"thread_id": thread}})
    assert len(state.values["messages"]) == 4 * max(checkpoints)
    return rows


def _size(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    rows = {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
            for t in ("checkpoints", "writes", "store") if t in tables}
    conn.close()
    return {"bytes": path.stat().st_size, **{f"rows_{k}": v for k, v in rows.items()}}


def parallel_turn(n: int, flavour: str, spans: list[tuple[float, float]]
                  ) -> tuple[Callable[[list[Any]], Any], Callable[..., Any]]:
    """The scripted reply that calls `nap` `n` times in one turn (then says "done"), and
    `nap` itself (sync or async): it sleeps 50 ms and adds its (start, end) to `spans`."""
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

    def reply(messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], ToolMessage):
            return AIMessage("done")
        return AIMessage("", tool_calls=[{"name": "nap", "args": {"i": i}, "id": f"n{i}"}
                                         for i in range(n)])

    if flavour == "sync":
        def nap(i: int) -> str:
            """Sleep 50 ms."""
            start = time.perf_counter()
            time.sleep(0.05)
            spans.append((start, time.perf_counter()))
            return str(i)
        return reply, nap

    async def anap(i: int) -> str:
        """Sleep 50 ms."""
        start = time.perf_counter()
        await asyncio.sleep(0.05)
        spans.append((start, time.perf_counter()))
        return str(i)
    return reply, anap


def parallel_tools(directory: Path, runs: int = 15) -> list[Row]:
    """N tools sleeping 50 ms each, in one model turn, sync and async, on SQLite: the tools'
    phase (first tool start to last tool end) and the whole run (two model turns and every
    checkpoint), for an agent that serves many runs (as in an application; the first runs,
    which warm it up, are not counted); beside LangChain's `create_agent` and the minimal graph
    on the same tools, model, storage and concurrency (graphkit's), interleaved."""
    rows: list[Row] = []
    spans: list[tuple[float, float]] = []  # (start, end) of each tool call of the last run
    for n in (8, 32):
        for flavour in ("sync", "async"):
            reply, nap = parallel_turn(n, flavour, spans)
            loop = asyncio.new_event_loop()
            contestants = loop.run_until_complete(
                _parallel_contestants(directory / f"parallel-{n}-{flavour}", nap, reply,
                                      flavour))
            wholes: dict[str, list[float]] = {name: [] for name in contestants}
            phases: dict[str, list[float]] = {name: [] for name in contestants}
            for index in range(runs + 3):
                for name, run in contestants.items():
                    spans.clear()
                    start = time.perf_counter()
                    if flavour == "sync":
                        run()
                    else:
                        loop.run_until_complete(run())
                    if index >= 3:
                        wholes[name].append(time.perf_counter() - start)
                        phases[name].append(max(e for _, e in spans) - min(s for s, _ in spans))
            loop.run_until_complete(_close_all())
            loop.close()
            row: Row = {"tools": n, "flavour": flavour, "target_ms": 60 if n == 8 else 80}
            for name in contestants:
                whole = _stats(wholes[name])
                prefix = "" if name == "graphkit" else f"{name}_"
                row.update({f"{prefix}tools_phase_ms": statistics.median(phases[name]) * 1000,
                            f"{prefix}whole_run_ms": whole["median_ms"],
                            f"{prefix}whole_run_p90_ms": whole["p90_ms"]})
            rows.append(row)
    return rows


_OPEN: list[Any] = []


async def _close_all() -> None:
    while _OPEN:
        await _OPEN.pop().close()


async def _parallel_contestants(directory: Path, nap: Any, reply: Any, flavour: str
                                ) -> dict[str, Callable[[], Any]]:
    """graphkit and LangChain's `create_agent` on one tool, model and SQLite file each."""
    import aiosqlite
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from graphkit import Agent, create_tool
    from graphkit.agent import MAX_CONCURRENCY
    from graphkit.testing import ScriptedChatModel

    directory.mkdir()
    agent = Agent(name="p", model=ScriptedChatModel(reply), tools=[create_tool(nap, name="nap")],
                  checkpointer=f"sqlite:///{directory / 'graphkit.db'}")
    if flavour == "sync":
        saver: Any = c.saver("sqlite", directory, "langchain")
        minimal_saver: Any = c.saver("sqlite", directory, "minimal")
    else:
        conn = await aiosqlite.connect(directory / "langchain.db")
        minimal_conn = await aiosqlite.connect(directory / "minimal.db")
        _OPEN.extend((conn, minimal_conn))
        saver, minimal_saver = AsyncSqliteSaver(conn), AsyncSqliteSaver(minimal_conn)
    graph = create_agent(ScriptedChatModel(reply), tools=[tool("nap")(nap)], checkpointer=saver)
    minimal = c.minimal_parallel(reply, nap, minimal_saver)

    def config() -> dict[str, Any]:
        # graphkit runs up to MAX_CONCURRENCY tasks of a step at once; LangGraph's default is
        # its thread pool's (cpu count + 4), which would run the peers' calls in waves
        return {"configurable": {"thread_id": os.urandom(8).hex()},
                "max_concurrency": MAX_CONCURRENCY}

    if flavour == "sync":
        return {"graphkit": lambda: agent.generate("go"),
                "langchain": lambda: graph.invoke({"messages": [("user", "go")]}, config(),
                                                  **c.EQUAL),
                "minimal": lambda: minimal.invoke({"messages": [("user", "go")]}, config(),
                                                  **c.EQUAL)}

    async def gk() -> Any:
        return await agent.agenerate("go")

    async def lc() -> Any:
        return await graph.ainvoke({"messages": [("user", "go")]}, config(), **c.EQUAL)

    async def mn() -> Any:
        return await minimal.ainvoke({"messages": [("user", "go")]}, config(), **c.EQUAL)

    return {"graphkit": gk, "langchain": lc, "minimal": mn}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--quick", action="store_true", help="fewer rounds, no growth to 100")
    parser.add_argument("--out", default=str(Path(__file__).with_name("results.json")))
    parser.add_argument("--skip-threads", action="store_true")
    args = parser.parse_args(argv)
    rounds = 15 if args.quick else args.rounds
    results: dict[str, Any] = {"machine": {"python": platform.python_version(),
                                           "cpus": os.cpu_count()}}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        results["round_trips"] = round_trips(rounds, directory)
        results["long_thread"] = long_thread(directory / "long-thread", 15 if args.quick else 40)
        results["storage_growth"] = storage_growth(
            directory, (1, 10) if args.quick else (1, 10, 100))
        results["parallel_tools"] = parallel_tools(directory)
        if not args.skip_threads:
            from benchmarks.many_threads import many_threads

            results["many_threads"] = many_threads(directory, quick=args.quick)
    report(results)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwrote {args.out}")
    return 0


def report(results: dict[str, Any]) -> None:
    print(f"{'scenario':<58} {'graphkit':>17} {'langchain':>17} {'minimal':>17} "
          f"{'gk/lc':>6} {'gk/min':>6}")
    for row in results["round_trips"]:
        s = row["stats"]
        mn = (f"{s['minimal']['median_ms']:7.2f} p90 {s['minimal']['p90_ms']:>5.1f}"
              if "minimal" in s else "-")
        gm = f"{row['graphkit/minimal']:.2f}" if "graphkit/minimal" in row else "-"
        print(f"{row['scenario']:<58} "
              f"{s['graphkit']['median_ms']:>7.2f} p90 {s['graphkit']['p90_ms']:>5.1f} "
              f"{s['langchain']['median_ms']:>7.2f} p90 {s['langchain']['p90_ms']:>5.1f} "
              f"{mn:>17} {row['graphkit/langchain']:>6.2f} {gm:>6}")
    if "long_thread" in results:
        row = results["long_thread"]
        print(f"\n{row['scenario']}: median of the first 5 -> of the last 10, ms")
        for name in ("graphkit", "langchain", "minimal"):
            print(f"  {name:<10} {row[name]['first_5_median_ms']:7.2f} -> "
                  f"{row[name]['last_10_median_ms']:7.2f} ({row[name]['last/first']:.2f}x)")
    print("\nstorage on one thread (SQLite file after N approval rounds)")
    for row in results["storage_growth"]:
        gk, lc = row["graphkit"], row["langchain"]
        print(f"  {row['rounds']:>4} rounds: graphkit {gk['bytes']:>11,} B {gk} | "
              f"langchain {lc['bytes']:>11,} B {lc} | ratio {gk['bytes'] / lc['bytes']:.3f}")
    print("\nparallel tools (50 ms each): tools' phase, and the whole run")
    for row in results["parallel_tools"]:
        print(f"  {row['tools']:>3} x {row['flavour']:<5}: {row['tools_phase_ms']:6.1f} ms "
              f"(whole run median {row['whole_run_ms']:6.1f} ms, p90 "
              f"{row['whole_run_p90_ms']:6.1f} ms; target <= {row['target_ms']} ms) | "
              f"langchain {row['langchain_tools_phase_ms']:6.1f} ms (whole run median "
              f"{row['langchain_whole_run_ms']:6.1f} ms, p90 "
              f"{row['langchain_whole_run_p90_ms']:6.1f} ms) | minimal "
              f"{row['minimal_tools_phase_ms']:6.1f} ms (whole run median "
              f"{row['minimal_whole_run_ms']:6.1f} ms, p90 "
              f"{row['minimal_whole_run_p90_ms']:6.1f} ms)")
    for row in results.get("many_threads", []):
        print(f"\nmany threads on {row['storage']}: {row['threads']} paused runs, "
              f"decisions {row['decisions']}, {row['workers']} worker processes x "
              f"{row['worker_threads']} threads: {row['throughput_per_s']:.1f} round trips/s, "
              f"decision->tool latency median {row['latency_median_ms']:.0f} ms, "
              f"p90 {row['latency_p90_ms']:.0f} ms")
        if "minimal_throughput_per_s" in row:
            either = " and ".join(f"{v:.1f}" for v in
                                  row.get("minimal_throughput_either_side_per_s", []))
            print(f"  minimal graph, {row['workers']} processes resuming on PostgresSaver: "
                  f"{row['minimal_throughput_per_s']:.1f} round trips/s"
                  f"{f' (the mean of {either}, before and after)' if either else ''}; "
                  f"graphkit/minimal {row['graphkit/minimal']:.2f} (target >= 0.9)")


if __name__ == "__main__":
    raise SystemExit(main())
