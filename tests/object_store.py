"""Real object stores and a real cluster for tests (pytest plugin module, registered in tests/conftest.py).

Nothing here is an in-process mock: each server is its own process on 127.0.0.1, reached over HTTP by the same
clients a user's bucket is reached by.
- `s3_server` (session): moto's standalone S3 server (`python -m moto.server`); `.env` are the standard AWS
  variables that point boto3 at it.
- `s3` (function): a fresh bucket, with the AWS variables set in this process for the test (`.url(key)`).
- `gcs_server` (session) / `gcs` (function): the `gcp-storage-emulator` server, reached by
  google-cloud-storage through `STORAGE_EMULATOR_HOST`.
- `dask_cluster` (session): `dask scheduler` and two `dask worker` processes, each started in its own empty
  folder (no shared local path), each its own process group. Workers get AWS credentials but no endpoint:
  tests pass `--s3_endpoint_url`, so a run proves that Beam's S3 flags travel to the workers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
AWS_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, log: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}: {log.read_text(errors='replace')[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s: {log.read_text(errors='replace')[-2000:]}")


def start(args: list[str], folder: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A server process in its own folder and process group, its output in `folder/log`."""
    folder.mkdir(parents=True, exist_ok=True)
    log = open(folder / "log", "wb")  # noqa: SIM115 - kept open for the process's life
    return subprocess.Popen(
        args, cwd=folder, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        env=env if env is not None else os.environ.copy(), start_new_session=True,
    )  # fmt: skip


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@dataclass
class S3Server:
    endpoint: str
    proc: subprocess.Popen
    log: Path  # the server's request log: one line per request ("GET /bucket/key ...")

    @property
    def env(self) -> dict[str, str]:
        return {**AWS_CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def client(self):  # noqa: ANN201
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")  # fmt: skip


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    pytest.importorskip("moto.server")
    port = free_port()
    folder = tmp_path_factory.mktemp("moto")
    proc = start([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], folder)
    try:
        wait_for_port(port, proc, folder / "log")
        yield S3Server(f"http://127.0.0.1:{port}", proc, folder / "log")
    finally:
        stop(proc)


@dataclass
class Bucket:
    name: str
    server: S3Server

    def url(self, key: str = "") -> str:
        return f"s3://{self.name}/{key}".rstrip("/")

    def keys(self, prefix: str = "") -> list[str]:
        client = self.server.client()
        found: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.name, Prefix=prefix):
            found += [o["Key"] for o in page.get("Contents", [])]
        return sorted(found)

    def get(self, key: str) -> bytes:
        return self.server.client().get_object(Bucket=self.name, Key=key)["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        self.server.client().put_object(Bucket=self.name, Key=key, Body=data)

    def upload_tree(self, local: Path, prefix: str) -> int:
        """Every file under `local` (links followed) to `prefix/<relative path>`; returns the count."""
        count = 0
        for path in sorted(local.rglob("*")):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(local).as_posix()}", path.read_bytes())
                count += 1
        return count


def _reset_storage() -> None:
    """Later commands configure filesystem access again from the environment they see."""
    from pipelines import storage

    storage._configured = None


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bucket]:
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    _reset_storage()
    bucket = Bucket(f"test-{uuid.uuid4().hex[:12]}", s3_server)
    s3_server.client().create_bucket(Bucket=bucket.name)
    yield bucket
    _reset_storage()


@dataclass
class GcsServer:
    host: str
    proc: subprocess.Popen


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GcsServer]:
    script = BIN / "gcp-storage-emulator"
    if not script.exists():
        pytest.skip("gcp-storage-emulator is not installed")
    port = free_port()
    folder = tmp_path_factory.mktemp("gcs")
    proc = start([str(script), "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory"], folder)
    try:
        wait_for_port(port, proc, folder / "log")
        yield GcsServer(f"http://127.0.0.1:{port}", proc)
    finally:
        stop(proc)


@pytest.fixture
def gcs(gcs_server: GcsServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh bucket on the emulator; its name."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs_client

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.host)
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # google-auth would probe the GCE metadata address otherwise
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    _reset_storage()
    name = f"test-{uuid.uuid4().hex[:12]}"
    gcs_client.Client(project="test", credentials=AnonymousCredentials()).create_bucket(name)
    yield name
    _reset_storage()


@dataclass
class DaskCluster:
    address: str
    folders: list[Path]
    procs: list[subprocess.Popen]

    def runner_flags(self, s3: S3Server | None = None) -> list[str]:
        flags = [
            "--runner=apache_beam.runners.dask.dask_runner.DaskRunner",
            f"--dask_client_address={self.address}",
        ]
        if s3 is not None:
            flags += [f"--s3_endpoint_url={s3.endpoint}", "--s3_access_key_id=testing",
                      "--s3_secret_access_key=testing", "--s3_region_name=us-east-1"]  # fmt: skip
        return flags


def start_dask_cluster(root: Path, workers: int, env: dict[str, str]) -> DaskCluster:
    port = free_port()
    scheduler = root / "scheduler"
    procs = [
        start([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
              scheduler, env)  # fmt: skip
    ]
    try:
        wait_for_port(port, procs[0], scheduler / "log")
        folders = [scheduler]
        for i in range(workers):
            folder = root / f"worker-{i}"
            folders.append(folder)
            procs.append(
                start([str(BIN / "dask"), "worker", f"tcp://127.0.0.1:{port}", "--nthreads", "1",
                       "--nworkers", "1", "--local-directory", str(folder), "--no-dashboard"], folder, env)  # fmt: skip
            )
        from distributed import Client

        with Client(f"tcp://127.0.0.1:{port}", timeout=60) as client:
            client.wait_for_workers(workers, timeout=120)
    except BaseException:
        for proc in procs:
            stop(proc)
        raise
    return DaskCluster(f"tcp://127.0.0.1:{port}", folders, procs)


@pytest.fixture(scope="session")
def dask_cluster() -> Iterator[DaskCluster]:
    pytest.importorskip("distributed")
    root = Path(tempfile.mkdtemp(prefix="stepmark-dask-"))
    # The workers' environment: credentials, no endpoint (tests pass --s3_endpoint_url), nothing of the
    # test process's working folder (each worker runs in its own folder).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "STORAGE_EMULATOR"))}
    env.update({k: v for k, v in AWS_CREDENTIALS.items()})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH")) if p)
    cluster = start_dask_cluster(root, 2, env)
    try:
        yield cluster
    finally:
        for proc in reversed(cluster.procs):
            stop(proc)


def episodes_by_id(output: str, input_prefix: str) -> dict[str, str]:
    """A convert-ui output's records as JSON text by episode id, with INPUT's spelling replaced by "INPUT":
    records name the files they came from (debug paths, provenance), so runs over the same traces in two
    places compare record for record."""
    from google.protobuf import json_format

    from pipelines import ui_records

    return {
        e.episode_id: json_format.MessageToJson(e, sort_keys=True).replace(input_prefix.rstrip("/"), "INPUT")
        for e in ui_records.iter_episodes(output)
    }
