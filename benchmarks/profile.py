"""Profile the approval round trip: where graphkit spends its time, and against what.

    python -m benchmarks.profile [--storage memory|sqlite] [--rounds N] [--top N]
    python -m benchmarks.profile --compare [--storage memory|sqlite] [--rounds N]
    python -m benchmarks.profile --nodes [--storage memory|sqlite] [--rounds N]
    python -m benchmarks.profile --parallel N [--flavour sync|async] [--rounds N]

The first form prints cProfile's cumulative and internal-time tables for N graphkit round
trips (after a warm-up). `--compare` profiles graphkit, LangChain's middleware and the minimal
graph alike and prints each one's internal time per round trip by where the code lives
(LangGraph, LangChain, graphkit's modules, SQLite, threads), which shows what graphkit adds to
the least a LangGraph approval needs. `--nodes` times (wall clock, no profiler) the node bodies
of graphkit and of the minimal graph, interleaved, and the rest of each round trip (LangGraph's
loop and checkpoints, and for graphkit its API: lease, claim, reading the paused state).
`--parallel N` runs one turn of N tools sleeping 50 ms (SQLite, as `make bench`) for each
contestant, interleaved, and prints the whole run, the spread of the tools' starts (each start
waits for the CPU its predecessors spent before theirs, under one GIL) and the CPU per run:
the process's, and the part spent, in every thread, in LangChain's `BaseTool.invoke` (the
minimal graph calls its function directly) and in graphkit's admission and outcome write.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import gc
import inspect
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks import contestants as c


def _profile(run: Callable[[], Any], rounds: int) -> cProfile.Profile:
    for _ in range(20):
        run()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(rounds):
        run()
    profile.disable()
    return profile


def _where(file: str, function: str) -> str:
    if "/graphkit/" in file:
        return "graphkit/" + file.rsplit("/graphkit/", 1)[1]
    for package in ("langgraph", "langchain_core", "langchain", "pydantic", "psycopg"):
        if f"/{package}/" in file:
            return package
    if file == "~":
        if "sqlite3" in function:
            return "sqlite3"
        if "lock" in function or "thread" in function:
            return "threads (waiting, starting)"
        return "builtins"
    if "/threading.py" in file or "/concurrent/" in file or "/queue.py" in file:
        return "threads (waiting, starting)"
    return "stdlib/other"


def by_place(profile: cProfile.Profile, rounds: int) -> dict[str, float]:
    """Internal time per round trip (ms) by where the code lives."""
    stats: Any = pstats.Stats(profile)
    places: collections.Counter[str] = collections.Counter()
    for (file, _line, function), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        places[_where(file, function)] += tottime * 1000 / rounds
    return dict(places)


def compare(storage: c.Storage, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        runs = {
            "graphkit": c.graphkit_round(c.graphkit_agent(storage, directory)),
            "langchain": c.langchain_round(c.langchain_agent(storage, directory)),
            "minimal": c.minimal_round(c.minimal_graph(storage, directory)),
        }
        tables = {name: by_place(_profile(run, rounds), rounds) for name, run in runs.items()}
    places = sorted({p for t in tables.values() for p in t},
                    key=lambda p: -tables["graphkit"].get(p, 0.0))
    print(f"internal time per approval round trip under cProfile, ms ({storage}, {rounds} "
          "rounds)")
    print(f"{'where':<34} {'graphkit':>9} {'langchain':>9} {'minimal':>9}")
    for place in places:
        row = [tables[n].get(place, 0.0) for n in runs]
        if max(row) >= 0.005:
            print(f"{place:<34} " + " ".join(f"{v:9.3f}" for v in row))
    print(f"{'total':<34} " + " ".join(f"{sum(tables[n].values()):9.3f}" for n in runs))


def _time_nodes(graph: Any, name: str, spent: collections.Counter[str]) -> None:
    """Wrap each node's body (a LangGraph `RunnableCallable`) to add its wall time to `spent`."""
    for node_name, node in graph.nodes.items():
        body = getattr(node.bound, "func", None)
        if body is None:
            continue

        def timed(*args: Any, _body: Any = body, _key: str = f"{name}: {node_name}",
                  **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _body(*args, **kwargs)
            finally:
                spent[_key] += time.perf_counter() - start

        node.bound.func = timed


def nodes(storage: c.Storage, rounds: int) -> None:
    spent: collections.Counter[str] = collections.Counter()
    whole: collections.Counter[str] = collections.Counter()
    with tempfile.TemporaryDirectory() as tmp:
        agent = c.graphkit_agent(storage, Path(tmp))
        minimal = c.minimal_graph(storage, Path(tmp))
        _time_nodes(agent.graph, "graphkit", spent)
        _time_nodes(minimal, "minimal", spent)
        runs = {"graphkit": c.graphkit_round(agent), "minimal": c.minimal_round(minimal)}
        for _ in range(20):
            for run in runs.values():
                run()
        spent.clear()
        gc.collect()
        for _ in range(rounds):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                whole[name] += time.perf_counter() - start
    print(f"wall time per approval round trip, ms ({storage}, {rounds} interleaved rounds)")
    for name in runs:
        bodies = {k: v for k, v in spent.items() if k.startswith(f"{name}: ")}
        for key, value in sorted(bodies.items()):
            print(f"  {key:<32} {value * 1000 / rounds:7.3f}")
        in_nodes = sum(bodies.values())
        print(f"  {name + ': all node bodies':<32} {in_nodes * 1000 / rounds:7.3f}")
        print(f"  {name + ': the rest':<32} {(whole[name] - in_nodes) * 1000 / rounds:7.3f}")
        print(f"  {name + ': round trip':<32} {whole[name] * 1000 / rounds:7.3f}")


@contextlib.contextmanager
def _thread_cpu(places: dict[str, tuple[Any, str]], spent: collections.Counter[str]
                ) -> Iterator[None]:
    """Patch each `owner.name` to add the CPU time of the calling thread spent in it (every
    thread: a sync tool runs in its own) to `spent[label]`; restored on exit."""
    places = {label: (next(k for k in inspect.getmro(owner) if name in vars(k))
                      if isinstance(owner, type) else owner, name)
              for label, (owner, name) in places.items()}  # patched where it is defined
    originals = [(owner, name, vars(owner)[name]) for owner, name in places.values()]
    for label, (owner, name) in places.items():
        body = vars(owner)[name]
        if inspect.iscoroutinefunction(body):
            async def timed_async(*args: Any, _body: Any = body, _label: str = label,
                                  **kwargs: Any) -> Any:
                start = time.thread_time()  # (an await may resume on another thread: rare)
                try:
                    return await _body(*args, **kwargs)
                finally:
                    spent[_label] += time.thread_time() - start
            setattr(owner, name, timed_async)
            continue

        def timed(*args: Any, _body: Any = body, _label: str = label, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return _body(*args, **kwargs)
            finally:
                spent[_label] += time.thread_time() - start
        setattr(owner, name, timed)
    try:
        yield
    finally:
        for owner, name, body in originals:
            setattr(owner, name, body)


def parallel(tools: int, flavour: str, rounds: int) -> None:
    import asyncio

    from langchain_core.tools import BaseTool

    from benchmarks import bench
    from graphkit import _tools_node
    from graphkit._ledger import Ledger

    spans: list[tuple[float, float]] = []  # (start, end) of each tool call of the last run
    reply, nap = bench.parallel_turn(tools, flavour, spans)
    invoke = "invoke" if flavour == "sync" else "ainvoke"
    places = {"LangChain's BaseTool." + invoke: (BaseTool, invoke),
              "graphkit's admission (_admit)": (_tools_node, "_admit"),
              "graphkit's outcome write (Ledger.finish)": (Ledger, "finish")}
    loop = asyncio.new_event_loop()
    figures: dict[str, dict[str, list[float]]] = {}
    spent: dict[str, collections.Counter[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        contestants = loop.run_until_complete(
            bench._parallel_contestants(Path(tmp) / "parallel", nap, reply, flavour))

        def go(run: Callable[[], Any]) -> None:
            if flavour == "sync":
                run()
            else:
                loop.run_until_complete(run())

        for _ in range(3):
            for run in contestants.values():
                go(run)
        for name in contestants:
            figures[name] = {"whole": [], "spread": [], "cpu": []}
            spent[name] = collections.Counter()
        for _ in range(rounds):
            for name, run in contestants.items():
                spans.clear()
                with _thread_cpu(places, spent[name]):
                    cpu, start = time.process_time(), time.perf_counter()
                    go(run)
                    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
                figures[name]["whole"].append(wall)
                figures[name]["spread"].append(max(s for s, _ in spans) - min(s for s, _ in spans))
                figures[name]["cpu"].append(cpu)
        loop.run_until_complete(bench._close_all())
    loop.close()
    print(f"{tools} tools sleeping 50 ms in one turn, {flavour}, SQLite; medians over {rounds} "
          "interleaved runs, ms")
    print(f"{'':<44} " + " ".join(f"{n:>9}" for n in contestants))
    for key, label in (("whole", "whole run"), ("spread", "first tool start to last start"),
                       ("cpu", "CPU per run (process, every thread)")):
        print(f"{label:<44} " + " ".join(
            f"{statistics.median(figures[n][key]) * 1000:9.2f}" for n in contestants))
    for label in places:
        print(f"{'  of which ' + label:<44} " + " ".join(
            f"{spent[n][label] * 1000 / rounds:9.2f}" for n in contestants))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--storage", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--compare", action="store_true",
                        help="graphkit, LangChain and the minimal graph, by where time goes")
    parser.add_argument("--nodes", action="store_true",
                        help="wall time in node bodies vs the rest, graphkit and minimal graph")
    parser.add_argument("--parallel", type=int, metavar="N",
                        help="N parallel tools: whole run, start spread and CPU by part")
    parser.add_argument("--flavour", choices=["sync", "async"], default="sync")
    args = parser.parse_args()
    if args.parallel:
        parallel(args.parallel, args.flavour, min(args.rounds, 40))
        return
    if args.compare:
        compare(args.storage, args.rounds)
        return
    if args.nodes:
        nodes(args.storage, args.rounds)
        return
    with tempfile.TemporaryDirectory() as tmp:
        profile = _profile(c.graphkit_round(c.graphkit_agent(args.storage, Path(tmp))),
                           args.rounds)
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
