"""`stepmark annotate`: the browser annotator over the store and episode files."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from pipelines.errors import StepmarkError


def register(subparsers: argparse._SubParsersAction, parents: dict[str, argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "annotate",
        parents=[parents["store"]],
        help="browse, replay, tag, record and export episodes in the browser",
        description="Start the Streamlit annotator headless on 127.0.0.1 and print its URL. Who is annotating: "
        "--login-config (OpenID Connect), else --user, else each annotator types a name in the sidebar (the "
        "login name is not taken: on a shared machine it names whoever started the server).",
    )
    p.add_argument("--port", type=int, default=8501, help="loopback port to listen on (0: any free port)")
    p.add_argument("--login-config", metavar="FILE",
                   help="TOML file with Streamlit's [auth] table: annotators log in with OpenID Connect "
                   "(their e-mail is recorded with every change; --user is then ignored)")  # fmt: skip
    p.set_defaults(func=annotate, user_defaults_to_login=False)


def check_writable(data_dir: Path, store: str | None) -> None:
    """A full or read-only disk is said here, in one line naming the folder and the errno, not as a traceback
    in the server's log at the first tag: a small file is written and removed in DATA, and the store opened."""
    probe = data_dir / f".stepmark-write-check-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 65536)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(data_dir)) from exc
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    from pipelines.episodes.publish import open_store

    open_store(store, data_dir).close()


def annotate(args: argparse.Namespace) -> int:
    from annotator import launch
    from pipelines.storage import local_path

    login_file = local_path(args.login_config, "--login-config", "annotate", "file") if args.login_config else None
    data_dir = Path(args.data).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    check_writable(data_dir, args.store)
    if not 0 <= args.port <= 65535:
        raise StepmarkError(f"--port {args.port} is not a TCP port")
    login_config = None
    if login_file is not None:
        from annotator.web import login

        login_config = login_file.expanduser().resolve()
        login.load(login_config)  # refused here, with the file and key named, not at the first "Log in"
    config = launch.LaunchConfig(
        data_dir=data_dir,
        store=args.store,
        user=None if login_config else args.user,
        port=args.port or launch.free_port(),
        login_config=login_config,
    )
    who = "logged-in annotators (OpenID Connect)" if login_config else args.user or "annotators who give their name"
    print(f"stepmark annotator for {who} over {args.store or data_dir / 'stepmark.db'}", flush=True)
    print(f"open {launch.url(config)} in a browser (Ctrl+C stops it)", flush=True)
    return launch.run(config)
