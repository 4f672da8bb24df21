"""Start the real `langgraph dev` on a free loopback port for a test module, and stop it after.

The server imports graphkit from this checkout (PYTHONPATH first), not from whatever copy the
virtualenv has installed, so a worktree's changes are what the server runs.
"""

from __future__ import annotations

import json
import os
import re
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


# ------------------------------------------------ the mounted inbox, as a reviewer drives it


def reviewer(url: str, token: str) -> httpx.Client:
    """A browser-less reviewer signed into the mounted inbox with `token`."""
    web = httpx.Client(base_url=f"{url}/inbox", follow_redirects=False, timeout=30)
    login = re.search(r"name='login' value='([0-9a-f]+)'", web.get("/login").text)
    assert login is not None
    assert web.post("/login", data={"token": token, "login": login.group(1)}).status_code == 303
    return web


def card_form(web: httpx.Client, approval_id: str) -> dict[str, str]:
    """What the card's decision form sends besides the reviewer's input: its CSRF token and
    the digest of the arguments it shows."""
    card = web.get(f"/approvals/{approval_id}").text
    csrf = re.search(r"name='csrf' value='([0-9a-f]+)'", card)
    digest = re.search(r"name='digest' value='([^']+)'", card)
    assert csrf is not None and digest is not None, card[:3000]
    return {"csrf": csrf.group(1), "digest": digest.group(1)}


def decide(web: httpx.Client, approval_id: str, action: str = "approve") -> None:
    """Decide through the card's form; the inbox starts the continuation before it answers."""
    done = web.post(f"/approvals/{approval_id}/{action}", data=card_form(web, approval_id))
    assert done.status_code == 303 and "refused" not in done.headers["location"], done.headers


def interrupts(c: Any, thread_id: str) -> list[dict[str, Any]]:
    state = c.threads.get_state(thread_id)
    found = list(state.get("interrupts") or [])
    for task in state.get("tasks") or []:
        found.extend(task.get("interrupts") or [])
    return list({i["id"]: i for i in found}.values())


def continuations(c: Any, thread_id: str) -> list[dict[str, Any]]:
    return [r for r in c.runs.list(thread_id, limit=20) if (r.get("kwargs") or {}).get("command")]


def settled(c: Any, thread_id: str) -> dict[str, Any]:
    """The one continuation of the thread, once it has ended."""
    deadline = time.monotonic() + 60
    while True:
        runs = continuations(c, thread_id)
        if runs and all(r["status"] not in ("pending", "running") for r in runs):
            (run,) = runs
            return run
        assert time.monotonic() < deadline, f"no continuation ended: {runs}"
        time.sleep(0.3)


def approval_of(web: httpx.Client, thread_id: str, deadline_s: float = 30, *,
                but: str = "") -> str:
    """The id of the approval (not `but`) the reviewer's inbox lists for the thread, once it
    does (the module's server serves every test's threads)."""
    deadline = time.monotonic() + deadline_s
    while True:
        for approval_id in dict.fromkeys(re.findall(r"approvals/(apr_[0-9a-z_]+)",
                                                    web.get("/").text)):
            if approval_id != but and f"threads/audit?thread={thread_id}" in web.get(
                    f"/approvals/{approval_id}").text:
                return approval_id
        assert time.monotonic() < deadline, f"no approval of {thread_id} listed"
        time.sleep(0.2)
