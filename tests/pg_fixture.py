"""A throwaway PostgreSQL server for tests (pytest plugin module).

Register it once for the whole suite with `pytest_plugins = ["tests.pg_fixture"]` in the root
`tests/conftest.py`; until then a package conftest can `from tests.pg_fixture import postgres_server, pg_url`.
Either way there is one server per test process (a module-level singleton), started on first use:
`initdb` into a temporary folder, `pg_ctl start` on a free port (127.0.0.1 only, socket in the folder), stopped
and deleted when the process exits. PostgreSQL refuses to run as root, so as root (CI) the folder is handed to
the `postgres` OS user (created by `apt install postgresql`) and the tools run through `runuser`.

Fixtures:
- `postgres_server` (session): the `PostgresServer` (`.url(dbname)`, `.create_database()`, `.drop_database()`).
- `pg_url` (function): a fresh empty database for one test, dropped afterwards; its SQLAlchemy URL.
"""

from __future__ import annotations

import atexit
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


def _bindir() -> Path:
    """The PostgreSQL server binaries (not on PATH on Debian); newest version first."""
    if env := os.environ.get("STEPMARK_PG_BINDIR"):
        return Path(env)
    for candidate in sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True
    ):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise RuntimeError(
        "PostgreSQL server binaries not found: apt-get install -y postgresql (or set STEPMARK_PG_BINDIR)"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One initdb'd cluster, started on a free port; trust authentication for the `postgres` role."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="stepmark-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.root, user="postgres", group="postgres")
        self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"
        )  # fmt: skip
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")
        self.running = True

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, cwd=self.root)
        if result.returncode != 0:
            log = self.root / "log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{tool} failed ({result.returncode}): {result.stderr or result.stdout}\n{tail}"
            )

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres") as conn:
            conn.autocommit = True
            conn.execute(sql)

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:16]}"
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.running:
            self.running = False
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            finally:
                shutil.rmtree(self.root, ignore_errors=True)


_server: PostgresServer | None = None


def get_server() -> PostgresServer:
    """The process's server, started on first call and stopped at exit."""
    global _server
    if _server is None:
        _server = PostgresServer()
        atexit.register(_server.stop)
    return _server


@pytest.fixture(scope="session")
def postgres_server() -> PostgresServer:
    try:
        return get_server()
    except RuntimeError as exc:  # installable, so a failure, not a skip
        pytest.fail(f"cannot start PostgreSQL for the tests: {exc}")


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> Iterator[str]:
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)
