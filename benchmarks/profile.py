"""Profile one contestant's approval round trip: where graphkit spends its time.

    python -m benchmarks.profile [--storage memory|sqlite] [--rounds N] [--top N]

Prints cProfile's cumulative and internal-time tables for N round trips of graphkit (after a
warm-up), the figures `make bench` compares against LangChain and a minimal graph.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
from pathlib import Path

from benchmarks import contestants as c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--storage", choices=["memory", "sqlite"], default="memory")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--top", type=int, default=35)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        agent = c.graphkit_agent(args.storage, Path(tmp))
        run = c.graphkit_round(agent)
        for _ in range(10):
            run()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(args.rounds):
            run()
        profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
