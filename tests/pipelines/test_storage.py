"""pipelines.storage against real servers: moto's S3 server and the GCS emulator, each its own process on
127.0.0.1 (tests/object_store.py). Configuration from the clients' environment variables and from Beam's flags,
the checks before any work, the flags a DoFn carries to its worker, publishing with the summary last."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import storage
from pipelines.errors import StepmarkError
from stepmark.cli import main
from tests.object_store import Bucket, episodes_by_id, free_port

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples" / "ui"


def test_environment_variables_alone_reach_the_bucket(s3: Bucket) -> None:
    storage.configure(())
    url = s3.url("a/b.bin")
    storage.write_bytes(url, b"\x00payload")
    assert s3.get("a/b.bin") == b"\x00payload"
    assert storage.exists(url) and not storage.exists(s3.url("a/missing"))
    assert [m.path for m in storage.files_below(s3.url("a"))] == [url]
    assert storage.read_all(url, 100) == b"\x00payload"
    with pytest.raises(StepmarkError, match="at most 3"):
        storage.read_all(url, 3)


def test_beam_flags_override_the_environment(s3: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "wrong")
    flags = [f"--s3_endpoint_url={s3.server.endpoint}", "--s3_access_key_id=testing", "--s3_secret_access_key=testing"]
    storage.configure([*flags, "--runner=X"])
    assert storage.settings() == tuple(flags)  # the filesystem's flags only: the runner's stay with the runner
    storage.write_bytes(s3.url("flag.txt"), b"via flags")
    assert s3.get("flag.txt") == b"via flags"
    storage.check_location(s3.url("out"), write=True)  # the check uses the same flags


class _Probe(storage.FileSystemsDoFn):
    def __init__(self) -> None:
        self.payload = 1


def test_a_dofn_carries_the_drivers_flags_to_its_worker(s3: Bucket) -> None:
    """A worker process never saw the command line: the flags travel inside the pickled DoFn."""
    flags = [f"--s3_endpoint_url={s3.server.endpoint}"]
    storage.configure(flags)
    blob = pickle.dumps(_Probe())
    code = (
        "import pickle, sys; from pipelines import storage; "
        "fn = pickle.loads(sys.stdin.buffer.read()); "
        f"storage.write_bytes({s3.url('from-worker')!r}, repr(storage.settings()).encode())"
    )
    env = {k: v for k, v in s3.server.env.items() if k != "AWS_ENDPOINT_URL"}
    import os

    env = {**{k: v for k, v in os.environ.items() if k != "AWS_ENDPOINT_URL"}, **env, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], input=blob, env=env, check=True, cwd="/", timeout=120)
    assert s3.get("from-worker") == repr(tuple(flags)).encode()


@pytest.mark.parametrize(
    "problem",
    ["missing bucket", "refused connection", "no credentials"],
)
def test_bucket_problems_are_one_line_before_any_work(
    s3: Bucket, problem: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    source, expected = s3.url("traces"), ""
    if problem == "missing bucket":
        source, expected = "s3://no-such-bucket-here/traces", "bucket 'no-such-bucket-here' does not exist"
    elif problem == "refused connection":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
        expected = "cannot connect to the S3 endpoint"
    else:
        for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            monkeypatch.delenv(key)
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
        monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
        expected = "no AWS credentials"
    storage._configured = None
    out = tmp_path / "out"
    assert main(["convert-ui", source, str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and source in err and expected in err, err
    assert not out.exists()  # nothing started
    # The output side is checked the same way, before any work (an export to a bucket too).
    assert main(["convert-ui", str(SAMPLES), "s3://no-such-bucket-here/out", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "s3://no-such-bucket-here/out" in err


def test_a_folder_is_published_by_rename_on_disk_and_never_moved_in_a_bucket(s3: Bucket, tmp_path: Path) -> None:
    """In a bucket an output is written in place and its summary, written last, publishes it (the kill -9
    tests in test_scale_out.py check that protocol); a folder rename is for local disks only."""
    staging = tmp_path / "ds.tmp"
    staging.mkdir()
    (staging / "stepmark_export.json").write_text("{}")
    storage.publish_folder(str(staging), str(tmp_path / "ds"))
    assert (tmp_path / "ds" / "stepmark_export.json").exists() and not staging.exists()
    with pytest.raises(StepmarkError, match="appeared while exporting"):
        storage.publish_folder(str(tmp_path / "other"), str(tmp_path / "ds"))  # never replaces what is there
    with pytest.raises(ValueError, match="no folder rename"):
        storage.publish_folder(str(tmp_path / "ds"), s3.url("ds"))
    assert not s3.keys()


def test_local_folder_uploads_what_a_local_only_writer_wrote(s3: Bucket, tmp_path: Path) -> None:
    storage.configure(())
    with storage.local_folder(s3.url("spool")) as local:
        Path(local, "sub").mkdir()
        Path(local, "sub", "x.bin").write_bytes(b"x")
        Path(local, "y.bin").write_bytes(b"yy")
    assert not Path(local).exists()
    assert s3.keys("spool/") == ["spool/sub/x.bin", "spool/y.bin"]
    with pytest.raises(RuntimeError), storage.local_folder(s3.url("failed")) as local:
        Path(local, "z.bin").write_bytes(b"z")
        raise RuntimeError
    assert not s3.keys("failed/")  # a failed block uploads nothing
    with storage.local_folder(str(tmp_path / "plain")) as local:
        assert local == str(tmp_path / "plain")  # a local destination is used as it is


def test_convert_ui_from_and_to_gcs(gcs: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Beam's GCS filesystem against the emulator (google-cloud-storage honours STORAGE_EMULATOR_HOST)."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs_client

    bucket = gcs_client.Client(project="test", credentials=AnonymousCredentials()).bucket(gcs)
    for path in sorted(SAMPLES.rglob("*")):
        if path.is_file():
            bucket.blob(f"traces/{path.relative_to(SAMPLES).as_posix()}").upload_from_filename(str(path))
    assert main(["convert-ui", f"gs://{gcs}/traces", f"gs://{gcs}/episodes", "--quiet"]) == 0
    assert "converted 7 of 7 episodes" in capsys.readouterr().out
    assert main(["convert-ui", str(SAMPLES), str(tmp_path / "local"), "--quiet"]) == 0
    remote = episodes_by_id(f"gs://{gcs}/episodes", f"gs://{gcs}/traces")
    assert len(remote) == 7 and remote == episodes_by_id(str(tmp_path / "local"), str(SAMPLES))
    assert main(["convert-ui", str(SAMPLES), "gs://no-such-bucket-x/out", "--quiet"]) == 2
    assert "bucket 'no-such-bucket-x' does not exist" in capsys.readouterr().err


class _FlakyProxy:
    """An HTTP proxy on 127.0.0.1 in front of the S3 server that answers the first `failures` requests with
    503 Slow Down (as S3 does under load) and forwards everything else: a real transient error."""

    def __init__(self, target: str, failures: int) -> None:
        import http.client
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import urlsplit

        proxy = self
        self.failures, self.failed, self.forwarded = failures, 0, 0
        host = urlsplit(target).netloc

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.failed < proxy.failures:
                    proxy.failed += 1
                    payload = b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                proxy.forwarded += 1
                conn = http.client.HTTPConnection(host, timeout=30)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # A HEAD answer's length is the object's, not its (empty) body's.
                self.send_header("Content-Length", answer.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def test_transient_errors_are_retried_by_the_client_and_counted(s3: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy = _FlakyProxy(s3.server.endpoint, failures=2)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        before = storage.transient_errors
        storage.configure(())
        storage.write_bytes(s3.url("flaky.bin"), b"still whole")
        assert s3.get("flaky.bin") == b"still whole"
        assert storage.read_all(s3.url("flaky.bin"), 100) == b"still whole"
        assert proxy.failed == 2 and proxy.forwarded >= 2
        assert storage.transient_errors - before == 2
    finally:
        proxy.close()


def test_prefetch_reads_each_file_once_and_holds_a_bounded_amount_ahead() -> None:
    """files.Prefetch (convert-ui from a bucket): every file of the episode taken, each read once, local paths
    left to the converter, and no more than the window fetched or held ahead."""
    import threading

    from pipelines.traces.files import Prefetch

    reads: list[str] = []
    lock = threading.Lock()

    def read(path: str) -> bytes:
        with lock:
            reads.append(path)
        return b"x" * 100

    episodes = [tuple(f"s3://b/e{e}/f{f}" for f in range(5)) + (f"/local/e{e}",) for e in range(6)]
    with Prefetch(episodes, read, window=3) as prefetch:
        for index, paths in enumerate(episodes):
            got = prefetch.take(index)
            assert sorted(got) == sorted(paths[:5]) and all(v == b"x" * 100 for v in got.values())
            ahead = [f for files in prefetch.pending.values() for f in files.values()]
            assert len(ahead) <= 3  # the window
    assert sorted(reads) == sorted(p for paths in episodes for p in paths[:5])  # each bucket file once


def test_a_byte_range_of_a_bucket_file_is_fetched_as_that_range(s3: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """An export's workers read chunks of a few kilobytes from a work file in the bucket: each must cost its own
    bytes, not the reader's 16 MiB buffer (or the rest of the file)."""
    from apache_beam.io.aws import s3io

    storage.configure(())
    url = s3.url("work/ds.tfrecord")
    data = bytes(range(256)) * 20_000  # 5 MB
    storage.write_bytes(url, data)
    fetched: list[tuple[int, int]] = []
    original = s3io.S3Downloader.get_range

    def get_range(self, start, end):  # noqa: ANN001
        fetched.append((start, end))
        return original(self, start, end)

    monkeypatch.setattr(s3io.S3Downloader, "get_range", get_range)
    assert storage.read_range(url, 1_000_000, 4_096) == data[1_000_000:1_004_096]
    assert sum(end - start for start, end in fetched) == 4_096
    assert storage.read_range(url, len(data) - 10, 100) == data[-10:]  # at the end: what there is


def test_a_failed_write_publishes_nothing_in_a_bucket_or_on_disk(
    s3: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block that fails leaves no object and no upload in parts behind, not even once its writer is collected
    (IOBase closes what it collects: a close that uploads would publish a partial file later); a large object is
    uploaded in parts and whole. On a local disk the partial file is removed."""
    import gc

    monkeypatch.setattr(storage, "SMALL_OBJECT", 5 * 2**20)  # S3's smallest part: two parts and the rest
    part = bytes(range(256)) * (2**12)  # 1 MiB
    for name, size in (("small", 1), ("large", 12)):
        with pytest.raises(RuntimeError, match="mid-file"):
            with storage.create(s3.url(f"failed/{name}")) as out:
                for _ in range(size):
                    out.write(part)
                raise RuntimeError("mid-file")
        gc.collect()
    assert s3.keys() == []
    assert s3.server.client().list_multipart_uploads(Bucket=s3.name).get("Uploads", []) == []

    with storage.create(s3.url("whole/large")) as out:
        for _ in range(12):
            out.write(part)
    assert s3.get("whole/large") == part * 12
    assert s3.server.client().list_multipart_uploads(Bucket=s3.name).get("Uploads", []) == []

    local = tmp_path / "partial.bin"
    with pytest.raises(RuntimeError, match="mid-file"):
        with storage.create(str(local)) as out:
            out.write(part)
            raise RuntimeError("mid-file")
    assert not local.exists()


def test_a_failed_overwrite_keeps_the_object_it_was_to_replace(
    gcs: str, s3: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`stepmark copy --overwrite` whose source fails midway: the object already in the bucket stays as it was,
    on GCS (the emulator: Beam's writer cancels its upload when the block fails, so deleting `path` afterwards
    deleted the old object) and on S3 (nothing is uploaded), small or past one upload chunk. A failed write to
    a new local file leaves no file."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs_client

    monkeypatch.setattr(storage, "SMALL_OBJECT", 5 * 2**20)  # S3: the large write is a multipart upload
    bucket = gcs_client.Client(project="test", credentials=AnonymousCredentials()).bucket(gcs)
    part = bytes(range(256)) * (2**12)  # 1 MiB
    for size in (1, 20):  # 20 MiB: past Beam's 16 MiB GCS chunk, so an upload was started
        bucket.blob(f"kept-{size}").upload_from_string(b"ORIGINAL")
        s3.put(f"kept-{size}", b"ORIGINAL")
        for url in (f"gs://{gcs}/kept-{size}", s3.url(f"kept-{size}")):
            with pytest.raises(OSError, match="source read failed"):
                with storage.create(url) as out:
                    for _ in range(size):
                        out.write(part)
                    raise OSError("source read failed")
        assert bucket.blob(f"kept-{size}").download_as_bytes() == b"ORIGINAL"
        assert s3.get(f"kept-{size}") == b"ORIGINAL"
    assert s3.server.client().list_multipart_uploads(Bucket=s3.name).get("Uploads", []) == []
    storage.write_bytes(f"gs://{gcs}/kept-1", b"NEW")  # a write that ends well replaces it
    assert bucket.blob("kept-1").download_as_bytes() == b"NEW"

    local = tmp_path / "new" / "file.bin"
    with pytest.raises(OSError, match="source read failed"):
        with storage.create(str(local)) as out:
            out.write(part)
            raise OSError("source read failed")
    assert not local.exists()


class _FailingCalls:
    """The real boto3 client of the S3 loopback, with some of its calls failing as a lost connection would."""

    def __init__(self, client: object, failing: set[str]) -> None:
        self.client, self.failing = client, failing

    def __getattr__(self, name: str) -> object:
        if name in self.failing:

            def fail(**_: object) -> None:
                raise ConnectionError(f"injected: {name} failed")

            return fail
        return getattr(self.client, name)


def test_a_failed_completion_raises_its_own_error_and_a_closed_writer_takes_no_more(
    s3: Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Completing a multipart upload fails, and aborting it fails too: the error raised is the completion's (the
    abort's is a note on it: the upload stays pending for the bucket's lifecycle rule), not the abort's. A
    writer aborted or closed refuses further writes (ValueError), so nothing written after reaches the bucket."""
    monkeypatch.setattr(storage, "SMALL_OBJECT", 5 * 2**20)
    part = bytes(range(256)) * (2**12)  # 1 MiB
    real = storage._s3_for_data()
    failing = _FailingCalls(real, {"complete_multipart_upload", "abort_multipart_upload"})
    monkeypatch.setattr(storage, "_s3_for_data", lambda: failing)
    with pytest.raises(ConnectionError, match="complete_multipart_upload failed") as info:
        with storage.create(s3.url("big")) as out:
            for _ in range(12):
                out.write(part)
    assert any("abort_multipart_upload failed" in note and "stays pending" in note for note in info.value.__notes__)
    pending = real.list_multipart_uploads(Bucket=s3.name).get("Uploads", [])
    assert [u["Key"] for u in pending] == ["big"] and s3.keys() == []
    real.abort_multipart_upload(Bucket=s3.name, Key="big", UploadId=pending[0]["UploadId"])

    monkeypatch.setattr(storage, "_s3_for_data", lambda: real)
    for finish in ("abort", "close"):
        writer = storage._SmallObjectWriter(s3.url(f"after-{finish}"), real)
        writer.write(b"before")
        getattr(writer, finish)()
        with pytest.raises(ValueError, match="closed or aborted"):
            writer.write(b"after")
        writer.close()
    assert s3.keys() == ["after-close"] and s3.get("after-close") == b"before"


def test_objects_are_written_with_beams_content_type(s3: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    """One PUT or a multipart upload, an object gets the Content-Type Beam's own S3 writer gives it
    (application/octet-stream), not S3's default (binary/octet-stream)."""
    monkeypatch.setattr(storage, "SMALL_OBJECT", 5 * 2**20)
    part = bytes(range(256)) * (2**12)  # 1 MiB
    with storage._filesystems().create(s3.url("by-beam"), compression_type="uncompressed") as out:
        out.write(part)
    for name, size in (("small", 1), ("large", 12)):
        with storage.create(s3.url(name)) as out:
            for _ in range(size):
                out.write(part)
    client = s3.server.client()
    types = {key: client.head_object(Bucket=s3.name, Key=key)["ContentType"] for key in s3.keys()}
    assert types == {"by-beam": "application/octet-stream", "large": "application/octet-stream",
                     "small": "application/octet-stream"}  # fmt: skip
