"""convert-ui on a Beam filesystem that is not the local disk: an in-memory object store registered under
`memfs://` (no folders, like gs:// or s3://). Proves the pipeline lists, reads, writes, renames and deletes only
through `FileSystems`, never `os`/`pathlib`."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from apache_beam.io.filesystem import FileMetadata, FileSystem

from pipelines import ui_records
from pipelines.convert import run
from pipelines.errors import StepmarkError

REPO = Path(__file__).resolve().parents[2]


class MemoryFileSystem(FileSystem):
    """A flat object store in a dict: paths are keys, "folders" are only prefixes."""

    OBJECTS: dict[str, bytes] = {}

    @classmethod
    def scheme(cls) -> str:
        return "memfs"

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *(p.strip("/") for p in paths)])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        pass

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str):
        for key in sorted(self.OBJECTS):
            if key.startswith(dir_or_prefix):
                yield FileMetadata(key, len(self.OBJECTS[key]), 0.0)

    def create(self, path, mime_type="application/octet-stream", compression_type=None):
        objects = self.OBJECTS

        class Writer(io.BytesIO):
            def close(self) -> None:
                if not self.closed:
                    objects[path] = self.getvalue()
                super().close()

        return Writer()

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        if path not in self.OBJECTS:
            raise FileNotFoundError(path)
        return io.BytesIO(self.OBJECTS[path])

    def copy(self, source_file_names, destination_file_names) -> None:
        for src, dst in zip(source_file_names, destination_file_names, strict=True):
            self.OBJECTS[dst] = self.OBJECTS[src]

    def rename(self, source_file_names, destination_file_names) -> None:
        for src, dst in zip(source_file_names, destination_file_names, strict=True):
            self.OBJECTS[dst] = self.OBJECTS.pop(src)

    def exists(self, path: str) -> bool:
        return path in self.OBJECTS

    def size(self, path: str) -> int:
        return len(self.OBJECTS[path])

    def last_updated(self, path: str) -> float:
        return 0.0

    def checksum(self, path: str) -> str:
        return str(hash(self.OBJECTS[path]))

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, len(self.OBJECTS[path]), 0.0)

    def delete(self, paths) -> None:
        for path in paths:
            if path not in self.OBJECTS:
                raise FileNotFoundError(path)
            del self.OBJECTS[path]


@pytest.fixture
def memfs():
    MemoryFileSystem.OBJECTS.clear()
    yield MemoryFileSystem.OBJECTS
    MemoryFileSystem.OBJECTS.clear()


def test_convert_on_an_object_store(memfs: dict[str, bytes], capsys) -> None:
    samples = REPO / "samples" / "ui"
    for f in sorted(samples.rglob("*")):
        if f.is_file():
            memfs[f"memfs://bucket/in/{f.relative_to(samples).as_posix()}"] = f.read_bytes()
    assert run(["memfs://bucket/in", "memfs://bucket/out", "--shards", "2", "--quiet"]) == 0
    assert (
        "converted 7 of 7 episodes (17 steps, 610 objects) from memfs://bucket/in" in capsys.readouterr().out
    )
    out = sorted(k for k in memfs if k.startswith("memfs://bucket/out/"))
    assert out == [
        "memfs://bucket/out/dead_letters.jsonl",
        "memfs://bucket/out/episodes-00000-of-00002.tfrecord",
        "memfs://bucket/out/episodes-00001-of-00002.tfrecord",
        "memfs://bucket/out/summary.json",
    ]  # nothing temporary left behind
    refs = ui_records.index_records("memfs://bucket/out")
    assert len(refs) == 7
    e = ui_records.read_episode(refs[-1].shard, refs[-1].offset)
    assert e.episode_id == refs[-1].episode_id
    assert e.source_path.startswith("memfs://bucket/in/")
    assert {d.reason for d in ui_records.read_dead_letters("memfs://bucket/out")} == {
        "bad_action",
        "missing_state",
    }
    with pytest.raises(StepmarkError, match="already holds a conversion"):
        run(["memfs://bucket/in", "memfs://bucket/out", "--quiet"])
    assert run(["memfs://bucket/in", "memfs://bucket/out", "--quiet", "--overwrite", "--shards", "1"]) == 0
    assert sum(k.startswith("memfs://bucket/out/episodes-") for k in memfs) == 1
