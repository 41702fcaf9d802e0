"""envlogger writing in a separate process, so Riegeli's work overlaps with stepping the environment.

envlogger's `add_step` holds the GIL (a thread would not overlap), so the recorder can hand the writing
to a child process (`python -m pipelines.episodes.writer_process`): the recording process serializes each
step record to wire bytes (`fast_codec.serialize`) and sends it down a pipe; the child parses it and calls
envlogger's own `RiegeliDatasetWriter`, so the files are exactly those `EnvloggerEpisodeWriter` writes.

Correctness rules (the same guarantees as writing in-process):
- `close()` returns only after the child closed the Riegeli files and said so; any failure there (the
  child died, a write failed) raises `StepmarkError` and the episode is not published.
- a dead child is never silent: the next send fails (broken pipe) or the close gets no acknowledgement,
  and the error names its exit code.
- if the recording process dies (SIGKILL), the child reads end-of-file, closes the episode's files with the
  steps it received and exits: recovery (`publish.recover_abandoned`) registers them as ABANDONED. A
  recorder that must lose no step on a crash flushes after each step (`flush()`); otherwise the frames
  reach the pipe at least once a second, and the child flushes its files as often (a SIGKILL of both
  loses at most that).

The child and the frames it reads are in `writer_child.py` (run by path: it imports only envlogger, so it
starts in a quarter of a second, while the recorder creates its environment).
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from envlogger import step_data

from pipelines.episodes import fast_codec, writer_child
from pipelines.episodes.base import EnvSpecs, EpisodeMetadata, EpisodeWriter
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2

_HEADER = writer_child.HEADER
PIPE_BYTES = 1 << 20  # room for ~70 Procgen steps in flight before the recorder waits for the writer
_BUFFER = 1 << 16  # the recorder batches small frames into one write() of this size


class WriterProcess:
    """One child process writing envlogger episodes for one recorder (reused across its episodes)."""

    def __init__(self) -> None:
        env = dict(os.environ)
        env.setdefault("GLOG_minloglevel", "1")
        self._proc = subprocess.Popen(
            [sys.executable, writer_child.__file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        try:
            fcntl.fcntl(self._proc.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:  # a lower system limit: the default 64 KB pipe still works, with less slack
            pass
        self._out: BinaryIO = open(self._proc.stdin.fileno(), "wb", buffering=_BUFFER, closefd=False)  # noqa: SIM115
        self._in: BinaryIO = self._proc.stdout
        self.closed = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    def _died(self, doing: str) -> StepmarkError:
        try:
            code = self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self.closed = True
        return StepmarkError(
            f"episode writer process {self._proc.pid} died while {doing} "
            f"(exit code {code}): the episode being written is lost"
        )

    def send(self, kind: bytes, *payload: bytes) -> None:
        if self.closed:
            raise StepmarkError("episode writer process already stopped")
        try:
            self._out.write(_HEADER.pack(kind, sum(len(p) for p in payload)))
            for p in payload:
                self._out.write(p)
        except (BrokenPipeError, ValueError) as exc:
            raise self._died("receiving a step") from exc

    def request(self, kind: bytes) -> None:
        """Sends a command that the child acknowledges, and waits for the acknowledgement."""
        self.send(kind)
        self.flush()
        self.read_reply()

    def flush(self) -> None:
        try:
            self._out.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise self._died("receiving a step") from exc

    def reply_ready(self) -> bool:
        """True when an acknowledgement (or end of file: the child died) can be read without waiting."""
        return bool(select.select([self._in], [], [], 0)[0])

    def read_reply(self) -> None:
        """The next acknowledgement (they come in the order of the C/A commands); raises on E or death."""
        try:
            header = self._in.read(_HEADER.size)
        except (BrokenPipeError, ValueError) as exc:
            raise self._died("closing an episode") from exc
        if len(header) < _HEADER.size:
            raise self._died("closing an episode")
        reply, size = _HEADER.unpack(header)
        try:
            body = writer_child.read_exactly(self._in, size)
        except EOFError as exc:
            raise self._died("closing an episode") from exc
        if reply != b"K":
            raise StepmarkError(f"episode writer process: {body.decode('utf-8', 'replace')}")

    def stop(self) -> None:
        """Asks the child to exit and reaps it (a child that does not exit in time is killed)."""
        if not self.closed:
            self.closed = True
            try:
                self._out.write(_HEADER.pack(b"Q", 0))
                self._out.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass
        try:
            self._out.close()
        except (BrokenPipeError, OSError):
            pass
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


class BackgroundEnvloggerWriter(EpisodeWriter):
    """`EnvloggerEpisodeWriter`'s files, written by a `WriterProcess` (same interface, same bytes)."""

    def __init__(
        self,
        process: WriterProcess,
        folder: Path,
        relative: PurePosixPath,
        specs: EnvSpecs,
        dataset_metadata: dict[str, Any] | None = None,
        writer_options: str | None = None,
    ) -> None:
        from envlogger.converters import spec_codec

        from pipelines.episodes.envlogger_store import WRITER_OPTIONS, FlushClock

        super().__init__(folder, relative, specs)
        self._process = process
        self._flush_clock = FlushClock()
        self._awaiting = False  # a close was sent and its acknowledgement not read yet
        self.folder.mkdir(parents=True, exist_ok=True)
        metadata = dict(dataset_metadata or {})
        metadata["environment_specs"] = spec_codec.encode_environment_specs(specs)
        header = json.dumps({"folder": str(self.folder), "options": writer_options or WRITER_OPTIONS})
        self._process.send(b"O", header.encode("utf-8"), b"\0", fast_codec.serialize(metadata))

    def _record(self, data: step_data.StepData) -> None:
        self._process.send(b"F" if self.num_records == 0 else b"S", fast_codec.serialize(data))
        if self._flush_clock():
            self._process.flush()

    def close(self, metadata: EpisodeMetadata) -> study_pb2.Episode.Storage:
        self.begin_close(metadata)
        return self.finish_close()

    def begin_close(self, metadata: EpisodeMetadata) -> None:
        """Queues the episode metadata and the close: the child finishes the files while we go on."""
        if not self.closed:
            self.closed = True
            if self.num_records:
                self._process.send(b"M", fast_codec.serialize(metadata.to_dict()))
            self._process.send(b"C")
            self._process.flush()
            self._awaiting = True

    def close_done(self) -> bool:
        return not self._awaiting or self._process.reply_ready()

    def finish_close(self) -> study_pb2.Episode.Storage:
        if self._awaiting:
            self._awaiting = False
            self._process.read_reply()
        from pipelines.episodes.envlogger_store import envlogger_storage

        return envlogger_storage(self.relative)

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            if not self._process.closed:
                try:
                    self._process.request(b"A")
                except StepmarkError:
                    pass  # the folder is deleted next anyway
