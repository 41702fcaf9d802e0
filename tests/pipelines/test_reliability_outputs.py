"""stepmark's own outputs read back (convert-ui shards by `inspect`, `import-ui`, `copy` and the annotator's
replay, all through `storage.open_read`) get the same refusal of non-regular files as trace inputs: a shard
swapped for a FIFO hung `inspect` and `import-ui` in open() until killed, and a link to /dev/zero was read
until a CRC failed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import storage
from pipelines.errors import StepmarkError
from tests.conftest import FIXTURES, REPO_ROOT


def stepmark(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    return subprocess.run([sys.executable, "-m", "stepmark", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("converted")
    done = stepmark("convert-ui", str(FIXTURES / "uiautomator"), "out", cwd=root)
    assert done.returncode == 0, done.stderr
    return root / "out"


@pytest.mark.parametrize("swap", ["fifo", "dev-zero"])
@pytest.mark.parametrize("command", ["inspect", "import-ui"])
def test_a_shard_that_is_not_a_regular_file_is_refused_in_one_line(converted, tmp_path, swap, command):
    out = tmp_path / "out"
    shutil.copytree(converted, out)
    [shard, *_] = sorted(out.glob("episodes-*.tfrecord"))
    shard.unlink()
    if swap == "fifo":
        os.mkfifo(shard)
    else:
        shard.symlink_to("/dev/zero")
    argv = ["inspect", "out"] if command == "inspect" else ["import-ui", "out", "--data", "d", "--study", "s"]
    done = stepmark(*argv, cwd=tmp_path)  # a FIFO used to block here until the timeout
    kind = "a FIFO" if swap == "fifo" else "a character device"
    assert done.returncode == 2
    assert done.stderr.strip() == f"stepmark {command}: error: out/{shard.name}: {kind}, not a regular file: not read"


def test_open_read_follows_links_to_regular_files_and_refuses_the_rest(tmp_path):
    data = tmp_path / "data.bin"
    data.write_bytes(b"abc")
    link = tmp_path / "link.bin"
    link.symlink_to(data)
    with storage.open_read(str(link)) as f:
        assert f.read() == b"abc"
    with pytest.raises(StepmarkError, match="a folder, not a regular file"):
        storage.open_read(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        storage.open_read(str(tmp_path / "missing"))
