"""ZIP bombs and oversized archives: `safe_extract` refuses them from the declared sizes, before writing a byte
(issue 13: a 1 MB archive used to inflate to 1 GiB)."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from pipelines.exporters.archive import ArchiveTooLarge, ExtractLimits, safe_extract, write_zip


def deflated(path: Path, members: dict[str, int], *, random_tail: int = 0) -> Path:
    """A deflated ZIP whose members are `size` zero bytes each (streamed: nothing large in memory)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, size in members.items():
            with zf.open(name, "w", force_zip64=size > 2**31) as out:
                left = size
                while left:
                    n = min(left, 8 << 20)
                    out.write(bytes(n))
                    left -= n
                if random_tail:
                    out.write(os.urandom(random_tail))
    return path


def test_a_small_archive_that_inflates_a_thousandfold_is_refused_untouched(tmp_path: Path) -> None:
    bomb = deflated(tmp_path / "bomb.zip", {"a.bin": 256 << 20})
    assert bomb.stat().st_size < 1 << 20  # well under 1 MB on disk
    with pytest.raises(ArchiveTooLarge, match=r"a\.bin.*-fold.*ZIP bomb"):
        safe_extract(bomb, tmp_path / "dest")
    assert not (tmp_path / "dest").exists() or not any((tmp_path / "dest").iterdir())


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (ExtractLimits(member_bytes=3 << 20), "per member"),
        (ExtractLimits(total_bytes=5 << 20), "in all"),
        (ExtractLimits(members=2), "members; at most 2"),
    ],
)
def test_member_total_and_count_limits(tmp_path: Path, limits: ExtractLimits, message: str) -> None:
    archive = deflated(tmp_path / "a.zip", {"x": 2 << 20, "y": 2 << 20, "z": 4 << 20}, random_tail=1 << 20)
    with pytest.raises(ArchiveTooLarge, match=message):
        safe_extract(archive, tmp_path / "dest", limits)
    assert not (tmp_path / "dest").exists()


def test_small_compressible_files_and_real_datasets_still_extract(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "log.txt").write_bytes(b"a" * 500_000)  # compresses ~1000-fold, but under the 1 MiB floor
    (src / "sub" / "steps.riegeli").write_bytes(os.urandom(3 << 20))
    write_zip(src, tmp_path / "stored.zip")
    dest = safe_extract(tmp_path / "stored.zip", tmp_path / "dest")
    assert (dest / "sub" / "steps.riegeli").read_bytes() == (src / "sub" / "steps.riegeli").read_bytes()
    deflated(tmp_path / "small.zip", {"log.txt": 500_000})
    assert (safe_extract(tmp_path / "small.zip", tmp_path / "d2") / "log.txt").stat().st_size == 500_000
