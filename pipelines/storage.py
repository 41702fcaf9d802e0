"""The one seam between stepmark and the bytes it keeps outside the store's database.

Every data path a command takes may be a local path or a URL of any Beam filesystem (`s3://`, `gs://`, ...):
this module is where Beam's `FileSystems` is configured and called from. The clients' own environment variables
work with no flag (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, ..., `STORAGE_EMULATOR_HOST`,
`GOOGLE_APPLICATION_CREDENTIALS`); Beam's `--s3_*` and Google Cloud flags override them. `configure(beam_args)`
is called once by each command, and the same flags travel inside the pipeline's pickled DoFns
(`FileSystemsDoFn`: `settings()` on the driver, `apply()` where they are unpickled), because workers of a real
cluster are other processes that never saw the command line: Beam's DaskRunner does not hand the pipeline
options to `FileSystems` on its workers.

Publishing (schemas/storage.md): object stores have no rename, so an output is complete when its summary file
exists, and that file is written last (`summary.json` of convert-ui, `stepmark_export.json` of an export).
On a local disk an export still appears with one folder rename (`publish_folder`); in a bucket it is written
in place and its summary published it. Readers of stepmark's outputs honour the summary.

Beam is imported on first use: reading a local study spec must not pay ~1 s for it.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from pipelines.errors import StepmarkError

COPY_CHUNK = 1 << 20
#: Beam flags that change how a filesystem client is made (S3Options, GoogleCloudOptions, the Azure and
#: HDFS options): the ones that travel to workers. Everything else stays with the runner.
_FS_FLAG_PREFIXES = (
    "--s3_", "--project", "--impersonate_service_account", "--gcs_", "--enable_gcsio", "--enable_bucket",
    "--azure_", "--blob_service_endpoint", "--hdfs_",
)  # fmt: skip

_configured: tuple[str, ...] | None = None


# --- configuration ----------------------------------------------------------------------------------------------


def _filesystems() -> Any:
    """Beam's `FileSystems`, configured (from the environment alone when no command configured it)."""
    from apache_beam.io.filesystems import FileSystems

    if _configured is None:
        configure(())
    return FileSystems


def configure(beam_args: Sequence[str] = ()) -> None:
    """Build filesystem access from the command's Beam flags (and the clients' environment variables)."""
    global _configured
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    flags = tuple(a for a in beam_args if a.startswith(_FS_FLAG_PREFIXES))
    FileSystems.set_options(PipelineOptions(list(flags)))
    _configured = flags
    _reuse_s3_clients()
    _anonymous_for_gcs_emulator()


def _anonymous_for_gcs_emulator() -> None:
    """With `STORAGE_EMULATOR_HOST` set (a local GCS emulator), Beam's GCS client connects anonymously at
    once. Otherwise Beam first looks for Google credentials, retrying with backoff for ~30 s per process
    when there are none, which an emulator never needs."""
    if not os.environ.get("STORAGE_EMULATOR_HOST"):
        return
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:
        return
    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials_init = True
        auth._Credentials._credentials = None


#: Transient object-store errors seen by this process's clients (each retried by the client's own policy).
transient_errors = 0


def _reuse_s3_clients() -> None:
    """Beam's S3 filesystem makes a new boto3 session and client for every call (exists, match, open, ...):
    ~70 ms each, most of a small file's read. One client per process and settings is reused instead (boto3
    clients are thread-safe; a forked child makes its own). Each client also counts the transient errors
    (throttling, 5xx, dropped connections) that its retry policy handles: the Beam counter
    `stepmark/object_store_transient_errors` where a DoFn runs, `transient_errors` here."""
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client
    except ImportError:  # no boto3: s3:// paths fail with Beam's own message
        return
    if getattr(boto3_client, "boto3", None) is None or isinstance(boto3_client.boto3, _CachedBoto3):
        return
    boto3_client.boto3 = _CachedBoto3()


class _CachedBoto3:
    """Stands in for the `boto3` module inside Beam's S3 client module: `session.Session().client(**kw)`."""

    def __init__(self) -> None:
        self._clients: dict[tuple, Any] = {}
        self.session = self

    def Session(self) -> _CachedBoto3:  # noqa: N802 - boto3's name
        return self

    def client(self, **kwargs: Any) -> Any:
        key = (_session_key(), tuple(sorted((k, repr(v)) for k, v in kwargs.items())))
        found = self._clients.get(key)
        if found is None:
            found = _boto3_session().client(**kwargs)
            found.meta.events.register("needs-retry", _count_transient)
            self._clients[key] = found
        return found


_sessions: dict[tuple, Any] = {}


def _session_key() -> tuple:
    """A boto3 session per process and AWS environment (a forked child makes its own; changed credentials or
    endpoint in the environment make a new one: a session keeps the credentials it first found)."""
    return os.getpid(), tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))


def _boto3_session() -> Any:
    """The process's boto3 session: its first client loads the service model (~0.5 s), later ones reuse it."""
    import boto3

    key = _session_key()
    if key not in _sessions:
        _sessions[key] = boto3.session.Session()
    return _sessions[key]


def _count_transient(response: Any = None, caught_exception: Any = None, **_: Any) -> None:
    """A botocore `needs-retry` hook: counts the attempts that failed in a way the retry policy retries."""
    global transient_errors
    status = None
    if response is not None:
        status = (response[0].status_code if hasattr(response[0], "status_code") else None)
    if caught_exception is not None or (status is not None and (status >= 500 or status == 429)):
        transient_errors += 1
        from apache_beam.metrics import Metrics

        Metrics.counter("stepmark", "object_store_transient_errors").inc()


def settings() -> tuple[str, ...]:
    """The filesystem flags in force here: a DoFn keeps them and `apply`s them on its worker."""
    return _configured or ()


def apply(flags: Sequence[str]) -> None:
    """A worker's side of `settings()` (an unpickled DoFn): the driver's filesystem flags, once per process."""
    if _configured != tuple(flags):
        configure(flags)


class FileSystemsDoFn:
    """Mixin for DoFns that touch files: the driver's filesystem flags travel inside the pickled DoFn and are
    applied where it is unpickled (a worker process of any runner), before any of its methods run."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_storage_flags"] = settings()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        flags = state.pop("_storage_flags", ())
        self.__dict__.update(state)
        apply(flags)


# --- paths ------------------------------------------------------------------------------------------------------


def scheme(path: str) -> str | None:
    """The URL scheme (`s3`, `gs`, ...), or None for a local path."""
    if "://" not in path:
        return None
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.get_scheme(path)


def is_remote(path: str) -> bool:
    return scheme(path) not in (None, "file")


#: `scheme://` at the start of a value (RFC 3986 scheme): `s3://`, `gs://`, `az://`, `https://`, `hdfs://`, ...
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def local_path(value: str | os.PathLike[str], what: str, command: str, kind: str = "folder") -> Path:
    """`value` as a local Path, for an option whose files only a local disk can hold (`--data`: the SQLite
    store and recorded episodes; a spec or fields file). A URL is refused in one line naming `what` and
    `value`, before anything is made: `Path("s3://b/x")` is the local folder `s3:/b/x`, which another machine
    never sees. `file://` URLs are local paths. No Beam import: the check costs nothing."""
    text = os.fspath(value)
    if text.startswith("file://"):
        return Path(text.removeprefix("file://"))
    if _URL.match(text):
        raise StepmarkError(
            f"{what} {text}: a {kind} in a bucket or at a URL is not supported by `{command}` yet; "
            f"use a local {kind}"
        )
    return Path(text)


def join(base: str, *parts: str) -> str:
    return _filesystems().join(base, *parts)


def split(path: str) -> tuple[str, str]:
    return _filesystems().split(path)


def strip_slash(path: str) -> str:
    stripped = path.rstrip("/\\")
    return stripped or path


# --- reading and writing ----------------------------------------------------------------------------------------


def _cause(exc: BaseException) -> BaseException:
    """The error behind Beam's BeamIOError (it keeps the real one per path in `exception_details`)."""
    details = getattr(exc, "exception_details", None)
    if isinstance(details, dict) and details:
        inner = next(iter(details.values()))
        if isinstance(inner, BaseException):
            return inner
    return exc


def exists(path: str) -> bool:
    return bool(_filesystems().exists(path))


def match(pattern: str) -> list[Any]:
    """File metadata (`.path`, `.size_in_bytes`) of every file matching `pattern`; [] when none does."""
    try:
        return list(_filesystems().match([pattern])[0].metadata_list)
    except Exception as exc:  # noqa: BLE001 - Beam raises BeamIOError for "nothing matched" on some stores
        cause = _cause(exc)
        if isinstance(cause, FileNotFoundError) or "No files found" in str(exc) or "NotFound" in str(cause):
            return []
        raise


def files_below(folder: str) -> list[Any]:
    """Every file under `folder`, recursively (metadata, sorted by path)."""
    return sorted(match(join(strip_slash(folder), "**")), key=lambda m: m.path)


def open_read(path: str) -> BinaryIO:
    """A binary stream of the file's bytes as stored (no decompression guessed from the name). A local path
    must be a regular file (links to one are followed): opened non-blocking and checked once open, so a FIFO
    never makes the open or the first read wait and a link to /dev/zero is never read (StepmarkError)."""
    if is_remote(path):
        return _filesystems().open(path, compression_type="uncompressed")
    return open_regular(path.removeprefix("file://"))


def read_range(path: str, offset: int, size: int) -> bytes:
    """Bytes `offset` to `offset + size` of a file (fewer at its end), fetched as that one range: a bucket's
    buffered reader would fetch its whole buffer (16 MiB) for a read of a few kilobytes."""
    with open_read(path) as f:
        raw = getattr(f, "raw", f) if is_remote(path) else f  # Beam's DownloaderStream reads exact ranges
        raw.seek(offset)
        out = bytearray()
        while len(out) < size:
            part = raw.read(size - len(out))
            if not part:
                break
            out += part
    return bytes(out)


class NotRegularFile(StepmarkError):
    """A local path that is a FIFO, a device, a socket or a folder: never read."""

    def __init__(self, path: str, mode: int) -> None:
        super().__init__(f"{path}: {file_kind(mode)}, not a regular file: not read")
        self.mode = mode


def open_regular(local: str) -> BinaryIO:
    """A local file opened non-blocking and checked once open (a FIFO swapped in after any earlier check cannot
    make the open or the first read wait; links to regular files are followed). Raises NotRegularFile, or
    OSError (missing, a symlink loop, no permission)."""
    fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(local, mode)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages: "a FIFO", "a character device", ..."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):  # fmt: skip
        if test(mode):
            return name
    return "a special file"


# --- S3: one request where Beam's filesystem makes two or three -------------------------------------------------
# Beam's S3 filesystem asks an object's size (HEAD) before each read and writes every file as a multipart upload
# (three requests however small). Each request costs the client ~3.5 ms of CPU (signing, parsing) and the round
# trip: measured, 2,018 requests and 7.2 CPU s for a conversion that took 2.3 s from local disk. Whole small
# objects are read with one ranged GET and written with one PUT through the same boto3 client Beam uses (same
# flags, environment and retry policy); larger objects are written by that client too, as a multipart upload
# of SMALL_OBJECT-byte parts, so that a failed write can be aborted (`_SmallObjectWriter`), with Beam's
# Content-Type. Reading large files, listing, renaming, deleting and other schemes stay Beam's.
SMALL_OBJECT = 16 * 2**20
#: The Content-Type of every object written: Beam's S3 writer's (S3 itself would say binary/octet-stream).
CONTENT_TYPE = "application/octet-stream"


_data_clients: dict[tuple, Any] = {}


def _s3_for_data() -> Any | None:
    """Beam's own boto3 client for the configured flags, or None without boto3. Kept per process, settings and
    AWS environment: making it parses the flags again (~0.6 ms, on every file read)."""
    _filesystems()
    key = (_session_key(), settings())
    if key not in _data_clients:
        try:
            from apache_beam.io.aws.clients.s3 import boto3_client
            from apache_beam.options.pipeline_options import PipelineOptions
        except ImportError:
            return None
        _data_clients[key] = boto3_client.Client(PipelineOptions(list(settings()))).client
    return _data_clients[key]


def read_object(path: str, limit: int) -> bytes:
    """At most `limit` + 1 bytes of an s3:// object in one request (the caller refuses more than `limit`);
    other schemes through Beam's filesystem. FileNotFoundError for a missing object."""
    client = _s3_for_data() if scheme(path) == "s3" else None
    if client is None:
        with open_read(path) as f:
            return f.read(limit + 1)
    from botocore.exceptions import ClientError

    bucket, key = bucket_of(path)
    try:
        answer = client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{limit}")
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound"):
            raise FileNotFoundError(errno.ENOENT, "no such object", path) from None
        if code == "InvalidRange":  # an empty object
            return b""
        raise
    with contextlib.closing(answer["Body"]) as body:
        return body.read(limit + 1)


class _SmallObjectWriter(io.RawIOBase):
    """Buffers a new s3:// object; one PUT when closed, or a multipart upload of SMALL_OBJECT-byte parts once it
    outgrows SMALL_OBJECT. `abort()` publishes nothing: the buffer is dropped, a started upload is aborted, and
    the writer is closed, so that garbage collection (IOBase closes what it collects) cannot upload a partial
    object later, after its folder was cleaned up. (Beam's own S3 writer completes its upload when collected.)"""

    def __init__(self, path: str, client: Any) -> None:
        super().__init__()
        self.path, self.client, self.buffer = path, client, bytearray()
        self.bucket, self.key = bucket_of(path)
        self.upload_id: str | None = None
        self.parts: list[dict[str, Any]] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.closed:  # after abort() or close(): a later close must not publish what comes now
            raise ValueError(f"write to a closed or aborted writer of {self.path}")
        self.buffer += data
        while len(self.buffer) > SMALL_OBJECT:  # S3 parts: 5 MiB at least, but the last
            self._upload_part(bytes(self.buffer[:SMALL_OBJECT]))
            del self.buffer[:SMALL_OBJECT]
        return len(data)

    def _upload_part(self, data: bytes) -> None:
        if self.upload_id is None:
            self.upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket, Key=self.key, ContentType=CONTENT_TYPE
            )["UploadId"]
        number = len(self.parts) + 1
        answer = self.client.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=data
        )
        self.parts.append({"ETag": answer["ETag"], "PartNumber": number})

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.upload_id is None:
                self.client.put_object(
                    Bucket=self.bucket, Key=self.key, Body=bytes(self.buffer), ContentType=CONTENT_TYPE
                )
            else:
                if self.buffer:
                    self._upload_part(bytes(self.buffer))
                self.client.complete_multipart_upload(
                    Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": self.parts}
                )
        except BaseException as exc:
            try:
                self.abort()
            except Exception as abort_error:
                # The original error is the one raised. The upload then stays pending (its parts stored) until
                # a bucket lifecycle rule (AbortIncompleteMultipartUpload) removes it.
                exc.add_note(f"aborting the upload of {self.path} failed too ({abort_error!r}): it stays pending")
            raise
        finally:
            self.buffer = bytearray()
            super().close()

    def abort(self) -> None:
        """Closes the writer without publishing anything."""
        self.buffer = bytearray()
        upload_id, self.upload_id = self.upload_id, None
        try:
            if upload_id is not None:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=upload_id)
        finally:
            io.RawIOBase.close(self)


@contextlib.contextmanager
def create(path: str) -> Iterator[BinaryIO]:
    """A new file at `path` (the folder is made as needed). An OSError without a file name (a full or read-only
    disk, as a writer reports it) is re-raised naming `path`, so the command line prints one line.

    A block that fails publishes nothing, and has published nothing when the exception leaves it (so a caller
    that then removes the folder leaves it empty), and an object it was to replace stays as it was: in an S3
    bucket the object is never uploaded (an upload in parts is aborted); Beam's GCS writer cancels its upload
    when its block fails (google-cloud-storage's BlobWriter), and other remote filesystems are left to their
    writer's exit; on a local disk the partial file is deleted (opening it already emptied any file it
    replaced). A remote object is never deleted here: this write did not publish it, so whatever is at `path`
    is an older object, which a failed overwrite must keep."""
    fs = _filesystems()
    if not is_remote(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    client = _s3_for_data() if scheme(path) == "s3" else None
    if client is not None:
        out = _SmallObjectWriter(path, client)
        try:
            yield out  # type: ignore[misc]
        except BaseException:
            with contextlib.suppress(Exception):
                out.abort()
            raise
        out.close()
        return
    failed = False
    try:
        with fs.create(path, compression_type="uncompressed") as out:
            try:
                yield out
            except BaseException:
                failed = True
                raise
    except BaseException as exc:
        if failed and not is_remote(path):  # the partial file stays on disk when closed: delete it
            with contextlib.suppress(Exception):
                os.unlink(path.removeprefix("file://"))
        if not isinstance(exc, OSError) or exc.errno is None or exc.filename:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), path) from exc


def read_all(path: str, limit: int) -> bytes:
    """The whole file, refused past `limit` bytes (before reading when the size is known)."""
    if scheme(path) == "s3":
        data = read_object(path, limit)  # one request, capped
    else:
        found = match(path)
        if found and found[0].size_in_bytes > limit:
            raise StepmarkError(f"{path}: {found[0].size_in_bytes} bytes; at most {limit} are read from it")
        with open_read(path) as f:
            data = f.read(limit + 1)
    if len(data) > limit:
        raise StepmarkError(f"{path}: more than {limit} bytes; at most {limit} are read from it")
    return data


def write_bytes(path: str, data: bytes) -> None:
    with create(path) as out:
        out.write(data)


def copy_stream(src: BinaryIO, dst: BinaryIO) -> int:
    size = 0
    while chunk := src.read(COPY_CHUNK):
        dst.write(chunk)
        size += len(chunk)
    return size


def upload(local: str, dest: str) -> int:
    """Copies a local file to `dest` on any filesystem; returns its size."""
    with open(local, "rb") as src, create(dest) as out:
        return copy_stream(src, out)


def download(path: str, local: str) -> int:
    """Copies `path` (any filesystem) to the local file `local`; returns its size."""
    with open_read(path) as src, open(local, "wb") as out:
        return copy_stream(src, out)


def rename(sources: Sequence[str], destinations: Sequence[str]) -> None:
    """Moves files (a rename on local disks; a copy, then a delete of the source, on object stores)."""
    if sources:
        _filesystems().rename(list(sources), list(destinations))


def delete(paths: Sequence[str]) -> None:
    if paths:
        _filesystems().delete(list(paths))


def delete_tree(folder: str) -> None:
    """Every file under `folder`, then the folder itself where the filesystem has folders."""
    if not is_remote(folder):
        shutil.rmtree(folder, ignore_errors=True)
        return
    below = [m.path for m in files_below(folder)]
    if below:
        delete(below)


def mkdirs(path: str, what: str = "folder") -> None:
    """The folder and its parents (object stores have none: nothing to do). A one-line StepmarkError naming
    `what` when it cannot be made (a file in the way, no permission)."""
    if is_remote(path):
        return
    try:
        if os.path.lexists(path) and not os.path.isdir(path):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise StepmarkError(f"{path}: cannot create the {what} ({exc.strerror or exc})") from exc


def total_size(folder: str, skip: Sequence[str] = ()) -> int:
    """Bytes of the files under `folder`, leaving out those with a path part named in `skip`. On a local disk the
    skipped folders are not walked at all (an export's progress folder holds a file per chunk of episodes)."""
    root = strip_slash(folder)
    total = 0
    if not is_remote(root):
        local = root.removeprefix("file://")
        for parent, dirs, names in os.walk(local):
            dirs[:] = [d for d in dirs if d not in skip]
            total += sum(os.path.getsize(os.path.join(parent, n)) for n in names if n not in skip)
        return total
    for m in files_below(root):
        rel = m.path[len(root) :].replace("\\", "/").strip("/").split("/")
        if not set(skip).intersection(rel):
            total += m.size_in_bytes
    return total


@contextlib.contextmanager
def local_folder(dest: str, prefix: str = "stepmark-spool-") -> Iterator[str]:
    """A local folder whose files end up under `dest`: `dest` itself on a local disk; for an object store a
    temporary folder whose files are uploaded (same relative paths) when the block ends without an error, and
    which is removed either way. Lets libraries that only write local files (h5py, pyarrow's writer used
    with paths, TensorFlow's) write one episode or shard at a time: local space stays bounded by it."""
    if not is_remote(dest):
        os.makedirs(dest, exist_ok=True)
        yield dest
        return
    local = tempfile.mkdtemp(prefix=prefix)
    try:
        yield local
        for dirpath, _, names in os.walk(local):
            for name in sorted(names):
                full = os.path.join(dirpath, name)
                rel = os.path.relpath(full, local).replace(os.sep, "/")
                upload(full, join(dest, *rel.split("/")))
    finally:
        shutil.rmtree(local, ignore_errors=True)


# --- checks before any work ---------------------------------------------------------------------------------------


def bucket_of(url: str) -> tuple[str, str]:
    """(bucket, key prefix) of an object-store URL."""
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    return bucket, key


def check_location(url: str, *, write: bool = False) -> None:
    """One line naming `url` and the cause when its bucket cannot be reached: missing bucket, missing
    credentials, a refused connection, access denied (403). With `write`, a small object is written and
    removed under the URL's prefix too (credentials that may read but not write fail here, not midway)."""
    kind = scheme(url)
    if kind not in ("s3", "gs"):
        return
    bucket, key = bucket_of(url)
    if not bucket:
        raise StepmarkError(f"{url}: no bucket name in the URL")
    probe = f"{key.rstrip('/')}/.stepmark-probe-{uuid.uuid4().hex}".lstrip("/")
    try:
        if kind == "s3":
            _check_s3(bucket, probe if write else "")
        else:
            _check_gcs(bucket, probe if write else "")
    except StepmarkError as exc:
        raise StepmarkError(f"{url}: {exc}") from None


def _s3_client() -> Any:
    """A boto3 client made like Beam's (its --s3_* flags, else the AWS_* environment), with few retries: a
    check should answer in seconds."""
    from apache_beam.options.pipeline_options import PipelineOptions, S3Options
    from botocore.config import Config

    o = PipelineOptions(list(settings())).view_as(S3Options)
    return _boto3_session().client(
        "s3",
        aws_access_key_id=o.s3_access_key_id,
        aws_secret_access_key=o.s3_secret_access_key,
        aws_session_token=o.s3_session_token,
        endpoint_url=o.s3_endpoint_url,
        region_name=o.s3_region_name,
        use_ssl=not o.s3_disable_ssl,
        verify=o.s3_verify,
        config=Config(retries={"max_attempts": 2, "mode": "standard"}, connect_timeout=5, read_timeout=15),
    )


def _check_s3(bucket: str, probe: str) -> None:
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

    try:
        client = _s3_client()
        client.head_bucket(Bucket=bucket)
        if probe:
            client.put_object(Bucket=bucket, Key=probe, Body=b"")
            client.delete_object(Bucket=bucket, Key=probe)
    except NoCredentialsError:
        raise StepmarkError(
            "no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or "
            "--s3_access_key_id/--s3_secret_access_key)"
        ) from None
    except EndpointConnectionError as exc:
        raise StepmarkError(f"cannot connect to the S3 endpoint ({exc.kwargs.get('endpoint_url', exc)})") from None
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if code in ("404", "NoSuchBucket"):
            raise StepmarkError(f"bucket {bucket!r} does not exist") from None
        if code in ("403", "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            raise StepmarkError(f"access denied (HTTP 403, {code}): check the credentials and the bucket's policy") from None
        raise StepmarkError(f"S3 refused the request (HTTP {status}, {code})") from None
    except BotoCoreError as exc:
        raise StepmarkError(f"S3: {exc}") from None


def _check_gcs(bucket: str, probe: str) -> None:
    try:
        from apache_beam.io.gcp import gcsio
        from apache_beam.options.pipeline_options import PipelineOptions
        from google.api_core import exceptions as gexc
        from google.auth import exceptions as auth_exc
    except ImportError as exc:
        raise StepmarkError(f"the Google Cloud Storage client is not installed ({exc})") from None
    try:
        client = gcsio.create_storage_client(PipelineOptions(list(settings())))
        found = client.lookup_bucket(bucket, timeout=15)
        if found is None:
            raise StepmarkError(f"bucket {bucket!r} does not exist")
        if probe:
            blob = found.blob(probe)
            blob.upload_from_string(b"", timeout=15)
            blob.delete(timeout=15)
    except StepmarkError:
        raise
    except auth_exc.DefaultCredentialsError as exc:
        raise StepmarkError(f"no Google Cloud credentials ({exc})") from None
    except gexc.Forbidden as exc:
        raise StepmarkError(f"access denied (HTTP 403): {exc.message}") from None
    except gexc.GoogleAPICallError as exc:
        raise StepmarkError(f"Cloud Storage refused the request (HTTP {exc.code}): {exc.message}") from None
    except Exception as exc:  # noqa: BLE001 - requests' ConnectionError and the like: one line, not a trace
        raise StepmarkError(f"cannot reach Cloud Storage ({type(exc).__name__}: {exc})") from None


# --- temporary folders and publishing -------------------------------------------------------------------------------

OWNER_FILE = "stepmark_owner.json"


def process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22); "" when unknown.
    With the pid it identifies a process for good: a pid reused after a crash has another start time."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[-1].split()[19]


def pid_alive(pid: int) -> bool:
    """True if a process with this id exists on this machine (signal 0 checks without sending). Never true
    for 0 or a negative id, which `kill` reads as a process group (0: our own)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Owner:
    """Who made a temporary folder: a folder whose owner is gone is left from a killed run."""

    host: str
    pid: int
    start: str

    @classmethod
    def me(cls) -> Owner:
        pid = os.getpid()
        return cls(socket.gethostname(), pid, process_start(pid))

    def to_json(self) -> str:
        return json.dumps({"host": self.host, "pid": self.pid, "start": self.start}) + "\n"

    def alive(self) -> bool:
        """Whether the run may still be going (when unsure: yes). Another host's run cannot be checked."""
        if self.host != socket.gethostname():
            return True
        if not pid_alive(self.pid):
            return False
        start = process_start(self.pid)
        return not (start and self.start and start != self.start)


def write_owner(folder: str) -> None:
    write_bytes(join(folder, OWNER_FILE), Owner.me().to_json().encode("utf-8"))


def read_owner(folder: str, name: str = OWNER_FILE) -> Owner | None:
    """The owner recorded in `folder` (its owner file `name`), or None when it has none (or an unreadable one)."""
    path = join(folder, name)
    try:
        data = json.loads(read_all(path, 4096))
        return Owner(str(data["host"]), int(data["pid"]), str(data.get("start", "")))
    except Exception:  # noqa: BLE001 - missing or damaged: the caller decides
        return None


def publish_folder(staging: str, out: str) -> None:
    """Makes the finished local folder `staging` appear at `out` with one rename (a rename never replaces a
    non-empty folder; an `out` that appeared meanwhile is refused). A bucket has no folder rename: an output
    there is written in place and published by its summary, written last (schemas/storage.md)."""
    if is_remote(out):
        raise ValueError(f"{out}: a bucket has no folder rename; write the output in place, its summary last")
    if os.path.lexists(out):
        raise _appeared(out)
    try:
        os.rename(staging, out)
    except OSError as exc:
        if os.path.exists(out):
            raise _appeared(out) from exc
        raise


def publish_file(local: str, out: str) -> None:
    """A finished local file at `out`: a hard link (never replaces a file that appeared meanwhile) on local
    disks; one upload on object stores, where an object appears whole or not at all."""
    if is_remote(out):
        if exists(out):
            raise _appeared(out)
        upload(local, out)
        os.unlink(local)
        return
    try:
        os.link(local, out)
    except FileExistsError:
        raise _appeared(out) from None
    except OSError:  # a filesystem without hard links: check, then rename (a small window remains)
        if os.path.lexists(out):
            raise _appeared(out) from None
        os.rename(local, out)
        return
    os.unlink(local)


def _appeared(out: str) -> StepmarkError:
    return StepmarkError(f"{out}: appeared while exporting (another export to the same --out?); not overwritten")


def is_published(folder: str, summary_name: str) -> bool:
    """Whether `folder` holds a complete output (its summary file exists)."""
    return exists(join(strip_slash(folder), summary_name))
