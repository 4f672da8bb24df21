"""A throwaway PostgreSQL server for the tests: Debian's binaries, a temporary data directory,
a free loopback port. Started once per test session, stopped at its end; never assumed to be
running already."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BIN_GLOB = "/usr/lib/postgresql/*/bin"
MISSING = (
    "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin; install Debian's "
    "package with `apt-get install -y postgresql` (make test and .ci/run do this)"
)


def _bin_dir() -> Path:
    found = sorted(glob.glob(BIN_GLOB), key=lambda p: int(Path(p).parent.name))
    if not found:
        raise RuntimeError(MISSING)
    return Path(found[-1])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """`start()` gives a URL; `stop()` shuts the server down and removes its files."""

    def __init__(self, *, durable: bool = False) -> None:
        """`durable`: keep PostgreSQL's defaults (`fsync`, `synchronous_commit` and
        `full_page_writes` on), as a production server does, for the benchmarks; the tests'
        server turns them off, for speed."""
        self.bin = _bin_dir()
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix="graphkit-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user: str | None = None
        if os.geteuid() == 0:  # initdb refuses to run as root: run the server as postgres
            self.user = "postgres"
            shutil.chown(self.root, self.user, self.user)
            self.root.chmod(0o755)

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            msg = f"{args[0]} failed ({done.returncode}): {done.stderr or done.stdout}"
            raise RuntimeError(msg)

    def start(self) -> str:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust",
                  "--no-sync", "-E", "UTF8")
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c max_connections=200")
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "server.log"), "-w", "-t", "60", "start")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(f"postgresql://postgres@127.0.0.1:{self.port}/postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
