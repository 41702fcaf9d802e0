"""ZIP archives: paths checked when writing and when extracting (no `..`, no absolute paths, no symlinks)."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest

from pipelines.errors import StepmarkError
from pipelines.exporters.archive import UnsafeArchivePath, check_member_name, safe_extract, write_zip


def make_folder(root: Path) -> Path:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "metadata.riegeli").write_bytes(b"\x00meta")
    (root / "sub" / "steps.riegeli").write_bytes(os.urandom(3000))
    (root / "sub" / "deeper" / "x.json").write_text('{"a": 1}')
    return root


def test_round_trip_keeps_every_file_and_byte(tmp_path: Path) -> None:
    src = make_folder(tmp_path / "src")
    size = write_zip(src, tmp_path / "out.zip")
    assert size == (tmp_path / "out.zip").stat().st_size
    with zipfile.ZipFile(tmp_path / "out.zip") as zf:
        assert sorted(zf.namelist()) == ["metadata.riegeli", "sub/deeper/x.json", "sub/steps.riegeli"]
    dest = safe_extract(tmp_path / "out.zip", tmp_path / "dest")
    for f in src.rglob("*"):
        if f.is_file():
            assert (dest / f.relative_to(src)).read_bytes() == f.read_bytes()


@pytest.mark.parametrize(
    "name",
    [
        "../evil.txt",
        "a/../../evil.txt",
        "/etc/passwd",
        "C:\\evil.txt",
        "C:/evil.txt",
        "a\\..\\b",
        "",
        "x\x00y",
    ],
)
def test_unsafe_member_names_are_refused(name: str) -> None:
    with pytest.raises(UnsafeArchivePath):
        check_member_name(name)


@pytest.mark.parametrize("name", ["metadata.riegeli", "a/b/c.riegeli", "00000001/steps.riegeli", "a..b/c"])
def test_safe_member_names_pass(name: str) -> None:
    assert str(check_member_name(name)) == name


@pytest.mark.parametrize("evil", ["../escaped.txt", "/tmp/escaped-abs.txt", "ok/../../escaped.txt"])
def test_malicious_zip_is_refused_before_anything_is_written(tmp_path: Path, evil: str) -> None:
    bad = tmp_path / "bad.zip"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("fine.txt", "harmless")  # comes first: must not be extracted either
        zf.writestr(evil, "pwned")
    dest = tmp_path / "dest"
    with pytest.raises(UnsafeArchivePath, match="bad.zip"):
        safe_extract(bad, dest)
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/escaped-abs.txt").exists()
    assert not dest.exists() or not any(dest.iterdir())


def test_symlink_member_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "link.zip"
    info = zipfile.ZipInfo("link")
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr(info, "/etc/passwd")
    with pytest.raises(UnsafeArchivePath, match="symlink"):
        safe_extract(bad, tmp_path / "dest")


def test_symlinks_in_the_folder_are_not_archived(tmp_path: Path) -> None:
    src = make_folder(tmp_path / "src")
    (tmp_path / "secret").write_text("outside the dataset")
    (src / "sub" / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafeArchivePath, match="symlink"):
        write_zip(src, tmp_path / "out.zip")


def test_archiving_a_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(StepmarkError, match="nope"):
        write_zip(tmp_path / "nope", tmp_path / "out.zip")
