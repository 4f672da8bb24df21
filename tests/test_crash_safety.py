"""Crash safety: a worker killed with SIGKILL at random points and restarted loses nothing.

200 approval rounds (40 threads x 5) on SQLite by default; GRAPHKIT_LONG_TESTS=1 runs 1,000
rounds with more kills. Afterwards every approved call took effect exactly once, every declined
call never ran, no approval is left pending, and every thread finished.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from graphkit import Inbox
from tests.crash_worker import declined

ROOT = Path(__file__).resolve().parent.parent
LONG = os.environ.get("GRAPHKIT_LONG_TESTS") == "1"


def test_sigkilled_worker_loses_nothing_and_runs_approved_calls_once(tmp_path: Path) -> None:
    threads, rounds = (100, 10) if LONG else (40, 5)
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    effects = tmp_path / "effects.db"
    rng = random.Random(20261129)
    kills = 0
    command = [sys.executable, "-m", "tests.crash_worker", db, str(effects), str(threads),
               str(rounds)]
    deadline = time.monotonic() + (1200 if LONG else 300)
    while True:
        proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True)
        try:
            proc.wait(timeout=rng.uniform(0.8, 2.0) if kills < (25 if LONG else 8) else 240)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            kills += 1
            continue
        finally:
            assert time.monotonic() < deadline, "the workers did not finish in time"
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
        break
    assert kills >= 3  # the run was really interrupted, several times

    conn = sqlite3.connect(effects)
    effect_ids = [r[0] for r in conn.execute("SELECT tool_call_id FROM effects")]
    attempts = [r[0] for r in conn.execute("SELECT tool_call_id FROM attempts")]
    expected = [f"t{t:03d}-{r}" for t in range(threads) for r in range(1, rounds + 1)]
    approved = {c for c in expected if not declined(c)}
    refused = set(expected) - approved
    assert refused and approved
    assert sorted(effect_ids) == sorted(approved)  # every approved call took effect, once
    assert not refused & set(attempts)  # a declined call never ran, not even partly
    assert Inbox(db).pending() == []  # no approval left behind
    repeated = len(attempts) - len(set(attempts))
    assert repeated <= kills  # a retry only where a kill cut between effect and checkpoint
    print(f"{len(expected)} rounds, {kills} kills, {repeated} repeated attempts")

    from tests.crash_worker import build, settled

    agent = build(db, str(effects))
    for t in range(threads):
        state = agent.graph.get_state({"configurable": {"thread_id": f"t{t:03d}"}})
        messages = state.values["messages"]
        assert settled(messages) and not state.next and not state.interrupts
        assert sum(m.type == "human" for m in messages) == rounds
