"""Hostile and careless inputs to convert-ui (issue 13): pathological text for the failed-dump detector, FIFOs,
sockets, devices, sparse files, symlinks out of INPUT, decompression bombs, oversized episodes, stuck episodes.

Whatever could eat the machine runs in a child process with its address space (and, for the regex, its CPU
time) capped, so a regression fails the test instead of taking the machine down. No timing is asserted: the
linear-time claim is checked structurally (200,000-line inputs under a generous CPU cap that the old pattern
overran by orders of magnitude); `bench/bench_reliability.py` prints the time ratios.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest

from pipelines.convert_guarded import MAX_RUN_BYTES
from pipelines.deadline import ChildFailed, DeadlineExceeded, DeadlineWorker, run_with_deadline
from pipelines.hierarchy import parse
from pipelines.hierarchy.screenshot import MAX_SCREENSHOT_BYTES, MAX_SCREENSHOT_PIXELS
from pipelines.hierarchy.uiautomator import failed_dump_message
from pipelines.traces import files
from pipelines.traces.files import FileRefused, ReadPolicy
from tests.conftest import FIXTURES, REPO_ROOT
from tests.pipelines.images import png_header

GIB = 2**30
RICO_JSON = FIXTURES / "rico" / "33600.json"
RICO_JPG = FIXTURES / "rico" / "33600.jpg"
XML = FIXTURES / "uiautomator" / "banjen_ui_hierarchy.xml"


def run_capped(code: str, *, address_space: int = 3 * GIB, cpu_seconds: int = 600, timeout: float = 900):
    """Run Python `code` in a child with RLIMIT_AS / RLIMIT_CPU set; returns the CompletedProcess."""
    prelude = textwrap.dedent(
        f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, ({address_space}, {address_space}))
        resource.setrlimit(resource.RLIMIT_CPU, ({cpu_seconds}, {cpu_seconds}))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def convert_capped(inp: Path, out: Path, *flags: str, address_space: int = 3 * GIB) -> dict:
    """`stepmark convert-ui` in a capped child; the dead letters by file name -> (reason, message)."""
    done = run_capped(
        f"""
        import sys
        from stepmark.cli import main
        sys.exit(main(["convert-ui", {str(inp)!r}, {str(out)!r}, "--quiet", *{list(flags)!r}]))
        """,
        address_space=address_space,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    dead = [json.loads(line) for line in (out / "dead_letters.jsonl").read_text().splitlines()]
    summary["dead"] = {}
    for d in dead:  # the file's own dead letter, not the episode's `no_steps` that follows from it
        if d["reason"] != "no_steps" or Path(d["source_path"]).name not in summary["dead"]:
            summary["dead"][Path(d["source_path"]).name] = (d["reason"], d["exception"])
    summary["dead_text"] = (out / "dead_letters.jsonl").read_text()
    return summary


# ---------------------------------------------------------------------------------------------------------
# Failed-dump detection runs in time linear in the text


def pathological_texts(lines: int) -> dict[str, tuple[bytes, str]]:
    """Shapes that made the old `^\\s*(...)$` MULTILINE pattern quadratic, with the reason each must give."""
    return {
        "lf": (b"<x" + b"\n" * lines + b"y", "malformed"),
        "crlf": (b"<x" + b"\r\n" * lines + b"y", "malformed"),
        "blank_lines": (b"<x\n" + b" \t\n" * lines + b"y", "malformed"),
        "long_blank_line": (b"<x\n" + b" " * (lines * 10) + b"y", "malformed"),
        "vertical_tabs": (b"<x" + b"\x0b\n" * lines, "malformed"),
        "java_prefix": (b"<x\n" + b"java.a\n" * lines, "malformed"),
        "long_java_name": (b"<x\n java." + b"a" * (lines * 10) + b"\n", "malformed"),
        "near_phrase": (b"<x\n" + b"could not get idle stat\n" * lines, "malformed"),
        "error_at_end": (b"<x" + b"\r\n" * lines + b"ERROR: null root node returned", "failed_dump"),
        "phrase_at_end": (b"\n" * lines + b"  uiautomator: could not get idle state.  ", "failed_dump"),
    }


def test_failed_dump_detection_handles_200k_line_inputs_under_a_cpu_cap() -> None:
    """The old pattern needed 33.6 s for 32,000 lines (and was quadratic); 200,000 lines of every shape must
    parse under a CPU cap of 60 s in all, far below what any quadratic pass over them would take."""
    done = run_capped(
        """
        import json
        from pipelines.hierarchy import HierarchyError, parse
        from tests.pipelines.test_reliability_inputs import pathological_texts
        out = {}
        for name, (data, _) in pathological_texts(200_000).items():
            try:
                parse(data)
                out[name] = "parsed"
            except HierarchyError as exc:
                out[name] = exc.reason
        print(json.dumps(out))
        """,
        cpu_seconds=60,
    )
    assert done.returncode == 0, f"killed or failed (rc {done.returncode}): {done.stderr[-2000:]}"
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {name: reason for name, (_, reason) in pathological_texts(10).items()}


@pytest.mark.parametrize("lines", [1, 7, 1000])
def test_failed_dump_message_is_the_first_error_line(lines: int) -> None:
    blank = "\r\n" * lines
    assert failed_dump_message(f"{blank}  ERROR: could not get idle state.\r\n") == (
        "ERROR: could not get idle state."
    )
    assert failed_dump_message(f"junk{blank}x java.lang.NullPointerException") is None  # not at a line start
    text = f"<x{blank}Exception in thread main java.lang.RuntimeException{blank}ERROR: later"
    assert failed_dump_message(text) == "Exception in thread main java.lang.RuntimeException"
    assert failed_dump_message(f"a\nsomething NULL ROOT NODE RETURNED here{blank}") == (
        "something NULL ROOT NODE RETURNED here"
    )
    assert failed_dump_message(f"<x{blank}" + " " * lines + "y") is None


# ---------------------------------------------------------------------------------------------------------
# The time budget: a stuck computation in C (holding the GIL) is stopped


def test_deadline_stops_catastrophic_backtracking_in_c() -> None:
    stuck = re.compile(r"(a*)*b")
    with pytest.raises(DeadlineExceeded):
        run_with_deadline(lambda: stuck.match("a" * 60), 1.0)


def test_deadline_returns_large_results_and_reports_crashes() -> None:
    payload = os.urandom(3 << 20)
    assert run_with_deadline(lambda: payload + b"!", 120) == payload + b"!"
    with pytest.raises(ChildFailed, match="SIGKILL"):
        run_with_deadline(lambda: os.kill(os.getpid(), signal.SIGKILL), 120)
    with pytest.raises(ChildFailed, match="ZeroDivisionError"):
        run_with_deadline(lambda: 1 / 0, 120)


def stuck_or_quick(text: str) -> int:
    """Catastrophic backtracking in C for "a...a", instant otherwise; the worker process's pid."""
    re.match(r"(a*)*b", text)
    return os.getpid()


def die(_: object) -> None:
    os._exit(3)


def test_deadline_worker_recovers_from_stuck_and_failing_calls() -> None:
    with DeadlineWorker(stuck_or_quick) as worker:
        first = worker.call("b", 120)
        assert first != os.getpid() and worker.call("xb", 120) == first  # one worker for many calls
        with pytest.raises(DeadlineExceeded):
            worker.call("a" * 60, 1.0)
        fresh = worker.call("b", 120)
        assert fresh not in (first, os.getpid())  # the stuck worker was replaced
        with pytest.raises(ChildFailed, match="TypeError"):
            worker.call(None, 120)  # an exception is reported, and the worker goes on
        assert worker.call("b", 120) == fresh
    with DeadlineWorker(die) as worker, pytest.raises(ChildFailed, match="status 3"):
        worker.call(None, 120)


def test_a_stuck_worker_dies_with_its_job() -> None:
    """kill -9 of the job must not leave a worker spinning in a regular expression."""
    job = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(
            """
            from pipelines.deadline import DeadlineWorker
            from tests.pipelines.test_reliability_inputs import stuck_or_quick
            worker = DeadlineWorker(stuck_or_quick)
            worker._start()
            print(worker.pid, flush=True)
            worker.call("a" * 60, 600)
            """
        )],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    child = int(job.stdout.readline())
    job.kill()
    job.wait()
    for _ in range(300):  # gone, or a zombie nobody reaps in this container: either way not running
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return
        if state in ("Z", "X"):
            return
        time.sleep(0.1)
    os.kill(child, signal.SIGKILL)
    pytest.fail(f"worker {child} still running (state {state}) after its job was killed")


def allocate(size: int) -> int:
    return len(bytearray(size))


def test_deadline_worker_memory_cap_fails_the_call_not_the_machine() -> None:
    with DeadlineWorker(allocate, memory_bytes=256 << 20) as worker:
        assert worker.call(16 << 20, 120) == 16 << 20
        with pytest.raises(ChildFailed, match="MemoryError"):
            worker.call(4 * GIB, 120)
        assert worker.call(16 << 20, 120) == 16 << 20  # the same worker goes on


# ---------------------------------------------------------------------------------------------------------
# Bounded reads


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_bounded_reader_refuses_before_reading(tmp_path: Path) -> None:
    (tmp_path / "ok.xml").write_bytes(b"<hierarchy/>")
    assert files.read_limited(str(tmp_path / "ok.xml"), 100) == b"<hierarchy/>"
    with open(tmp_path / "sparse.xml", "wb") as f:
        f.truncate(3 * GIB)  # 3 GB that take no disk
    with pytest.raises(FileRefused, match="too_large"):
        files.read_limited(str(tmp_path / "sparse.xml"), 64 << 20)
    with pytest.raises(FileRefused, match="FIFO.*not_regular"):  # would block forever if opened
        files.read_limited(str(make_fifo(tmp_path / "0.xml")), 100)
    os.symlink("/dev/zero", tmp_path / "zero.png")
    with pytest.raises(FileRefused, match="character device.*not_regular"):
        files.read_limited(str(tmp_path / "zero.png"), 100)
    inside = ReadPolicy(files.input_roots(str(tmp_path)))
    with pytest.raises(FileRefused, match="outside INPUT.*outside_input"):
        files.read_limited(str(tmp_path / "zero.png"), 100, inside)
    with pytest.raises(FileRefused, match="not_regular"):
        files.read_limited(str(tmp_path / "zero.png"), 100, ReadPolicy(inside.roots, follow_links=True))
    (tmp_path / "a").mkdir()
    with pytest.raises(FileRefused, match="folder"):
        files.read_limited(str(tmp_path / "a"), 100)


def test_bounded_reader_stops_at_the_limit_while_reading(tmp_path: Path) -> None:
    """A file that grows after its size was checked (here: /proc files report size 0) is cut at the limit."""
    status = Path("/proc/self/status")
    if not status.exists() or status.stat().st_size != 0:
        pytest.skip("needs a Linux /proc file whose reported size is 0")
    with pytest.raises(FileRefused, match="more than 10 bytes.*too_large"):
        files.read_limited(str(status), 10)
    assert files.read_limited(str(status), 1 << 20).startswith(b"Name:")


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_screenshot_limits() -> None:
    from pipelines.hierarchy import HierarchyError, image_info

    side = int(MAX_SCREENSHOT_PIXELS**0.5) + 1
    for width, height in ((side, side), (12000, 12000), (MAX_SCREENSHOT_PIXELS + 1, 1)):
        with pytest.raises(HierarchyError, match="pixels are accepted.*too_large"):
            image_info(png_header(width, height) + iend())
    assert image_info(png_header(6000, 6000) + iend()).width == 6000
    with pytest.raises(HierarchyError, match="too_large"):
        image_info(png_header(10, 10) + bytes(MAX_SCREENSHOT_BYTES))


def iend() -> bytes:
    return struct.pack(">I", 0) + b"IEND" + struct.pack(">I", zlib.crc32(b"IEND"))


# ---------------------------------------------------------------------------------------------------------
# End to end: every bad file is a dead letter naming it, and the job finishes


def sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def hostile_input(root: Path, outside: Path) -> None:
    """One good screen plus one bad file of each kind, each its own single-screen episode."""
    copy(RICO_JSON, root / "good.json")
    copy(RICO_JPG, root / "good.jpg")
    make_fifo(root / "0.xml")  # a FIFO as a hierarchy
    copy(RICO_JSON, root / "fifo_shot.json")
    make_fifo(root / "fifo_shot.png")  # ... and as a screenshot
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(root / "sock.xml"))
    sock.close()
    os.symlink("/dev/zero", root / "zero.xml")
    copy(RICO_JSON, root / "zero_shot.json")
    os.symlink("/dev/zero", root / "zero_shot.png")
    sparse(root / "sparse.xml", 3 * GIB)
    copy(RICO_JSON, root / "big_shot.json")
    sparse(root / "big_shot.png", MAX_SCREENSHOT_BYTES + 1)
    copy(RICO_JSON, root / "bomb.json")
    (root / "bomb.png").write_bytes(png_header(12000, 12000) + iend())
    (outside / "secret.txt").write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    os.symlink(outside / "secret.txt", root / "secret.xml")
    # Layout files that are FIFOs: the episode keeps its screens, without actions.
    copy(RICO_JSON, root / "trace" / "view_hierarchies" / "33600.json")
    copy(RICO_JPG, root / "trace" / "screenshots" / "33600.jpg")
    make_fifo(root / "trace" / "gestures.json")
    copy(RICO_JSON, root / "steps" / "0.json")
    copy(RICO_JSON, root / "steps" / "1.json")
    make_fifo(root / "steps" / "actions.jsonl")
    # An episode whose files hold more than MAX_RUN_BYTES (a long run is written in record parts, but not
    # without end): refused before any of it is read.
    for i in range(MAX_RUN_BYTES // (30 << 20) + 1):
        copy(RICO_JSON, root / "huge" / f"{i}.json")
        sparse(root / "huge" / f"{i}.png", 30 << 20)


def test_convert_ui_dead_letters_hostile_files_without_reading_them(tmp_path: Path) -> None:
    inp, outside = tmp_path / "in", tmp_path / "outside"
    inp.mkdir()
    outside.mkdir()
    hostile_input(inp, outside)
    summary = convert_capped(inp, tmp_path / "out")  # 3 GiB of address space: no file may be read whole
    dead = summary["dead"]
    assert summary["episodes"] == 3 and summary["steps"] == 4  # good.json, the trace and the step folder
    expected = {
        "0.xml": "not_regular",
        "fifo_shot.png": "not_regular",
        "sock.xml": "not_regular",
        "zero.xml": "outside_input",
        "zero_shot.png": "outside_input",
        "sparse.xml": "too_large",
        "big_shot.png": "too_large",
        "bomb.png": "too_large",
        "secret.xml": "outside_input",
        "huge": "too_large",
        "gestures.json": "not_regular",  # the layout file was never read: the reader's reason, not the layout's
        "actions.jsonl": "not_regular",
    }
    for name, reason in expected.items():
        assert dead[name][0] == reason, (name, dead[name])
        assert name in dead[name][1]  # the message names the file
    assert "SECRETHASH" not in summary["dead_text"]  # nothing read from outside INPUT is quoted
    assert "12000x12000" in dead["bomb.png"][1]
    # Every discovered episode is accounted for: converted or dead-lettered.
    assert "FIFO" in dead["gestures.json"][1] and "FIFO" in dead["actions.jsonl"][1]
    assert summary["discovered_episodes"] == 13
    assert summary["dead_letters_by_reason"].get("no_steps", 0) == summary["discovered_episodes"] - 4


def test_follow_links_reads_link_targets_but_never_devices(tmp_path: Path) -> None:
    inp, outside = tmp_path / "in", tmp_path / "outside"
    inp.mkdir()
    outside.mkdir()
    copy(RICO_JSON, outside / "screen.json")
    os.symlink(outside / "screen.json", inp / "linked.json")
    os.symlink("/dev/zero", inp / "zero.xml")
    try:
        os.mknod(inp / "null.xml", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # a device inside INPUT
    except PermissionError:
        pass
    summary = convert_capped(inp, tmp_path / "out", "--follow-links")
    assert summary["episodes"] == 1
    assert summary["dead"]["zero.xml"][0] == "not_regular"
    if (inp / "null.xml").exists():
        assert summary["dead"]["null.xml"][0] == "not_regular"


def test_episode_timeout_dead_letters_the_stuck_episode_and_the_job_finishes(tmp_path: Path) -> None:
    inp = tmp_path / "in"
    copy(RICO_JSON, inp / "small.json")
    first = copy(RICO_JSON, inp / "long" / "0.json")
    for i in range(1, 1500):  # hard links: 1,500 steps of parsing, far beyond a one-second budget
        os.link(first, inp / "long" / f"{i}.json")
    summary = convert_capped(inp, tmp_path / "out", "--episode-timeout", "1")
    assert summary["dead"]["long"][0] == "timeout"
    assert "1 s" in summary["dead"]["long"][1]
    assert summary["discovered_episodes"] == 2
    converted = summary["episodes"]
    timed_out = summary["dead_letters_by_reason"]["timeout"]
    assert converted + timed_out == 2  # the small one converted, unless the machine is stalled past 1 s


def test_convert_ui_refuses_a_bad_timeout(tmp_path: Path) -> None:
    from pipelines.convert import run
    from pipelines.errors import StepmarkError

    copy(RICO_JSON, tmp_path / "in" / "a.json")
    for bad in ("0", "-1", "inf", "nan"):
        with pytest.raises(StepmarkError, match="--episode-timeout"):
            run([str(tmp_path / "in"), str(tmp_path / f"out{bad}"), "--quiet", "--episode-timeout", bad])


def test_parse_still_reads_real_fixtures() -> None:
    assert parse(XML.read_bytes()).objects
