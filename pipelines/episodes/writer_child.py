"""The episode writer child process (see `writer_process.py`): envlogger's Riegeli writer fed by a pipe.

Run by path (`python writer_child.py`), so it imports only the standard library and envlogger.
Frames on stdin: `kind (1 byte) + length (uint32 LE) + payload`; kinds O (open: JSON header
{"folder", "options"}, NUL, serialized metadata Data), F/S (first/next step: serialized `storage_pb2.Data`),
M (episode metadata Data), C (close), A (abort), Q (quit). C and A are answered on stdout with K (done)
or E + the error text (the first failure of that episode: a refused open or step).
End of file on stdin means the recording process died (or was killed): the episode being written is closed
as it stands, so its files hold every step received and recovery registers it as ABANDONED; then exit.
The open episode is flushed once every FLUSH_SECONDS, so a child killed too (a process group's SIGKILL, the
OOM killer) leaves the steps up to its last flush readable (`envlogger_store.salvage`).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import struct
import sys
import time
from typing import Any, BinaryIO

HEADER = struct.Struct("<cI")
FLUSH_SECONDS = 1.0  # envlogger_store.FLUSH_SECONDS (not imported: this process loads envlogger only)


def read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size) if size else b""
    if len(data) < size:
        raise EOFError
    return data


def _reply(out: BinaryIO, kind: bytes, text: str = "") -> None:
    body = text.encode("utf-8")
    out.write(HEADER.pack(kind, len(body)) + body)
    out.flush()


def _load_envlogger() -> tuple[Any, Any]:
    """envlogger's Riegeli writer and storage proto, without running `envlogger/__init__.py`.

    That file imports the whole logging API (numpy, dm_env, ...): 120 ms of the child's start that the
    writer never uses. The package is registered bare (its path only) so just the two modules load;
    if that fails for any reason, the normal import is used.
    """
    import importlib.util
    import types

    try:
        if "envlogger" not in sys.modules:
            spec = importlib.util.find_spec("envlogger")
            if spec is None or not spec.submodule_search_locations:
                raise ImportError("envlogger not found")
            package = types.ModuleType("envlogger")
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__ = spec
            sys.modules["envlogger"] = package
        from envlogger.backends.python import riegeli_dataset_writer
        from envlogger.proto import storage_pb2
    except ImportError:
        for name in [m for m in sys.modules if m == "envlogger" or m.startswith("envlogger.")]:
            del sys.modules[name]
        from envlogger.backends.python import riegeli_dataset_writer
        from envlogger.proto import storage_pb2
    return riegeli_dataset_writer, storage_pb2


def _orphaned(writer: Any) -> None:
    """The recording process is gone (end of file): close the open episode's files so the steps received are
    readable (recovery registers them as ABANDONED), then exit at once."""
    if writer is not None:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - nothing to report to: the parent is gone
            pass
    os._exit(3)


def _disk_problem(folder: str) -> str:
    """Why Riegeli could not write into `folder`, as Python words an OSError (`[Errno 28] No space left on
    device: '<folder>'`, which the command line turns into its one error line), or "" when the disk is not
    full nor read-only: Riegeli's writer reports only that it failed."""
    try:
        st = os.statvfs(folder)
    except OSError as exc:
        return f" ([Errno {exc.errno}] {exc.strerror}: {folder!r})"
    if st.f_flag & os.ST_RDONLY:
        number = errno.EROFS
    elif st.f_bavail * st.f_frsize < 1 << 20:
        number = errno.ENOSPC
    else:
        return ""
    return f" ([Errno {number}] {os.strerror(number)}: {folder!r})"


def serve(stdin: BinaryIO, stdout: BinaryIO) -> int:
    """The child's loop: one envlogger dataset writer at a time, driven by the frames on stdin."""
    # Fatal messages only: a failed Riegeli write logs the whole step record (megabytes of proto text) at ERROR;
    # every failure here is reported to the recorder instead, with the errno (`_disk_problem`).
    os.environ["GLOG_minloglevel"] = "3"
    riegeli_dataset_writer, storage_pb2 = _load_envlogger()

    parse = storage_pb2.Data.FromString
    writer: Any = None
    folder = ""
    error = ""  # the first failure of the current episode, reported on its close
    flushed = time.monotonic()
    while True:
        header = stdin.read(HEADER.size)
        if len(header) < HEADER.size:
            _orphaned(writer)
        kind, size = HEADER.unpack(header)
        try:
            payload = read_exactly(stdin, size)
        except EOFError:
            _orphaned(writer)
        if kind in (b"F", b"S"):
            if writer is not None and not error:
                try:
                    if not writer.add_step(parse(payload), kind == b"F"):
                        error = "envlogger failed to write a step" + _disk_problem(folder)
                    elif time.monotonic() - flushed >= FLUSH_SECONDS:
                        writer.flush()
                        flushed = time.monotonic()
                except Exception as exc:  # noqa: BLE001 - reported to the recorder on close
                    error = f"writing a step: {exc}"
        elif kind == b"O":
            head, _, metadata = payload.partition(b"\0")
            spec = json.loads(head)
            folder = spec["folder"]
            error = ""
            flushed = time.monotonic()
            if writer is not None:  # an episode never closed nor aborted: release its files first
                writer.close()
            writer = riegeli_dataset_writer.RiegeliDatasetWriter()
            try:
                writer.init(
                    data_dir=spec["folder"],
                    metadata=parse(metadata),
                    max_episodes_per_shard=10000,
                    writer_options=spec["options"],
                )
            except (RuntimeError, TypeError) as exc:
                error = f"{spec['folder']}: cannot open an envlogger writer: {exc}"
                writer = None
        elif kind == b"M":
            if writer is not None and not error:
                writer.set_episode_metadata(parse(payload))
        elif kind in (b"C", b"A"):
            if writer is not None:
                writer.close()
                writer = None
            if kind == b"C" and error:
                _reply(stdout, b"E", error)
            else:
                _reply(stdout, b"K")
            error = ""
        elif kind == b"Q":
            if writer is not None:
                writer.close()
            return 0
        else:
            _reply(stdout, b"E", f"unknown frame kind {kind!r}")
            return 2


if __name__ == "__main__":
    # Ctrl-C in a terminal (and `kill` of a process group, or a service manager's stop) signals the child
    # too: the parent decides how to stop (it finishes or abandons its episodes, then closes our stdin, and
    # we exit on that EOF even if the parent died), so the child must not die first and lose closes in flight.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(serve(open(0, "rb", buffering=1 << 20, closefd=False), sys.stdout.buffer))  # noqa: SIM115
