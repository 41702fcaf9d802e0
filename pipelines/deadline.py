"""Run one piece of work with a time budget: in a forked child process that is killed when the budget is spent.

Why a process: the work that can get stuck is CPU-bound C code (a regular expression, a parser) that holds the
GIL, so neither a thread nor `signal.alarm` (main thread only; Beam runs DoFns in worker threads) can stop it.
A forked child starts at once (no imports), sees everything the parent has (including in-memory filesystems),
and gives all its memory back when it exits. Where `os.fork` does not exist the work runs in-process, unbounded.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
_HEADER = struct.Struct(">Q")
_CHUNK = 1 << 20


class DeadlineExceeded(Exception):
    """The work did not finish within its budget; the child was killed."""


class ChildFailed(Exception):
    """The child died without an answer (killed by a signal, out of memory) or raised; the message says how."""


def can_isolate() -> bool:
    return hasattr(os, "fork")


def run_with_deadline(work: Callable[[], T], seconds: float) -> T:
    """`work()`'s result, computed in a child process given `seconds` of wall time. The result must pickle."""
    if not can_isolate():
        return work()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns
        os.close(read_fd)
        _child(work, write_fd)
    os.close(write_fd)
    try:
        payload = _read_answer(read_fd, time.monotonic() + seconds)
    except DeadlineExceeded:
        _kill(pid)
        raise
    finally:
        os.close(read_fd)
    status = _reap(pid)
    if payload is None:
        raise ChildFailed(_describe_status(status))
    ok, value = pickle.loads(payload)
    if not ok:
        raise ChildFailed(value)
    return value


def _child(work: Callable[[], object], fd: int) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # the parent decides about Ctrl-C
        try:
            answer = (True, work())
        except BaseException as exc:  # reported to the parent, which decides what it means
            frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            where = f" at {frame.filename}:{frame.lineno}" if frame else ""
            answer = (False, f"{type(exc).__name__}: {exc}{where}")
        data = pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_HEADER.pack(len(data)) + data)
        while view:
            view = view[os.write(fd, view[:_CHUNK]) :]
    except BaseException:
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)  # no atexit handlers, no finalizers of the parent's objects


def _read_answer(fd: int, deadline: float) -> bytes | None:
    """The child's whole answer, None when it closed the pipe without one; DeadlineExceeded at the deadline."""
    chunks: list[bytes] = []
    need: int | None = None
    got = 0
    while need is None or got < need + _HEADER.size:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            raise DeadlineExceeded
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
        if need is None and got >= _HEADER.size:
            head = b"".join(chunks)
            chunks = [head]
            need = _HEADER.unpack_from(head)[0]
    return b"".join(chunks)[_HEADER.size :]


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)


def _reap(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue


def _describe_status(status: int) -> str:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        return f"the worker process was killed by signal {signal.Signals(sig).name}"
    return f"the worker process exited with status {os.WEXITSTATUS(status)} without an answer"
