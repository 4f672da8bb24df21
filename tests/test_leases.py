"""Lease owners name a process durably, and a lease is taken from its holder before expiry
only when that holder provably no longer runs.

A hostname and a pid are not enough: a worker in another container with the same hostname
(another PID namespace) looks dead from here, and running its approved deploy again is the one
thing leases exist to prevent. The real-process tests below kill a holder in our namespace
(taken at once) and run one in a fresh PID namespace with our hostname (left to its expiry).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graphkit import _owner
from graphkit._ledger import LEASE_SECONDS, Ledger, RunBusyError, RunToRecord
from graphkit._owner import Owner, holder_is_dead, new_owner, parse_owner
from graphkit.errors import GraphkitError

ROOT = Path(__file__).resolve().parent.parent

HOLDER = """\
import sys, time
import graphkit._ledger as ledger
import graphkit._ledger._schema as schema

if len(sys.argv) > 3:
    schema.LEASE_SECONDS = float(sys.argv[3])
with ledger.Ledger.sqlite(sys.argv[1]).lease(sys.argv[2]) as owner:
    print(owner, flush=True)
    time.sleep(120)
"""

NAMESPACE_INIT = """\
# PID 1 of a fresh PID namespace: make the holder's pid one that does not exist outside.
import os, sys

with open("/proc/sys/kernel/ns_last_pid", "w") as f:
    f.write(sys.argv[1])
child = os.fork()
if child == 0:
    os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
os.waitpid(child, 0)
"""


@pytest.fixture(autouse=True)
def _fresh_identity() -> Iterator[None]:
    """Tests that point `_owner` at another /proc must not leave their identity cached."""
    _owner._forget()
    yield
    _owner._forget()


def _me() -> Owner:
    parsed = parse_owner(new_owner())
    assert parsed is not None
    return parsed


def _reaped_pid() -> int:
    """The pid of a process that has exited and been reaped (so no process has it now)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _lease_row(db: Path, thread_id: str) -> tuple[str, float]:
    conn = sqlite3.connect(db)
    try:
        row = conn.execute("SELECT owner, expires_at FROM graphkit_leases WHERE thread_id = ?",
                           (thread_id,)).fetchone()
    finally:
        conn.close()
    assert row is not None
    return str(row[0]), float(row[1])


def _put_lease(db: Path, thread_id: str, owner: str, expires_in: float) -> Ledger:
    ledger = Ledger.sqlite(str(db))
    conn = sqlite3.connect(db)
    with conn:
        conn.execute("INSERT INTO graphkit_leases (thread_id, owner, expires_at) VALUES (?, ?, ?)",
                     (thread_id, owner, time.time() + expires_in))
    conn.close()
    return ledger


# ---------------------------------------------------------------------------- the token


def test_owner_token_names_this_process() -> None:
    token = new_owner()
    assert token.isprintable() and not any(c.isspace() for c in token)
    me = parse_owner(token)
    assert me is not None
    assert me.pid == os.getpid()
    assert me.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    ns = os.stat("/proc/self/ns/pid")
    assert me.pid_ns == f"{ns.st_dev}.{ns.st_ino}"
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    assert me.start == int(stat[stat.rindex(")") + 2 :].split()[19])
    assert me.host == socket.gethostname()
    assert me.token() == token

    other = parse_owner(new_owner())
    assert other is not None and other.nonce != me.nonce  # one token per lease
    assert dataclasses.replace(other, nonce=me.nonce) == me


def _stat_line(comm: str, state: str, start: int) -> str:
    """A /proc/<pid>/stat line: pid, (comm), state, fields 4 to 21, starttime (22), more."""
    return f"42 ({comm}) {state} " + " ".join(str(n) for n in range(4, 22)) + f" {start} 9 9\n"


@pytest.mark.parametrize(
    ("comm", "state", "start"),
    [("python", "S", 987), ("a) (b) c)", "R", 12345), ("sp ace ( x", "Z", 55), ("", "S", 1),
     (") 1 2 3 4 5 6 7 8 9 10 (", "D", 77)],
)
def test_stat_line_parsing_survives_odd_command_names(comm: str, state: str, start: int) -> None:
    fields = _owner._stat_fields(_stat_line(comm, state, start))
    assert fields is not None
    assert fields[0] == state
    assert int(fields[19]) == start


@pytest.mark.parametrize("line", ["", "42 python S 1", "42 ) S 1 2", "garbage"])
def test_stat_line_parsing_rejects_garbage(line: str) -> None:
    fields = _owner._stat_fields(line)
    assert fields is None or len(fields) < 20


def test_a_forked_child_gets_its_own_identity() -> None:
    me = _me()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.write(write, new_owner().encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        token = f.read()
    os.waitpid(pid, 0)
    child = parse_owner(token)
    assert child is not None
    assert child.pid == pid != me.pid
    assert child.start is not None and me.start is not None and child.start >= me.start
    assert (child.boot_id, child.pid_ns) == (me.boot_id, me.pid_ns)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "gk1",
        "x" * 500,
        "gk1:::::::",
        "gk2:45ffcb14-a593-4157-bde9-2baf88b962f9:4.1:4.2:123:456:abc:host",
        "gk1:45ffcb14-a593-4157-bde9-2baf88b962f9:4.1:4.2:0:456:abc:host",
        "gk1:45ffcb14-a593-4157-bde9-2baf88b962f9:4.1:4.2:-5:456:abc:host",
        "gk1:45ffcb14-a593-4157-bde9-2baf88b962f9:4.1:4.2:99999999999:456:abc:host",
        "gk1:45ffcb14-a593-4157-bde9-2baf88b962f9:4.1:4.2:12a:456:abc:host",
        "gk1:45ffcb14-a593-4157-bde9-2baf88b962f9:4.1:4.2:123:4x6:abc:host",
        "gk1:45ffcb14-a593-4157-bde9-2baf88b962f9:4.1:4.2:123:456::host",
        "myhost:123:0123456789abcdef0123456789abcdef",  # written by earlier versions
    ],
)
def test_unparseable_tokens_are_never_dead(token: str) -> None:
    assert parse_owner(token) is None
    assert holder_is_dead(token) is False


def test_host_may_contain_separators() -> None:
    owner = dataclasses.replace(_me(), host="a:b:c")
    assert parse_owner(owner.token()) == owner


# ---------------------------------------------------------------------------- the rules


def test_same_namespace_and_no_such_pid_is_dead() -> None:
    dead = dataclasses.replace(_me(), pid=_reaped_pid())
    assert holder_is_dead(dead.token()) is True


def test_same_pid_started_at_another_time_is_dead() -> None:
    me = _me()
    assert me.start is not None
    assert holder_is_dead(dataclasses.replace(me, start=me.start + 1).token()) is True
    assert holder_is_dead(dataclasses.replace(me, start=me.start - 1).token()) is True


def test_this_process_is_alive() -> None:
    assert holder_is_dead(new_owner()) is False


def test_other_pid_namespace_is_alive_even_when_the_pid_is_free_here() -> None:
    dead_here = dataclasses.replace(_me(), pid=_reaped_pid())
    assert holder_is_dead(dataclasses.replace(dead_here, pid_ns="4.1234").token()) is False
    assert holder_is_dead(dataclasses.replace(_me(), pid_ns="4.1234", start=1).token()) is False


def test_other_boot_is_alive() -> None:
    dead_here = dataclasses.replace(_me(), pid=_reaped_pid())
    token = dataclasses.replace(dead_here, boot_id=str(uuid.uuid4())).token()
    assert holder_is_dead(token) is False


def test_other_time_namespace_or_host_is_alive() -> None:
    dead_here = dataclasses.replace(_me(), pid=_reaped_pid())
    assert holder_is_dead(dataclasses.replace(dead_here, time_ns="4.1").token()) is False
    assert holder_is_dead(dataclasses.replace(dead_here, host="elsewhere").token()) is False


def test_parts_the_holder_could_not_read_are_never_dead() -> None:
    dead_here = dataclasses.replace(_me(), pid=_reaped_pid())
    for blind in (dataclasses.replace(dead_here, boot_id=None),
                  dataclasses.replace(dead_here, pid_ns=None),
                  dataclasses.replace(dead_here, start=None)):
        token = blind.token()
        assert f":{_owner._UNKNOWN}:" in token
        assert holder_is_dead(token) is False, token


def test_old_format_tokens_are_alive_even_for_a_free_pid_on_this_host() -> None:
    token = f"{socket.gethostname()}:{_reaped_pid()}:{uuid.uuid4().hex}"
    assert holder_is_dead(token) is False


def test_without_proc_nothing_is_dead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = dataclasses.replace(_me(), pid=_reaped_pid()).token()
    monkeypatch.setattr(_owner, "_PROC", str(tmp_path))
    _owner._forget()
    blind = parse_owner(new_owner())
    assert blind is not None
    assert (blind.boot_id, blind.pid_ns, blind.time_ns, blind.start) == (None,) * 4
    assert holder_is_dead(dead) is False
    assert holder_is_dead(new_owner()) is False


def test_permission_errors_do_not_prove_death(monkeypatch: pytest.MonkeyPatch) -> None:
    me = _me()
    assert me.start is not None

    def eperm(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "kill", eperm)
    assert holder_is_dead(me.token()) is False
    # Another user's process under a pid our holder had: the start time still tells.
    assert holder_is_dead(dataclasses.replace(me, start=me.start + 1).token()) is True

    monkeypatch.setattr(_owner, "_start_ticks", lambda pid: None)  # /proc/<pid> unreadable
    assert holder_is_dead(dataclasses.replace(me, start=me.start + 1).token()) is False


def test_a_proc_of_another_namespace_is_not_trusted_for_start_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With /proc mounted from another PID namespace, /proc/<pid> is someone else's pid."""
    me = _me()
    assert me.start is not None
    dead = dataclasses.replace(me, pid=_reaped_pid()).token()
    reused = dataclasses.replace(me, start=me.start + 1).token()
    fake = tmp_path / "proc"
    fake.mkdir()
    (fake / "sys").symlink_to("/proc/sys")
    (fake / "99999").symlink_to("/proc/self")
    (fake / "self").symlink_to("99999")  # /proc/self is not our pid: not our namespace's /proc
    monkeypatch.setattr(_owner, "_PROC", str(fake))
    _owner._forget()
    assert _me().pid_ns == me.pid_ns and _me().start == me.start  # it still reads "self"
    assert holder_is_dead(reused) is False
    assert holder_is_dead(dead) is True  # kill(2) works in our namespace whatever /proc is


def test_a_live_process_with_an_odd_name_is_alive_until_killed(tmp_path: Path) -> None:
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "Path('/proc/self/comm').write_text('a) 1 2 (b')\n"
        "from graphkit._owner import new_owner\n"
        "print(new_owner(), flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        token = proc.stdout.readline().strip()
        assert Path(f"/proc/{proc.pid}/comm").read_text().strip() == "a) 1 2 (b"
        held = parse_owner(token)
        assert held is not None and held.pid == proc.pid and held.start is not None
        assert _owner._start_ticks(str(proc.pid)) == held.start
        assert holder_is_dead(token) is False
    finally:
        proc.kill()
        proc.wait()
    assert holder_is_dead(token) is True


# ---------------------------------------------------------------------------- the ledger


def test_ledger_takes_a_dead_holders_lease_at_once(tmp_path: Path) -> None:
    dead = dataclasses.replace(_me(), pid=_reaped_pid()).token()
    ledger = _put_lease(tmp_path / "l.db", "t1", dead, expires_in=600)
    started = time.monotonic()
    with ledger.lease("t1", wait=5.0) as owner:
        assert time.monotonic() - started < 2.0
        assert _lease_row(tmp_path / "l.db", "t1")[0] == owner


@pytest.mark.parametrize("kind", ["old format", "other namespace", "other boot"])
def test_ledger_leaves_unprovable_holders_to_expiry(tmp_path: Path, kind: str) -> None:
    pid = _reaped_pid()
    dead_here = dataclasses.replace(_me(), pid=pid)
    token = {
        "old format": f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex}",
        "other namespace": dataclasses.replace(dead_here, pid_ns="4.1234").token(),
        "other boot": dataclasses.replace(dead_here, boot_id=str(uuid.uuid4())).token(),
    }[kind]
    ledger = _put_lease(tmp_path / "l.db", "t1", token, expires_in=600)
    with pytest.raises(RunBusyError), ledger.lease("t1", wait=0.3):
        pass
    assert _lease_row(tmp_path / "l.db", "t1")[0] == token


# ---------------------------------------------------------------------------- real processes


def _start_holder(command: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    owner = proc.stdout.readline().strip()
    if not owner:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the holder did not take its lease: {err}")
    return proc, owner


def test_a_sigkilled_holder_in_our_namespace_loses_its_lease_at_once(tmp_path: Path) -> None:
    db = tmp_path / "leases.db"
    holder = tmp_path / "holder.py"
    holder.write_text(HOLDER)
    ledger = Ledger.sqlite(str(db))
    proc, owner = _start_holder([sys.executable, str(holder), str(db), "deploy"])
    try:
        held = parse_owner(owner)
        assert held is not None and held.pid == proc.pid
        with pytest.raises(RunBusyError), ledger.lease("deploy", wait=0.5):
            pass  # alive: not ours to take
        assert holder_is_dead(owner) is False
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert _lease_row(db, "deploy")[0] == owner
    expires_at = _lease_row(db, "deploy")[1]

    killed = time.monotonic()
    with ledger.lease("deploy", wait=LEASE_SECONDS) as mine:
        assert time.monotonic() - killed < 3.0  # well under LEASE_SECONDS
        assert time.time() < expires_at  # taken from the dead, not after expiry
        assert _lease_row(db, "deploy")[0] == mine


def _unshare_or_skip() -> str:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("util-linux `unshare` is not installed")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "--kill-child", "true"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"the kernel refused a new PID namespace: {probe.stderr.strip()}")
    return unshare


def _free_pid() -> int:
    """A pid no process of ours has, so the holder's pid means nothing here."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    rng = random.Random()
    while True:
        pid = rng.randrange(max(300, pid_max // 2), pid_max - 10)
        try:
            os.kill(pid + 1, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            continue


def _pid_outside(pid_ns: str, pid: int) -> int:
    """The pid, as we see it, of the process that is `pid` inside namespace `pid_ns`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(entry / "ns" / "pid")
            status = (entry / "status").read_text()
        except OSError:
            continue
        if f"{ns.st_dev}.{ns.st_ino}" != pid_ns:
            continue
        nspid = next(line for line in status.splitlines() if line.startswith("NSpid:"))
        if int(nspid.split()[-1]) == pid:
            return int(entry.name)
    raise AssertionError(f"no process {pid} in namespace {pid_ns}")


def test_a_holder_in_another_pid_namespace_keeps_its_lease_until_expiry(tmp_path: Path) -> None:
    """Same host, same hostname, another PID namespace: the holder's pid is free here and that
    proves nothing. Killed, its lease is free only once it expires."""
    unshare = _unshare_or_skip()
    db = tmp_path / "leases.db"
    (tmp_path / "holder.py").write_text(HOLDER)
    (tmp_path / "init.py").write_text(NAMESPACE_INIT)
    last_pid = _free_pid()
    lease_seconds = 2.0
    command = [unshare, "--pid", "--fork", "--mount-proc", "--kill-child", sys.executable,
               str(tmp_path / "init.py"), str(last_pid), str(tmp_path / "holder.py"), str(db),
               "deploy", str(lease_seconds)]
    ledger = Ledger.sqlite(str(db))
    me = _me()
    proc, owner = _start_holder(command)
    try:
        with pytest.raises(RunBusyError), ledger.lease("deploy", wait=1.0):
            pass  # the old hostname-and-pid check would have taken it here
        assert _lease_row(db, "deploy")[0] == owner

        held = parse_owner(owner)
        assert held is not None
        assert held.pid == last_pid + 1  # a pid no process has here
        with pytest.raises(ProcessLookupError):
            os.kill(held.pid, 0)
        assert held.pid_ns != me.pid_ns  # really another namespace...
        assert (held.boot_id, held.host) == (me.boot_id, me.host)  # ...on this very host
        assert holder_is_dead(owner) is False

        outside = _pid_outside(held.pid_ns or "", held.pid)
        os.kill(outside, signal.SIGKILL)
        proc.wait(timeout=10)  # PID 1 reaped it and left
        with pytest.raises(ProcessLookupError):
            os.kill(outside, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()

    owner_then, expires_at = _lease_row(db, "deploy")
    assert owner_then == owner
    assert holder_is_dead(owner) is False  # dead, but not provably so from here
    with ledger.lease("deploy", wait=lease_seconds + 5) as mine:
        assert time.time() >= expires_at  # waited for the expiry, did not steal
        assert _lease_row(db, "deploy")[0] == mine


def test_an_execution_claim_is_a_lease_on_the_call(tmp_path: Path) -> None:
    """A call claimed by a live process elsewhere is busy; once that claim is not renewed
    (its machine died) it can be taken over, and a finished call only returns its result."""
    from graphkit._ledger import CallRow

    ledger = Ledger.sqlite(str(tmp_path / "calls.db"))
    ledger.register(calls=[CallRow(call_key="k1", thread_id="t", agent_path=["a"],
                                   tool_name="pay", args_digest="d", approval_id=None)])
    remote = "gk1:other-boot:1.2:3.4:77:99:nonce:elsewhere"
    assert ledger.start("k1", remote, holder_dead=lambda owner: False)[0] == "won"
    assert ledger.start("k1", "me", holder_dead=lambda owner: False)[0] == "busy"
    ledger._sql.execute("UPDATE graphkit_calls SET claim_expires = 0 WHERE call_key = 'k1'")
    assert ledger.start("k1", "me", holder_dead=lambda owner: False)[0] == "won"
    ledger.finish("k1", "me", {"content": "paid", "status": "success"})
    outcome, row = ledger.start("k1", "again", holder_dead=lambda owner: True)
    assert outcome == "done" and row is not None and row.outcome == {"content": "paid",
                                                                     "status": "success"}


def test_a_run_is_recorded_with_its_first_lease_and_only_then(tmp_path: Path) -> None:
    """The run registry (which thread and agent a run id names) is written in the lease's own
    transaction: a run that could not take its thread leaves no record; one that took a dead
    holder's lease is recorded as well."""
    ledger = Ledger.sqlite(str(tmp_path / "runs.db"))
    with (ledger.lease("t1", run=RunToRecord("run-1", "ops")), pytest.raises(RunBusyError),
          ledger.lease("t1", wait=0.0, run=RunToRecord("run-2", "ops"))):
        pass
    assert ledger.run("run-1") == ("t1", "ops")
    assert ledger.run("run-2") is None
    dead = dataclasses.replace(_me(), pid=_reaped_pid()).token()
    taken = _put_lease(tmp_path / "dead.db", "t2", dead, expires_in=600)
    with taken.lease("t2", wait=5.0, run=RunToRecord("run-3", "billing")):
        pass
    assert taken.run("run-3") == ("t2", "billing")
    with taken.lease("t2", run=RunToRecord("run-3", "billing")):
        pass
    with pytest.raises(GraphkitError, match="belongs to agent 'billing'"), taken.lease(
            "t2", run=RunToRecord("run-3", "someone else")):
        pass
    assert taken.run("run-3") == ("t2", "billing")  # a run id is recorded once, never moved


def test_a_run_refused_on_a_dead_holders_thread_leaves_the_lease_as_it_was(
        tmp_path: Path) -> None:
    """Another agent's run refused on a thread whose lease a dead process holds: the lease is
    not taken over (helper-22: it was, in its own statement, then kept 30 s by nobody, and
    the thread's own agent waited that long)."""
    dead = dataclasses.replace(_me(), pid=_reaped_pid()).token()
    ledger = _put_lease(tmp_path / "runs.db", "t1", dead, expires_in=600)
    with ledger.lease("t0", run=RunToRecord("run-0", "billing")):
        pass
    ledger._sql.execute("INSERT INTO graphkit_runs (run_id, thread_id, agent, created_at) "
                        "VALUES ('run-1', 't1', 'billing', 1)")
    with pytest.raises(GraphkitError, match="belongs to agent 'billing'"), ledger.lease(
            "t1", wait=5.0, run=RunToRecord("run-2", "someone else")):
        pass
    assert ledger._sql.query("SELECT owner FROM graphkit_leases WHERE thread_id = 't1'") == [
        (dead,)]
    started = time.monotonic()
    with ledger.lease("t1", wait=5.0, run=RunToRecord("run-3", "billing")):
        pass
    assert time.monotonic() - started < 2.0 and ledger.run("run-3") == ("t1", "billing")


def test_a_thread_two_agents_ran_on_before_is_its_first_agents(tmp_path: Path) -> None:
    """A database from before threads were one agent's may hold two agents' runs on one
    thread: the agent that started its first run keeps it, the other is refused, named
    right (helper-22: both were refused, each told the thread was the other's)."""
    ledger = Ledger.sqlite(str(tmp_path / "runs.db"))
    ledger._sql.execute("INSERT INTO graphkit_runs (run_id, thread_id, agent, created_at) "
                        "VALUES ('a', 't1', 'bank', 1), ('b', 't1', 'shop', 2)")
    with ledger.lease("t1", run=RunToRecord("c", "bank")):
        pass
    with pytest.raises(GraphkitError, match="belongs to agent 'bank', not 'shop'"), \
            ledger.lease("t1", run=RunToRecord("d", "shop")):
        pass
    assert ledger.current_run("t1", "bank") == "c" and ledger.run("d") is None


STALLING_RUN = """\
import sys, time
import graphkit._ledger._schema as schema

schema.LEASE_SECONDS = float(sys.argv[3])
from langchain_core.messages import AIMessage, ToolMessage
from graphkit import Agent, create_tool
from graphkit.testing import ScriptedChatModel

db, marks, flavour = sys.argv[1], sys.argv[2], sys.argv[4]

def note(what):
    with open(marks, "a") as f:
        f.write(what + "\\n")

def reply(messages):
    note("model")
    if isinstance(messages[-1], ToolMessage):
        return AIMessage("done")
    return AIMessage("", tool_calls=[{"name": "step", "args": {}, "id": "s1"}])

def step() -> str:
    \"\"\"One step.\"\"\"
    note("tool")
    print("in the tool", flush=True)
    time.sleep(1.0)  # stopped (SIGSTOP) in here
    return "stepped"

agent = Agent(name="a", model=ScriptedChatModel(reply), tools=[create_tool(step, name="step")],
              checkpointer=db)
try:
    if flavour == "async":
        import asyncio
        asyncio.run(agent.agenerate("go"))
    else:
        agent.generate("go")
except Exception as error:
    note(f"{type(error).__name__}: {error}")
    sys.exit(3)
note("finished")
"""


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_run_whose_lease_was_taken_over_while_it_stalled_stops_before_its_next_step(
        tmp_path: Path, flavour: str) -> None:
    """A process stalls (SIGSTOP: a paused VM, a swap storm) in a tool for longer than its
    thread lease; another process takes the lease over and may advance the thread. When the
    stalled process wakes, its run must not go on beside the new holder (a model turn of its
    own, its own checkpoints): it stops before its next step with RunBusyError."""
    db = tmp_path / "runs.db"
    marks = tmp_path / "marks"
    (tmp_path / "run.py").write_text(STALLING_RUN)
    lease_seconds = 1.0
    proc = subprocess.Popen([sys.executable, str(tmp_path / "run.py"), f"sqlite:///{db}",
                             str(marks), str(lease_seconds), flavour], cwd=ROOT, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "in the tool", proc.communicate()
        os.kill(proc.pid, signal.SIGSTOP)
        conn = sqlite3.connect(db)
        try:
            ((thread_id, stalled),) = conn.execute(
                "SELECT thread_id, owner FROM graphkit_leases").fetchall()
        finally:
            conn.close()
        with Ledger.sqlite(str(db)).lease(thread_id, wait=lease_seconds + 5) as mine:
            assert mine != stalled  # taken over once it expired: its holder did not renew
            written = _written(db)
            os.kill(proc.pid, signal.SIGCONT)
            proc.wait(timeout=60)
            # nor did the step it stalled in write (its result, a checkpoint) beside mine
            assert _written(db) == written
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        _, err = proc.communicate()
    said = marks.read_text().splitlines()
    assert said[:2] == ["model", "tool"], err
    assert len(said) == 3 and said[2].startswith("RunBusyError: "), (said, err)
    assert "lapsed" in said[2]
    assert proc.returncode == 3


def _written(db: Path) -> tuple[int, int]:
    """How many checkpoints and pending writes the thread's database holds."""
    conn = sqlite3.connect(db)
    try:
        return (conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0],
                conn.execute("SELECT count(*) FROM writes").fetchone()[0])
    finally:
        conn.close()


def test_a_lease_taken_over_in_the_same_process_is_told_apart_from_the_new_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run A's lease on T expires unrenewed; run B of the same process takes T. A's lease has
    lapsed and B's has not; when A ends, B's lease is still renewed, so no other process can
    take T from B while it runs (the keeper once knew one lease per thread, and A's end
    stopped B's renewals)."""
    from graphkit._ledger import _schema as schema
    from graphkit._ledger._keeper import KEEPER

    monkeypatch.setattr(schema, "LEASE_SECONDS", 0.6)
    ledger = Ledger.sqlite(str(tmp_path / "leases.db"))
    run_a = ledger.lease("T")
    a = run_a.__enter__()
    try:
        ledger._sql.execute("UPDATE graphkit_leases SET expires_at = 0")  # A stalled
        with ledger.lease("T", wait=1.0) as b:
            assert b != a
            deadline = time.monotonic() + 5
            while not KEEPER.lapsed("T", a):  # the keeper's next renewal finds it taken
                assert time.monotonic() < deadline, "A's lapsed lease was never noticed"
                time.sleep(0.05)
            assert not KEEPER.lapsed("T", b)
            run_a.__exit__(None, None, None)
            run_a = None
            time.sleep(1.5)  # more than B's lease: only renewals keep it
            assert not KEEPER.lapsed("T", b)
            assert _lease_row(tmp_path / "leases.db", "T")[0] == b
            assert not ledger._take("T", new_owner())  # nobody takes it from B
    finally:
        if run_a is not None:
            run_a.__exit__(None, None, None)


def test_a_database_that_stops_answering_lets_only_its_own_leases_lapse(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One process holds a lease on each of two databases; the first is locked by another
    connection for longer than the lease. The second's lease is still renewed, so no process
    takes it from the run that holds it (renewals of both once waited on the locked one)."""
    from graphkit._ledger import _schema as schema

    monkeypatch.setattr(schema, "LEASE_SECONDS", 0.6)
    stuck = Ledger.sqlite(str(tmp_path / "one.db"))
    healthy = Ledger.sqlite(str(tmp_path / "two.db"))
    with stuck.lease("a"), healthy.lease("b") as mine:
        blocker = sqlite3.connect(tmp_path / "one.db", isolation_level=None)
        try:
            blocker.execute("BEGIN EXCLUSIVE")
            time.sleep(2.0)  # more than three leases: only renewals keep "b"
            assert _lease_row(tmp_path / "two.db", "b")[0] == mine
            assert not healthy._take("b", new_owner())
            assert _lease_row(tmp_path / "two.db", "b")[1] > time.time()
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()


def _deploy_agent(tmp_path: Path) -> tuple[Any, list[str]]:
    """An agent on SQLite whose model deploys the api (call "c1", needing approval), then
    says "done"; with the services its tool deployed."""
    from graphkit import Agent, create_tool
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    runs: list[str] = []

    @create_tool(needs_approval=True)
    def deploy(service: str) -> str:
        """Deploy a service."""
        runs.append(service)
        return f"deployed {service}"

    agent = Agent(name="ops", tools=[deploy], checkpointer=f"sqlite:///{tmp_path / 'g.db'}",
                  model=ScriptedChatModel([turn(call("deploy", {"service": "api"}, "c1")),
                                           "done"]))
    return agent, runs


def _paused_deploy(tmp_path: Path) -> tuple[Any, Any, list[str]]:
    """An agent on SQLite whose `deploy` call is approved in the inbox, its run paused."""
    from graphkit import Inbox

    agent, runs = _deploy_agent(tmp_path)
    first = agent.generate("deploy the api")
    (item,) = Inbox(agent._storage).pending()
    Inbox(agent._storage).approve(item.id, decided_by="release-manager")
    return agent, first, runs


def test_a_call_claimed_by_a_holder_not_proven_dead_is_waited_for_never_answered(
        tmp_path: Path) -> None:
    """A process claimed the approved call and died where it cannot be proven dead (another
    host; its claim lapses a moment after its thread lease). The run resumed elsewhere found
    the call 'already running in another process', took that for the call's answer, and
    ended: the approved call never ran, and nothing waited on it any more (helper-7). Now
    the tools node waits for the claim to end (a result, or its lapse) and runs it once."""
    agent, first, runs = _paused_deploy(tmp_path)
    ledger = agent._storage.ledger
    (key,) = [r[0] for r in ledger._sql.query("SELECT call_key FROM graphkit_calls")]
    remote = "gk1:other-boot:1.2:3.4:77:99:nonce:elsewhere"  # a live holder, as seen here
    ledger._sql.execute("UPDATE graphkit_calls SET executed = ?, claim_expires = ? "
                        "WHERE call_key = ?", (remote, time.time() + 1.5, key))
    result = agent.resume(run_id=first.run_id)
    assert runs == ["api"] and result.text == "done", result


def test_a_claim_that_lapsed_before_its_tool_started_is_confirmed_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process claims a call, then stalls (paused, swapped out) before the tool starts,
    longer than the claim's lease: another process takes the call over, runs it and records
    its result. Woken, the first ran the tool again (helper-7, with SIGSTOP). Now a claim
    old enough to have lapsed is confirmed in the ledger before the tool starts: the run
    stops, the tool not started again."""
    from graphkit import _tools_node
    from graphkit._ledger import _schema

    agent, first, runs = _paused_deploy(tmp_path)
    prepare = _tools_node._prepare

    def stalled(tools: Any, task: Any, config: Any, led: Any, admitted: Any) -> Any:
        # the stall: a claim this old may have lapsed (any age, with a lease of 0 s)
        monkeypatch.setattr(_schema, "LEASE_SECONDS", 0.0)
        led._sql.execute("UPDATE graphkit_calls SET executed = 'done', outcome = ? "
                         "WHERE call_key = ?",
                         ('{"content": "deployed api", "status": "success"}', task["key"]))
        return prepare(tools, task, config, led, admitted)

    monkeypatch.setattr(_tools_node, "_prepare", stalled)
    with pytest.raises(RunBusyError, match="claim on it lapsed"):
        agent.resume(run_id=first.run_id)
    assert runs == []


def _approved_async_deploy(tmp_path: Path, seconds: float, turns: int
                           ) -> tuple[Any, Any, list[str]]:
    """An agent on SQLite whose async `deploy` (taking `seconds`) is approved in the inbox."""
    import asyncio

    from graphkit import Agent, Inbox, create_tool
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    runs: list[str] = []

    @create_tool(needs_approval=True)
    async def deploy(service: str) -> str:
        """Deploy a service."""
        runs.append(service)
        await asyncio.sleep(seconds)
        return f"deployed {service}"

    agent = Agent(name="ops", tools=[deploy], checkpointer=f"sqlite:///{tmp_path / 'g.db'}",
                  model=ScriptedChatModel([turn(call("deploy", {"service": "api"}, "c1")),
                                           *["done"] * turns]))
    first = agent.generate("deploy the api")
    (item,) = Inbox(agent._storage).pending()
    Inbox(agent._storage).approve(item.id, decided_by="release-manager")
    return agent, first, runs


def test_runs_waiting_on_a_call_hold_no_thread_its_holder_needs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight resumes of one thread at once (as a LangGraph server's runs, without a thread
    lease): one runs the 1 s call, seven wait for it. Waiting inside a pool thread, they
    filled the event loop's default pool, which the holder needs to record its result, and
    every run stalled for the whole wait (helper-8). They wait on the loop now."""
    import asyncio

    from langgraph.types import Command

    from graphkit._ledger import _schema

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 20.0)
    agent, first, runs = _approved_async_deploy(tmp_path, 1.0, 9)
    config = {"configurable": {"thread_id": first.thread_id}}

    async def resumes() -> list[Any]:
        return await asyncio.gather(*(agent.graph.ainvoke(Command(resume={}), config)
                                      for _ in range(8)), return_exceptions=True)

    outs = asyncio.run(resumes())  # (stalled, six ended in RunBusyError after the wait)
    assert runs == ["api"] and not [o for o in outs if isinstance(o, BaseException)], outs


@pytest.mark.parametrize("ending", ["the loop goes on", "asyncio.run ends"])
def test_a_run_cancelled_as_it_claims_a_call_gives_the_claim_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    """An async run cancelled while its tools node claims the call (in a worker thread):
    the claim was left to this process's keeper, renewed for as long as it lives, and every
    later resume waited on it (helper-8; helper-9 when `asyncio.run` ends on the timeout,
    cancelling every task). The claim is given back; the next resume runs the call once."""
    import asyncio

    from langgraph.types import Command

    from graphkit import _tools_node
    from graphkit._ledger import _schema

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 5.0)
    agent, first, runs = _approved_async_deploy(tmp_path, 0.0, 2)
    prepare = _tools_node._prepare

    def slow(*args: Any) -> Any:
        time.sleep(0.5)  # claimed, not yet started: the run is cancelled now
        return prepare(*args)

    monkeypatch.setattr(_tools_node, "_prepare", slow)
    config = {"configurable": {"thread_id": first.thread_id}}

    async def cancelled_then_resumed() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(agent.graph.ainvoke(Command(resume={}), config), 0.2)
        await asyncio.sleep(0.8)  # the claim is taken, and given back
        monkeypatch.setattr(_tools_node, "_prepare", prepare)
        # (waited on the claim left behind, and ended in RunBusyError after the wait)
        await agent.graph.ainvoke(Command(resume={}), config)

    if ending == "the loop goes on":
        asyncio.run(cancelled_then_resumed())
    else:
        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(asyncio.wait_for(agent.graph.ainvoke(Command(resume={}), config), 0.2))
        time.sleep(0.8)  # the claim lands in its thread, and is given back
        monkeypatch.setattr(_tools_node, "_prepare", prepare)
        agent.graph.invoke(Command(resume={}), config)
    assert runs == ["api"]


def test_a_claims_age_counts_from_its_statement(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A stall right after the claim statement, while a context tool's resume data is read:
    its age counted from after that read, so a claim that lapsed meanwhile, taken over and
    run elsewhere, looked fresh and the tool ran again (helper-8). The age counts from the
    statement: the run stops, the tool not started again."""
    from pydantic import BaseModel

    from graphkit import Agent, ToolContext, create_tool
    from graphkit._ledger import _schema
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    class City(BaseModel):
        city: str

    runs: list[str] = []

    @create_tool(resume_schema=City)
    def weather(ctx: ToolContext) -> str:
        """Weather for a city."""
        if ctx.resume_data is None:
            return ctx.suspend({"message": "Which city?"})
        runs.append(ctx.resume_data.city)
        return f"{ctx.resume_data.city}: sunny"

    agent = Agent(name="w", tools=[weather], checkpointer=f"sqlite:///{tmp_path / 'g.db'}",
                  model=ScriptedChatModel([turn(call("weather", {}, "w1")), "sunny"]))
    asked = agent.generate("weather?")
    read = Ledger.resume_values

    def stalled(self: Ledger, key: str, thread_id: str) -> Any:
        monkeypatch.setattr(_schema, "LEASE_SECONDS", 1.0)
        time.sleep(1.2)  # longer than the lease: another process runs the call meanwhile
        self._sql.execute("UPDATE graphkit_calls SET executed = 'done', outcome = ? "
                          "WHERE call_key = ?",
                          ('{"content": "Oslo: sunny", "status": "success"}', key))
        return read(self, key, thread_id)

    monkeypatch.setattr(Ledger, "resume_values", stalled)
    with pytest.raises(RunBusyError, match="claim on it lapsed"):
        agent.resume_generate({"city": "Oslo"}, run_id=asked.run_id)
    assert runs == []


def test_a_cancelled_runs_sync_tool_never_starts_after_the_cancel(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sync tool in an async run waits (in its pool thread) for a call another process
    holds; the run is cancelled. The thread went on waiting, claimed the call once free and
    ran it, a second after its run was cancelled (helper-9). It stops waiting now; the next
    resume runs the call once."""
    import asyncio

    from langgraph.types import Command

    from graphkit._ledger import _schema

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 10.0)
    agent, first, runs = _paused_deploy(tmp_path)  # (a sync tool)
    ledger = agent._storage.ledger
    (key,) = [r[0] for r in ledger._sql.query("SELECT call_key FROM graphkit_calls")]
    remote = "gk1:other-boot:1.2:3.4:77:99:nonce:elsewhere"
    ledger._sql.execute("UPDATE graphkit_calls SET executed = ?, claim_expires = ? "
                        "WHERE call_key = ?", (remote, time.time() + 1.0, key))
    config = {"configurable": {"thread_id": first.thread_id}}
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(agent.graph.ainvoke(Command(resume={}), config), 0.3))
    time.sleep(2.0)  # the other claim lapsed a second ago
    assert runs == []
    agent.graph.invoke(Command(resume={}), config)
    assert runs == ["api"]


@pytest.mark.parametrize("how", ["task.cancel()", "asyncio.run ends"])
def test_a_cancelled_async_run_holds_its_thread_until_the_sync_tool_it_started_ends(
        tmp_path: Path, how: str) -> None:
    """An async run cancelled while its approved sync tool ran (a client that went away, a
    timeout, `asyncio.run` ending with the run pending) let its thread's lease go at once,
    while the tool went on in its thread: the next run started beside the payment, and told
    the conversation its outcome was unknown while it paid (helper-96, helper-98). The
    cancelled run now ends when the tool ends."""
    import asyncio

    from langchain_core.messages import HumanMessage, ToolMessage
    from langgraph.types import Command

    from graphkit import Agent, create_tool
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    started, release = threading.Event(), threading.Event()
    paid: list[int] = []

    @create_tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Send a payment."""
        started.set()
        assert release.wait(20)
        paid.append(amount)
        return f"paid {amount}"

    def reply(messages: list[Any]) -> Any:
        if isinstance(messages[-1], HumanMessage) and messages[-1].content == "pay":
            return turn(call("pay", {"amount": 1}, "c1"))
        return f"ok: {messages[-1].content}"

    agent = Agent(name="bank", tools=[pay], model=ScriptedChatModel(reply),
                  checkpointer=f"sqlite:///{tmp_path / 'runs.db'}")
    first = agent.generate("pay")
    config: Any = {"configurable": {"thread_id": first.thread_id}}

    async def pay_then(leave: bool) -> bool:
        paying = asyncio.ensure_future(agent.graph.ainvoke(
            Command(resume={"decisions": [{"type": "approve"}]}), config))
        while not started.is_set():
            await asyncio.sleep(0.02)
        if leave:
            return False  # (`asyncio.run` cancels the run as it ends)
        paying.cancel()
        after = asyncio.ensure_future(agent.graph.ainvoke(
            {"messages": [HumanMessage("and then?")]}, config))
        await asyncio.sleep(1.0)
        went_on = after.done()
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await paying
        await after
        return went_on

    if how == "task.cancel()":
        assert asyncio.run(pay_then(False)) is False, "the next run went on beside the payment"
    else:
        ending = threading.Thread(target=lambda: asyncio.run(pay_then(True)))
        ending.start()
        assert started.wait(20)
        after = threading.Thread(target=lambda: agent.graph.invoke(
            {"messages": [HumanMessage("and then?")]}, config))
        after.start()
        after.join(1.0)
        went_on = not after.is_alive()
        release.set()
        ending.join(30)
        after.join(30)
        assert not went_on, "the next run went on beside the payment"
    told = [m.content for m in agent.graph.get_state(config).values["messages"]
            if isinstance(m, ToolMessage)]
    assert paid == [1] and told == ["paid 1"]


@pytest.mark.parametrize("flavour", ["sync run", "async run"])
def test_a_claim_is_given_back_when_anything_raises_before_its_tool_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavour: str) -> None:
    """Between a call's claim and its tool's start, something raises (a database error, a
    bug): the claim was left to this process's keeper, renewed for as long as it lived, and
    every later resume waited on it and stopped (helper-10). It is given back: the next
    resume runs the call once."""
    import asyncio

    from langgraph.types import Command

    from graphkit import _tools_node
    from graphkit._ledger import _schema

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 5.0)
    agent, first, runs = _paused_deploy(tmp_path)
    prepare = _tools_node._prepare

    def broken(*args: Any) -> Any:
        raise OSError("a transient failure")

    monkeypatch.setattr(_tools_node, "_prepare", broken)
    config = {"configurable": {"thread_id": first.thread_id}}
    with pytest.raises(OSError, match="transient"):
        if flavour == "sync run":
            agent.graph.invoke(Command(resume={}), config)
        else:
            asyncio.run(agent.graph.ainvoke(Command(resume={}), config))
    monkeypatch.setattr(_tools_node, "_prepare", prepare)
    agent.graph.invoke(Command(resume={}), config)  # (waited, and stopped in RunBusyError)
    assert runs == ["api"]


def test_an_async_tool_cancelled_before_its_body_starts_may_run_again(tmp_path: Path) -> None:
    """An async run cancelled after its call's claim, but before the tool's body started (an
    async callback's `on_tool_start` awaiting): the call was recorded "interrupted while it
    ran", and never ran (helper-10). It did not start, so its claim is given back: the next
    resume runs it once."""
    import asyncio

    from langchain_core.callbacks import AsyncCallbackHandler
    from langgraph.types import Command

    class SlowStart(AsyncCallbackHandler):
        async def on_tool_start(self, *args: Any, **kwargs: Any) -> None:
            await asyncio.sleep(0.5)

    agent, first, runs = _approved_async_deploy(tmp_path, 0.0, 2)
    config = {"configurable": {"thread_id": first.thread_id}}
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(agent.graph.ainvoke(
            Command(resume={}), {**config, "callbacks": [SlowStart()]}), 0.3))
    agent.graph.invoke(Command(resume={}), config)
    assert runs == ["api"]


def test_a_tool_subclass_that_starts_its_body_its_own_way_is_never_given_back(
        tmp_path: Path) -> None:
    """A `GraphkitTool` subclass whose `_arun` runs the body itself never says when it
    starts: a run cancelled mid-body gave its claim back, and the next resume ran the body a
    second time (helper-11). Only a tool that starts through `GraphkitTool._arun` is given
    back; this one is recorded interrupted, and ran once."""
    import asyncio

    from langchain_core.runnables import RunnableConfig
    from langgraph.types import Command

    from graphkit import Agent, GraphkitTool, Inbox, create_tool
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    runs: list[str] = []

    async def body(service: str) -> str:
        runs.append(service)  # the side effect, then the rest of the call
        await asyncio.sleep(1.0)
        return "ok"

    class Audited(GraphkitTool):
        async def _arun(self, *args: Any, config: RunnableConfig | None = None,
                        run_manager: Any = None, **kwargs: Any) -> Any:
            assert self.coroutine is not None
            return await self.coroutine(*args, **kwargs)

    made = create_tool(needs_approval=True)(body)
    tool = Audited(name="deploy", description="Deploy.", coroutine=body, func=None,
                   args_schema=made.args_schema, needs_approval=True)
    agent = Agent(name="ops", tools=[tool], checkpointer=f"sqlite:///{tmp_path / 'g.db'}",
                  model=ScriptedChatModel([turn(call("deploy", {"service": "api"}, "c1")),
                                           "done", "done"]))
    first = agent.generate("deploy the api")
    (item,) = Inbox(agent._storage).pending()
    Inbox(agent._storage).approve(item.id, decided_by="release-manager")
    config = {"configurable": {"thread_id": first.thread_id}}
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(agent.graph.ainvoke(Command(resume={}), config), 0.3))
    agent.graph.invoke(Command(resume={}), config)
    assert runs == ["api"]


def test_a_forked_child_renews_none_of_its_parents_leases(tmp_path: Path) -> None:
    """A child forked while the parent holds a lease would renew it with the parent's token
    (keeping it alive after the parent died): the child's keeper starts empty."""
    from graphkit._ledger._keeper import KEEPER

    ledger = Ledger.sqlite(str(tmp_path / "runs.db"))
    with ledger.lease("t1"):
        assert KEEPER._held
        read, write = os.pipe()
        child = os.fork()
        if child == 0:
            os.write(write, b"%d" % len(KEEPER._held))
            os._exit(0)
        os.waitpid(child, 0)
        assert os.read(read, 16) == b"0"
        assert KEEPER._held  # the parent's own are untouched


@pytest.mark.parametrize("off", ["the taker's clock ahead", "the holder's clock behind"])
def test_a_thread_lease_is_judged_by_the_databases_clock_never_a_process_clock(
        durable_url: str, monkeypatch: pytest.MonkeyPatch, off: str) -> None:
    """Thread leases were taken and renewed by each process's own clock (the queue's and the
    calls' claims by the database's): a machine whose clock ran 90 s ahead took a lease
    another held and wrote over the thread while a worker's tool ran, and the user's message
    was lost (helper-56). A process's clock now decides nothing about a lease."""
    from graphkit._storage import open_storage

    holder, taker = open_storage(durable_url).ledger, open_storage(durable_url).ledger
    real = time.time
    with holder.lease("t1") as owner:
        if off == "the holder's clock behind":
            monkeypatch.setattr(time, "time", lambda: real() - 90)
            assert holder._renew("t1", owner)
            monkeypatch.setattr(time, "time", real)
        else:
            monkeypatch.setattr(time, "time", lambda: real() + 90)
        assert not taker._take("t1", new_owner())
        with pytest.raises(RunBusyError), taker.lease("t1", wait=0.3):
            pass
    with taker.lease("t1"):  # released: free to anyone, whatever their clock
        pass


def _chat_agent(db: Path, asked: list[str]) -> Any:
    from langchain_core.messages import BaseMessage

    from graphkit import Agent
    from graphkit.testing import ScriptedChatModel

    def reply(messages: list[BaseMessage]) -> str:
        asked.append(str(messages[-1].content))
        return "hi"

    return Agent(name="chat", model=ScriptedChatModel(reply), checkpointer=f"sqlite:///{db}")


def _waits_for_a_holder_elsewhere(tmp_path: Path, db: Path, thread_id: str, door: Any,
                                  unchanged: Any) -> None:
    """`door()` run while another process holds the thread's lease: it has not gone on
    (`unchanged()`) a second later; it goes on once the holder dies."""
    (tmp_path / "holder.py").write_text(HOLDER)
    proc, _ = _start_holder([sys.executable, str(tmp_path / "holder.py"), str(db), thread_id])
    running = threading.Thread(target=door)
    try:
        running.start()
        running.join(1.0)
        assert running.is_alive() and unchanged(), "it went on beside the lease's holder"
    finally:
        proc.send_signal(signal.SIGKILL)  # (its lease is taken from the dead at once)
        proc.communicate()
    running.join(30)
    assert not running.is_alive()


@pytest.mark.parametrize("door", ["invoke", "ainvoke", "a lease key of the client's",
                                  "a task id of the client's", "inside a runnable",
                                  "thread id 0"])
def test_graph_input_given_to_the_graph_waits_for_the_threads_lease(tmp_path: Path,
                                                                    door: str) -> None:
    """LangGraph does not order a thread's runs: graph input given to the agent's graph
    directly went on beside the process holding the thread's lease (a worker paying), from
    the same checkpoint, and the later writer's checkpoints hid the other's (helper-95: the
    user's message and its answer lost). It waits for the lease now, as graphkit's doors do,
    wherever LangGraph reads the thread from: the config given, or the one a surrounding
    runnable passes down (helper-96: that run took no lease), and a thread id of 0 (read as
    "0" by the saver, as no thread by the lease: helper-96)."""
    import asyncio

    from langchain_core.messages import HumanMessage
    from langchain_core.runnables import RunnableLambda

    from graphkit._context import LEASE_KEY

    db, asked = tmp_path / "runs.db", []
    agent = _chat_agent(db, asked)
    thread_id: Any = 0 if door == "thread id 0" else "t1"
    configurable = {"thread_id": thread_id}
    if door == "a lease key of the client's":
        configurable[LEASE_KEY] = new_owner()
    if door == "a task id of the client's":  # (as if the graph ran inside another's task)
        configurable["__pregel_task_id"] = str(uuid.uuid4())
    given, config = {"messages": [HumanMessage("hello")]}, {"configurable": configurable}
    outs: list[Any] = []

    def run() -> None:
        if door == "ainvoke":
            outs.append(asyncio.run(agent.graph.ainvoke(given, config)))
        elif door == "inside a runnable":  # (the graph called without a config of its own)
            outs.append(RunnableLambda(lambda x: agent.graph.invoke(x)).invoke(given, config))
        else:
            outs.append(agent.graph.invoke(given, config))

    _waits_for_a_holder_elsewhere(tmp_path, db, str(thread_id), run, lambda: asked == [])
    assert asked == ["hello"] and outs[0]["messages"][-1].content == "hi"
    ledger = agent._storage.ledger  # given back after the run
    ledger.release_thread(str(thread_id), ledger.hold_thread(str(thread_id), wait=0.0))


def test_an_agent_a_tool_calls_runs_inside_the_callers_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's tool that calls another agent's graph without a config of its own (the
    agent-as-a-tool pattern): LangGraph runs it inside the tool's task, on the caller's
    thread, which the caller's run holds. It waited for that lease, the whole wait, and the
    caller's run failed (helper-97). It runs inside the caller's run, as before."""
    from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

    from graphkit import Agent, create_tool
    from graphkit._ledger import _schema
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 2.0)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    helper = _chat_agent(tmp_path / "runs.db", [])

    @create_tool
    def ask_helper(question: str) -> str:
        """Ask the helper agent."""
        out = helper.graph.invoke({"messages": [HumanMessage(question)]})
        return str(out["messages"][-1].content)

    def reply(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return f"helper said {messages[-1].content}"
        return turn(call("ask_helper", {"question": "q"}, "c1"))

    caller = Agent(name="caller", tools=[ask_helper], model=ScriptedChatModel(reply),
                   checkpointer=url)
    assert caller.generate("go").text == "helper said hi"


def test_async_runs_waiting_for_a_thread_leave_the_loops_pool_to_its_holder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight `agenerate` calls on a thread an async run held: each waited for the lease in a
    thread of the loop's default pool (six on two cores), which the holder needed for its
    own storage work: every run stalled for the whole wait, and most failed (helper-97).
    They wait on the loop now, and all go on in turn."""
    import asyncio
    import time as clock

    from langchain_core.messages import BaseMessage, HumanMessage

    import graphkit.agent as agent_module
    from graphkit import Agent
    from graphkit.testing import ScriptedChatModel

    monkeypatch.setattr(agent_module, "WAIT_SECONDS", 10.0)

    def reply(messages: list[BaseMessage]) -> str:
        if messages[-1].content == "slow":
            clock.sleep(0.3)
        return f"re: {messages[-1].content}"

    agent = Agent(name="chat", model=ScriptedChatModel(reply),
                  checkpointer=f"sqlite:///{tmp_path / 'runs.db'}")
    config: Any = {"configurable": {"thread_id": "t1"}}

    async def main() -> list[Any]:
        await agent.agenerate("start", thread_id="t1")
        holder = asyncio.ensure_future(
            agent.graph.ainvoke({"messages": [HumanMessage("slow")]}, config))
        await asyncio.sleep(0.05)
        waiters = [agent.agenerate(f"m{i}", thread_id="t1") for i in range(8)]
        return await asyncio.gather(holder, *waiters, return_exceptions=True)

    outs = asyncio.run(main())
    assert not [o for o in outs if isinstance(o, BaseException)], outs
    said = [m.content for m in agent.graph.get_state(config).values["messages"]
            if isinstance(m, HumanMessage)]
    assert sorted(said) == sorted(["start", "slow", *(f"m{i}" for i in range(8))])


def test_a_task_id_named_inside_a_task_is_no_way_around_the_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside a tool (a running task), a call of another agent's graph that named a thread
    held elsewhere and any task id took no lease: the nesting check asked only that both
    carried one (helper-98). Only the task LangGraph runs, on its own thread, is nested."""
    from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

    from graphkit import Agent, create_tool
    from graphkit._ledger import _schema
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 1.0)
    db, asked = tmp_path / "runs.db", []
    helper = _chat_agent(db, asked)
    forged: Any = {"configurable": {"thread_id": "t1", "__pregel_task_id": "x"}}

    @create_tool
    def ask_helper(question: str) -> str:
        """Ask the helper agent."""
        return str(helper.graph.invoke({"messages": [HumanMessage(question)]}, forged))

    def reply(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        return turn(call("ask_helper", {"question": "q"}, "c1"))

    caller = Agent(name="caller", tools=[ask_helper], model=ScriptedChatModel(reply),
                   checkpointer=f"sqlite:///{db}")
    (tmp_path / "holder.py").write_text(HOLDER)
    proc, _ = _start_holder([sys.executable, str(tmp_path / "holder.py"), str(db), "t1"])
    try:
        with contextlib.suppress(RunBusyError):  # (the tool waited, and gave up)
            caller.generate("go")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert asked == []


def test_naming_the_holders_lease_in_the_config_opens_nothing(tmp_path: Path) -> None:
    """The owner token of the lease a run holds was a bearer token: a run whose config named
    it went on beside the holder, and a run's own debug and checkpoint streams show its
    config (helper-96: a client read it from one run and sent the next with it; a tool of
    one agent passed its config to another's graph). Only the door that took the lease
    streams without taking it (`LeasedGraph.stream_held`)."""
    from langchain_core.messages import HumanMessage

    from graphkit._context import LEASE_KEY

    asked: list[str] = []
    agent = _chat_agent(tmp_path / "runs.db", asked)
    ledger = agent._storage.ledger
    owner = ledger.hold_thread("t1")  # as a run of this process holds it while it streams
    config: Any = {"configurable": {"thread_id": "t1", LEASE_KEY: owner}}
    running = threading.Thread(
        target=lambda: agent.graph.invoke({"messages": [HumanMessage("hello")]}, config))
    try:
        running.start()
        running.join(1.0)
        assert running.is_alive() and asked == [], "it went on beside the lease's holder"
    finally:
        ledger.release_thread("t1", owner)
    running.join(30)
    assert asked == ["hello"]


@pytest.mark.blocks_its_loop  # (a sync call on a loop: what a notebook cell makes)
@pytest.mark.parametrize("where", ["a notebook cell's event loop", "a thread"])
def test_a_sync_call_beside_a_run_of_this_process_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """A sync call on an event loop (a notebook cell) while a run of this process held the
    thread (a task the cell started) waited on the loop that run needed, for the whole wait,
    and then said "another process" (helper-96). It fails at once now, saying to await; a
    call that waits in a thread and gives up says the holder is a run of this process."""
    import asyncio

    from langchain_core.messages import HumanMessage

    from graphkit._ledger import _schema

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 1.0)
    asked: list[str] = []
    agent = _chat_agent(tmp_path / "runs.db", asked)
    ledger = agent._storage.ledger
    owner = ledger.hold_thread("t1")  # as a task of this process holds it while it streams
    config: Any = {"configurable": {"thread_id": "t1"}}

    async def cell() -> Any:
        return agent.graph.invoke({"messages": [HumanMessage("hello")]}, config)

    try:
        with pytest.raises(RunBusyError) as raised:
            if where == "a thread":
                agent.graph.invoke({"messages": [HumanMessage("hello")]}, config)
            else:
                asyncio.run(cell())
    finally:
        ledger.release_thread("t1", owner)
    said = str(raised.value)
    assert "of this process" in said and asked == []
    assert ("await `ainvoke`" in said) == (where != "a thread")


@pytest.mark.parametrize("door", ["update_state", "aupdate_state"])
def test_a_state_write_waits_for_the_threads_lease(tmp_path: Path, door: str) -> None:
    """A client's state write beside a run that holds the thread wrote from the checkpoint
    the run had left, and one of the two writers' checkpoints hid the other's. It waits for
    the lease as a run does."""
    import asyncio

    from langchain_core.messages import AIMessage

    db, asked = tmp_path / "runs.db", []
    agent = _chat_agent(db, asked)
    config: Any = {"configurable": {"thread_id": "t1"}}
    agent.graph.invoke({"messages": [("user", "hello")]}, config)
    values = {"messages": [AIMessage("noted")]}

    def write() -> None:
        if door == "aupdate_state":
            asyncio.run(agent.graph.aupdate_state(config, values, as_node="model"))
        else:
            agent.graph.update_state(config, values, as_node="model")

    def said() -> list[Any]:
        return [m.content for m in agent.graph.get_state(config).values["messages"]]

    _waits_for_a_holder_elsewhere(tmp_path, db, "t1", write, lambda: said() == ["hello", "hi"])
    assert said() == ["hello", "hi", "noted"]


def test_a_tool_naming_its_own_runs_thread_is_told_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool that starts a run of its own agent's graph on its own run's thread, in a config
    of its own: the lease it waits for is its caller's, which waits for the tool. It waited
    out the whole wait and failed its run, saying only that the thread was busy (its holder
    "another run"). It is told at once why; its error is the tool's, as any other."""
    from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

    from graphkit import Agent, ToolContext, create_tool
    from graphkit._ledger import _schema
    from graphkit.testing import ScriptedChatModel
    from tests.helpers import call, turn

    monkeypatch.setattr(_schema, "WAIT_SECONDS", 0.5)
    said: list[str] = []  # (the error as the tool saw it: once, with no retry)
    box: list[Agent] = []

    @create_tool
    def again(ctx: ToolContext) -> str:
        """Run the agent once more on this thread."""
        try:
            box[0].graph.invoke({"messages": [HumanMessage("inner")]},
                                {"configurable": {"thread_id": ctx.thread_id}})
        except RunBusyError as exc:
            said.append(str(exc))
            raise
        return "ran"

    def reply(messages: list[BaseMessage]) -> Any:
        if isinstance(messages[-1], ToolMessage):
            return "done"
        return turn(call("again", {}, "c1"))

    agent = Agent(name="self", tools=[again], model=ScriptedChatModel(reply),
                  checkpointer=f"sqlite:///{tmp_path / 'runs.db'}")
    box.append(agent)
    with pytest.raises(RunBusyError, match="runs inside a run of thread 't2'"):
        agent.generate("go", thread_id="t2")
    assert len(said) == 1, said


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_decision_whose_stream_gives_up_waiting_says_it_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavour: str) -> None:
    """A decision taken through the API whose stream then gave up waiting for its thread
    (another run held it) stayed recorded, but the error only said the thread was busy: a
    caller took the decision for lost, and deciding again was refused as already decided
    (helper-97). The error says the decision stays, and a resume applies it, once."""
    import asyncio

    import graphkit.agent as agent_module

    monkeypatch.setattr(agent_module, "WAIT_SECONDS", 0.3)
    agent, runs = _deploy_agent(tmp_path)
    first = agent.generate("deploy the api", thread_id="t1")
    ledger = agent._storage.ledger
    owner = ledger.hold_thread("t1")  # another run advances the thread
    method = "approve_tool_call" if flavour == "sync" else "aapprove_tool_call"
    try:
        with pytest.raises(RunBusyError, match=rf"{method}\(\) recorded its decision .* "
                                               "stays"):
            if flavour == "sync":
                agent.approve_tool_call_generate(run_id=first.run_id, tool_call_id="c1")
            else:
                asyncio.run(agent.aapprove_tool_call_generate(run_id=first.run_id,
                                                              tool_call_id="c1"))
    finally:
        ledger.release_thread("t1", owner)
    assert runs == []
    assert agent.resume(run_id=first.run_id).text == "done"
    assert runs == ["api"]
