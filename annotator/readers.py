"""Episode readers the annotator keeps open: opened once per episode and shared by the sessions (threads)
that replay it (random access; frames are never all decoded up front)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from protos.rlds_creator import study_pb2

Progress = Callable[[float], None]

class SharedReader:
    """An episode reader that several annotator sessions (threads) may use at once.

    Rewards for the whole episode are read once, lazily, keeping only the floats.
    """

    def __init__(self, reader: Any) -> None:
        self._reader = reader
        self._lock = threading.Lock()
        self._rewards: list[float] | None = None
        self.metadata: dict = dict(getattr(reader, "metadata", {}) or {})

    def __len__(self) -> int:
        return len(self._reader)

    def step(self, index: int) -> Any:
        with self._lock:
            return self._reader.step(index)

    def rewards(self) -> list[float]:
        if self._rewards is None:
            with self._lock:
                fast = getattr(self._reader, "rewards", None)
                if callable(fast):
                    values = list(fast())
                else:
                    values = [self._reader.step(i).reward for i in range(len(self._reader))]
            self._rewards = [0.0 if v is None or not np.isfinite(v) else float(v) for v in values]
        return self._rewards

    def close(self) -> None:
        with self._lock:
            self._reader.close()


def open_shared_reader(episode: study_pb2.Episode, data_dir: str | Path) -> SharedReader:
    from pipelines.episodes import open_episode

    return SharedReader(open_episode(episode, data_dir))


class ReaderCache:
    """Least-recently-used open readers keyed by episode reference (the annotator's default outside Streamlit)."""

    def __init__(self, data_dir: str | Path, max_open: int = 8) -> None:
        self.data_dir = Path(data_dir)
        self.max_open = max_open
        self._readers: OrderedDict[tuple[str, str, str], SharedReader] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, episode: study_pb2.Episode) -> SharedReader:
        key = (episode.study_id, episode.session_id, episode.id)
        with self._lock:
            reader = self._readers.get(key)
            if reader is not None:
                self._readers.move_to_end(key)
                return reader
        reader = open_shared_reader(episode, self.data_dir)
        with self._lock:
            self._readers[key] = reader
            while len(self._readers) > self.max_open:
                _, old = self._readers.popitem(last=False)
                old.close()
        return reader

    def close(self) -> None:
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()
