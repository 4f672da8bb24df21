"""Start the real `langgraph dev` on a free loopback port for a test module, and stop it after.

The server imports graphkit from this checkout (PYTHONPATH first), not from whatever copy the
virtualenv has installed, so a worktree's changes are what the server runs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def langgraph_dev(workdir: Path, config: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Yield the URL of a running `langgraph dev`.

    Without `config` it serves the repo's own langgraph.json from the repo root, as Studio
    does; with one it writes `workdir/langgraph.json` and serves that from `workdir` (use
    absolute paths in it). The server log is `workdir/server.log`; its tail is shown if the
    server does not come up.
    """
    port = free_port()
    log = workdir / "server.log"
    child_env = {k: v for k, v in os.environ.items()
                 if not k.startswith(("OPENAI_", "GRAPHKIT_"))}
    child_env.update(LANGSMITH_TRACING="false", LANGGRAPH_CLI_NO_ANALYTICS="1",
                     PYTHONPATH=os.pathsep.join(
                         p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    child_env.update(env or {})
    command = [str(Path(sys.executable).parent / "langgraph"), "dev", "--port", str(port),
               "--host", "127.0.0.1", "--no-browser", "--no-reload"]
    cwd = ROOT
    if config is not None:
        (workdir / "langgraph.json").write_text(json.dumps(config, indent=2))
        command += ["--config", str(workdir / "langgraph.json")]
        cwd = workdir
    with log.open("w") as out:
        proc = subprocess.Popen(command, cwd=cwd, env=child_env, stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def interrupt_of(client: Any, thread_id: str) -> dict[str, Any]:
    """The value of the one interrupt a thread waits on."""
    state = client.threads.get_state(thread_id)
    interrupts = state["interrupts"] or [i for t in state["tasks"] for i in t["interrupts"]]
    assert len(interrupts) == 1, state
    value: dict[str, Any] = interrupts[0]["value"]
    return value
