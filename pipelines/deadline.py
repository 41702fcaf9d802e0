"""Run one piece of work with a time budget: in a forked child process that is killed when the budget is spent.

Why a process: the work that can get stuck is CPU-bound C code (a regular expression, a parser) that holds the
GIL, so neither a thread nor `signal.alarm` (main thread only; Beam runs DoFns in worker threads) can stop it.
A forked child starts at once (no imports), sees everything the parent has (including in-memory filesystems),
and gives all its memory back when it exits. Where `os.fork` does not exist the work runs in-process, unbounded.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable
from typing import Generic, TypeVar

A = TypeVar("A")
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
    with DeadlineWorker(lambda _: work()) as worker:
        return worker.call(None, seconds)


class DeadlineWorker(Generic[A, T]):
    """A forked child that answers `fn(arg)` call after call, each call with its own deadline. Forking once per
    batch instead of once per call keeps the budget cheap (a fork of a Beam worker costs tens of milliseconds);
    a call past its deadline kills the child, and the next call forks a fresh one. Use as a context manager."""

    def __init__(self, fn: Callable[[A], T], memory_bytes: int | None = None) -> None:
        """`memory_bytes`: address space the child may add to what it inherits (RLIMIT_AS); past it the call
        fails with MemoryError (a ChildFailed naming it) instead of the machine running out of memory."""
        self.fn = fn
        self.memory_bytes = memory_bytes
        self.pid: int | None = None
        self.requests = self.answers = -1

    def __enter__(self) -> DeadlineWorker[A, T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Forks the child now, e.g. before the caller starts threads (a fork copies only the forking thread,
        and a lock another thread holds at that moment stays locked in the child)."""
        if can_isolate() and self.pid is None:
            self._start()

    def call(self, arg: A, seconds: float) -> T:
        if not can_isolate():
            return self.fn(arg)
        if self.pid is None:
            self._start()
        try:
            _write_message(self.requests, pickle.dumps(arg, protocol=pickle.HIGHEST_PROTOCOL))
            payload = _read_answer(self.answers, time.monotonic() + seconds)
        except DeadlineExceeded:
            self._stop(kill=True)
            raise
        except BrokenPipeError:
            payload = None
        if payload is None:  # the child died during this call
            status = self._stop(kill=True)
            raise ChildFailed(_describe_status(status))
        ok, value = pickle.loads(payload)
        if not ok:
            raise ChildFailed(value)
        return value

    def close(self) -> None:
        if self.pid is not None:
            self._stop(kill=False)

    def _start(self) -> None:
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # child: serve requests until the parent closes its end; never returns
            os.close(req_w)
            os.close(ans_r)
            _die_with_parent(parent)
            _limit_memory(self.memory_bytes)
            _serve(self.fn, req_r, ans_w)
        os.close(req_r)
        os.close(ans_w)
        self.pid, self.requests, self.answers = pid, req_w, ans_r

    def _stop(self, kill: bool) -> int:
        pid, self.pid = self.pid, None
        for fd in (self.requests, self.answers):  # EOF on its requests makes an idle child exit
            with contextlib.suppress(OSError):
                os.close(fd)
        self.requests = self.answers = -1
        if pid is None:
            return 0
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return _reap(pid)


def _die_with_parent(parent: int) -> None:
    """Linux: SIGKILL this child when the parent dies (kill -9 of the job must not leave a stuck worker); exit
    at once if it died before the request was made."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


def _limit_memory(extra: int | None) -> None:
    """Cap this process's address space at its current size plus `extra` bytes (Linux; no-op elsewhere)."""
    if extra is None:
        return
    try:
        import resource

        with open("/proc/self/statm") as f:
            current = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (current + extra, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (OSError, ValueError, ImportError):
        pass  # no /proc or a hard limit already lower: leave it


def _serve(fn: Callable[[object], object], requests: int, answers: int) -> None:
    code = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        while (request := _read_message(requests)) is not None:
            _write_message(answers, _answer(lambda: fn(pickle.loads(request))))
    except BaseException:
        code = 70
    finally:
        _exit(code)


def _answer(work: Callable[[], object]) -> bytes:
    try:
        answer = (True, work())
    except BaseException as exc:  # reported to the parent, which decides what it means
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        answer = (False, f"{type(exc).__name__}: {exc}{where}")
    return pickle.dumps(answer, protocol=pickle.HIGHEST_PROTOCOL)


def _write_message(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view[:_CHUNK]) :]


def _read_message(fd: int) -> bytes | None:
    """One length-prefixed message (blocking), None at end of file."""
    head = _read_exactly(fd, _HEADER.size)
    return None if head is None else _read_exactly(fd, _HEADER.unpack(head)[0])


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(_CHUNK, n - got))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _exit(code: int) -> None:
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
