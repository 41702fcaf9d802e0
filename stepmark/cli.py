"""The `stepmark` command line: builds the parser from the command modules and dispatches.

Each command group lives in its own module (`stepmark/cmd_*.py`) exposing `register(subparsers, parents)`;
those modules only parse arguments, call down into `pipelines`/`annotator` and print.
"""

from __future__ import annotations

import argparse
import errno
import getpass
import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipelines.errors import StepmarkError


class _QuietBeamImport(logging.Filter):
    """`import apache_beam` logs "apitools not found ..." on the root logger when the optional GCP client
    libraries are absent (they are not needed here); keep that line out of every command's output."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "apitools not found" not in record.getMessage()


logging.getLogger().addFilter(_QuietBeamImport())


class _QuietIoErrors(logging.Filter):
    """Beam logs a failing DoFn's traceback before re-raising it; an operating-system error (a full disk) is
    reported once, as one line, by `main`."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "[Errno " not in record.getMessage()


logging.getLogger("apache_beam.runners.common").addFilter(_QuietIoErrors())

# Command -> the module that registers it. Only the chosen command's module is imported, so a store command
# does not pay for importing Apache Beam (about 1 s); `stepmark --help` imports them all to list them.
COMMAND_MODULES = {
    "convert-ui": "stepmark.cmd_convert",
    "inspect": "stepmark.cmd_convert",
    "study": "stepmark.cmd_store",
    "import-ui": "stepmark.cmd_store",
    "record": "stepmark.cmd_record",
    "export": "stepmark.cmd_export",
    "annotate": "stepmark.cmd_annotate",
    "queue": "stepmark.cmd_team",
    "agreement": "stepmark.cmd_team",
    "adjudicate": "stepmark.cmd_team",
    "report": "stepmark.cmd_report",
    "copy": "stepmark.cmd_storage",
    "fields": "stepmark.cmd_fields",
    "evaluate": "stepmark.cmd_evaluate",
    "suggest": "stepmark.cmd_models",
}


# "OSError: [Errno 28] No space left on device: '/out/x'" as a runner re-raises it (as text, in a RuntimeError).
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\] ([^\[\]\n]*?)(?:: '([^'\n]*)')?(?: \[while running|$|\n)")


# Errors that libraries (TensorFlow's file writers) report as text only, without an errno.
_DISK_ERRNOS = {os.strerror(n): n for n in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EIO)}
_STRERROR_TEXT = re.compile(rf"(\S+); ({'|'.join(map(re.escape, _DISK_ERRNOS))})")


# SQLite's primary result codes for a full, read-only or failing disk -> the errno they stand for.
_SQLITE_ERRNOS = {13: errno.ENOSPC, 8: errno.EROFS, 10: errno.EIO}  # SQLITE_FULL, SQLITE_READONLY, SQLITE_IOERR


@dataclass(frozen=True)
class _IoError:
    """The operating-system error behind an exception: its errno, its wording and the file it names."""

    number: int
    strerror: str
    filename: object

    def line(self) -> str:
        name = errno.errorcode.get(self.number, str(self.number))
        where = f"{self.filename}: " if self.filename else ""
        return f"{where}{self.strerror or os.strerror(self.number)} ({name}, errno {self.number})"


def io_error_line(exc: BaseException, database: str | None = None) -> str | None:
    """One line naming the path and the errno of the operating-system error behind `exc` (a full or read-only
    disk, a missing permission), looked for in its chain and in a Beam runner's re-raised message; None when
    `exc` is not one. The traceback and the records a runner quotes are left out. SQLite reports a full or
    read-only disk without a path or errno (`database or disk is full`): the line names `database`."""
    found = _io_error(exc, database)
    return found.line() if found is not None else None


def _io_error(exc: BaseException, database: str | None) -> _IoError | None:
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None:
            return _IoError(e.errno, e.strerror or "", e.filename)
        code = getattr(e, "sqlite_errorcode", None)
        if isinstance(code, int) and code & 0xFF in _SQLITE_ERRNOS:
            number = _SQLITE_ERRNOS[code & 0xFF]
            if number == errno.EIO and database and _disk_full(database):  # a WAL file that could not grow
                number = errno.ENOSPC
            return _IoError(number, f"{os.strerror(number)} (SQLite: {str(e)[:80]})", database)
        todo += [e.__cause__, e.__context__, getattr(e, "orig", None)]
    text = str(exc)
    found = _ERRNO_TEXT.search(text)
    if found is not None:
        return _IoError(int(found.group(1)), found.group(2), found.group(3))
    found = _STRERROR_TEXT.search(text)  # TensorFlow's "<path>; No space left on device"
    if found is not None:
        return _IoError(_DISK_ERRNOS[found.group(2)], found.group(2), found.group(1))
    return None


def _disk_full(database: str) -> bool:
    try:
        st = os.statvfs(Path(database).parent)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024


def _errno_suffix(exc: BaseException, database: str | None = None) -> str:
    """` (ENOSPC, errno 28)` when an operating-system or SQLite disk error caused `exc` and its message does
    not say so already (a store that could not be opened on a full disk words it as SQLite does)."""
    cause = exc.__cause__ or exc.__context__
    found = _io_error(cause, database) if cause is not None else None
    if found is None or "errno" in str(exc):
        return ""
    code = f"{errno.errorcode.get(found.number, found.number)}, errno {found.number}"
    if os.strerror(found.number) not in str(exc):  # SQLite's "disk I/O error" for a WAL file that could not grow
        return f" ({os.strerror(found.number)}, {code})"
    return f" ({code})"


def _database_of(args: argparse.Namespace) -> str | None:
    """What the command's store is, for an error line: the SQLite file under --data, or --store's URL without
    its password."""
    store = getattr(args, "store", None)
    if store:
        from sqlalchemy.engine import make_url

        try:
            return make_url(store).render_as_string(hide_password=True)
        except Exception:  # noqa: BLE001 - only for a message
            return "the --store database"
    data = getattr(args, "data", None)
    return str(Path(data) / "stepmark.db") if data else None


def default_user() -> str:
    """The login name, used when no --user is given."""
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return os.environ.get("USER", "unknown")


def store_parent() -> argparse.ArgumentParser:
    """Options every command that touches the store or episode files shares."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--data",
        default=os.environ.get("STEPMARK_DATA", "./stepmark-data"),
        help="data directory for the embedded store and episode files (default: ./stepmark-data)",
    )
    p.add_argument(
        "--store", default=os.environ.get("STEPMARK_STORE"), help="SQLAlchemy URL of another database"
    )
    p.add_argument("--user", default=None, help="who is acting (default: the login name)")
    return p


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for `command` alone when it is a known command, else for every command."""
    parser = argparse.ArgumentParser(
        prog="stepmark", description="Turn recorded agent episodes into training data."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parents = {"store": store_parent()}
    wanted = [COMMAND_MODULES[command]] if command in COMMAND_MODULES else COMMAND_MODULES.values()
    for name in dict.fromkeys(wanted):
        importlib.import_module(name).register(sub, parents)
    return parser


def _local_data(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """--data (or STEPMARK_DATA) holds the SQLite store and recorded episodes on a local disk for every command:
    a bucket URL is refused here, once for all of them, before a folder named `s3:` is made."""
    data = getattr(args, "data", None)
    if data is None:
        return
    given = any(a == "--data" or a.startswith("--data=") for a in argv)
    what = "--data" if given or os.environ.get("STEPMARK_DATA") != data else "STEPMARK_DATA"
    from pipelines.storage import local_path

    local = local_path(data, what, args.command)
    if data.startswith("file://"):
        args.data = str(local)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if getattr(args, "user", "absent") is None and getattr(args, "user_defaults_to_login", True):
        args.user = default_user()
    try:
        _local_data(args, argv)
        code = args.func(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except StepmarkError as exc:
        print(f"stepmark {args.command}: error: {exc}{_errno_suffix(exc, _database_of(args))}", file=sys.stderr)
        return 2
    except Exception as exc:
        line = io_error_line(exc, database=_database_of(args))
        if line is None:
            raise
        # Some writers (TensorFlow's) raise without a file name: the command's own output names the place.
        target = getattr(args, "out", None) or getattr(args, "output", None)
        if target and str(target) not in line:
            line += f" (while writing {target})"
        elif not target and ": " not in line.split(" (", 1)[0] and getattr(args, "data", None):
            line += f" (under --data {args.data})"  # no file named: at least the folder the command writes
        print(f"stepmark {args.command}: error: {line}", file=sys.stderr)
        return 1
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
