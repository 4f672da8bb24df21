"""Profile the approval round trip: where graphkit spends its time, and against what.

    python -m benchmarks.profile [--storage memory|sqlite] [--rounds N] [--top N]
    python -m benchmarks.profile --compare [--storage memory|sqlite] [--rounds N]
    python -m benchmarks.profile --nodes [--storage memory|sqlite] [--rounds N]

The first form prints cProfile's cumulative and internal-time tables for N graphkit round
trips (after a warm-up). `--compare` profiles graphkit, LangChain's middleware and the minimal
graph alike and prints each one's internal time per round trip by where the code lives
(LangGraph, LangChain, graphkit's modules, SQLite, threads), which shows what graphkit adds to
the least a LangGraph approval needs. `--nodes` times (wall clock, no profiler) the node bodies
of graphkit and of the minimal graph, interleaved, and the rest of each round trip (LangGraph's
loop and checkpoints, and for graphkit its API: lease, claim, reading the paused state).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import pstats
import tempfile
import time
from collections.abc import Callable
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--storage", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--top", type=int, default=35)
    parser.add_argument("--compare", action="store_true",
                        help="graphkit, LangChain and the minimal graph, by where time goes")
    parser.add_argument("--nodes", action="store_true",
                        help="wall time in node bodies vs the rest, graphkit and minimal graph")
    args = parser.parse_args()
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
