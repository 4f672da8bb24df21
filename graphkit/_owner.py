"""Lease owner tokens that name a process durably, and the one test that proves a holder dead.

A hostname and a pid do not name a process: containers share hostnames without sharing a PID
namespace (the same pid is another process, or none, over there), and pids are reused. A token
here records what does: the boot (``/proc/sys/kernel/random/boot_id``), the PID namespace
(and the time namespace, which shifts the start times ``/proc`` reports), the pid, and the
process's start time in clock ticks since boot. A holder is dead only when all of that can be
checked from here and the check fails; any doubt leaves the lease to its expiry.

Format (one printable line, ``:``-separated, the hostname last so it may contain anything)::

    gk1:<boot_id>:<pidns dev>.<pidns ino>:<timens ino>:<pid>:<start ticks>:<nonce>:<host>

A part this process could not read is ``-``; such a token is never declared dead.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass

__all__ = ["Owner", "holder_is_dead", "new_owner", "parse_owner"]

_VERSION = "gk1"
_UNKNOWN = "-"
_PROC = "/proc"
"""Where procfs is mounted; a module global so tests can point it elsewhere."""
_PID_LIMIT = 1 << 22
"""Linux never hands out a pid at or above this (``PID_MAX_LIMIT`` on 64-bit)."""


@dataclass(frozen=True)
class Owner:
    """The parsed parts of a token; ``None`` where the writer could not read them."""

    boot_id: str | None
    pid_ns: str | None
    time_ns: str | None
    pid: int
    start: int | None
    nonce: str
    host: str

    def token(self) -> str:
        """The one-line form `parse_owner` reads back."""
        parts = (_VERSION, self.boot_id, self.pid_ns, self.time_ns, self.pid, self.start,
                 self.nonce, _printable(self.host))
        return ":".join(map(_field, parts))


@dataclass
class _Self:
    """This process's identity: everything in a token but the nonce."""

    boot_id: str | None
    pid_ns: str | None
    time_ns: str | None
    pid: int
    start: int | None
    host: str
    prefix: tuple[str, str] | None = None
    """A token's text before and after the nonce, made once."""


_cached: _Self | None = None


def _forget() -> None:
    """Read this process's identity again, now (tests that point `_PROC` elsewhere)."""
    global _cached
    _cached = None
    _self()


# A forked child is another process: recompute. (The pid check in _self() covers this too,
# except when a descendant happens to get back the pid of the process that filled the cache.)
os.register_at_fork(after_in_child=_forget)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def _ns(kind: str) -> str | None:
    """``dev.ino`` of this process's namespace of `kind`: equal exactly when it is the same
    namespace (on the same boot)."""
    try:
        st = os.stat(f"{_PROC}/self/ns/{kind}")
    except (OSError, ValueError):
        return None
    return f"{st.st_dev}.{st.st_ino}"


def _stat_fields(text: str) -> list[str] | None:
    """The fields of a ``/proc/<pid>/stat`` line after ``comm``, so the state is index 0.

    ``comm`` is in parentheses and may itself contain spaces and parentheses; it is the only
    free-form field, so the last ``)`` closes it.
    """
    head, paren, tail = text.rpartition(")")
    if not paren or "(" not in head:
        return None
    return tail.split()


def _start_ticks(pid: str) -> int | None:
    """Field 22 of ``/proc/<pid>/stat``: the start time in clock ticks since boot."""
    text = _read(f"{_PROC}/{pid}/stat")
    fields = None if text is None else _stat_fields(text)
    if fields is None or len(fields) < 20 or not fields[19].isdigit():
        return None
    return int(fields[19])


def _boot_id() -> str | None:
    text = _read(f"{_PROC}/sys/kernel/random/boot_id")
    if text is None:
        return None
    value = text.strip()
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def _self() -> _Self:
    """This process's identity, read once per process (and again after a fork): as the
    module is imported, never first in a call that may run on an event loop (an async door
    names its lease's owner there; reading /proc would be a blocking call)."""
    global _cached
    pid = os.getpid()
    if _cached is None or _cached.pid != pid:
        _cached = _Self(boot_id=_boot_id(), pid_ns=_ns("pid"), time_ns=_ns("time"), pid=pid,
                        start=_start_ticks("self"), host=socket.gethostname())
    return _cached


def _field(part: object) -> str:
    return _UNKNOWN if part is None else str(part)


def _printable(host: str) -> str:
    return "".join(c if c.isprintable() and not c.isspace() else "?" for c in host) or "?"


def new_owner() -> str:
    """A fresh token for one lease held by this process (the nonce tells leases apart)."""
    me = _self()
    if me.prefix is None:
        head = (_VERSION, me.boot_id, me.pid_ns, me.time_ns, me.pid, me.start)
        me.prefix = (":".join(map(_field, head)) + ":", ":" + _printable(me.host))
    return uuid.uuid4().hex.join(me.prefix)


def parse_owner(token: str) -> Owner | None:
    """The parts of a token written by `new_owner`; None for anything else (including the
    ``host:pid:uuid`` tokens of earlier versions, which cannot be proven dead)."""
    parts = token.split(":", 7)
    if len(parts) != 8 or parts[0] != _VERSION:
        return None
    _, boot, pid_ns, time_ns, pid, start, nonce, host = parts
    if not pid.isdigit() or not 0 < int(pid) < _PID_LIMIT:
        return None
    if start != _UNKNOWN and not start.isdigit():
        return None
    if not nonce:
        return None

    def known(value: str) -> str | None:
        return None if value == _UNKNOWN else value

    return Owner(boot_id=known(boot), pid_ns=known(pid_ns), time_ns=known(time_ns),
                 pid=int(pid), start=None if start == _UNKNOWN else int(start), nonce=nonce,
                 host=host)


def _procfs_is_ours(me: _Self) -> bool:
    """Whether ``/proc/<pid>`` means a pid of our own namespace (``/proc`` may be mounted from
    another PID namespace, e.g. a container given the host's ``/proc``)."""
    try:
        return os.readlink(f"{_PROC}/self") == str(me.pid)
    except (OSError, ValueError):
        return False


def _exists(pid: int) -> bool | None:
    """Whether a process `pid` exists in our PID namespace; None when we cannot tell."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    except OSError:
        return None
    return True


def holder_is_dead(owner: str) -> bool:
    """True only when the process that wrote `owner` provably no longer runs.

    That takes the same boot and the same PID namespace (and time namespace, and hostname) as
    ours, known start times, and then either no process with that pid or one that started at
    another time (the pid was reused). Anything else is False: only the lease's expiry frees
    it.
    """
    held = parse_owner(owner)
    me = _self()
    if held is None or held.start is None:
        return False
    if me.boot_id is None or me.pid_ns is None or me.start is None:
        return False
    # The time namespace is absent (None on both sides) on kernels before 5.6. The hostname
    # adds nothing on one machine, but guards against clones of one VM snapshot, which share
    # the boot id and namespace inodes.
    if (held.boot_id, held.pid_ns, held.time_ns, held.host) != (
            me.boot_id, me.pid_ns, me.time_ns, _printable(me.host)):
        return False
    exists = _exists(held.pid)
    if exists is None:
        return False
    if not exists:
        return True
    if not _procfs_is_ours(me):
        return False
    start = _start_ticks(str(held.pid))
    if start is None:  # gone in between, or hidden from us (hidepid): ask once more
        return _exists(held.pid) is False
    return start != held.start


_self()
