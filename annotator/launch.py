"""Starting the annotator: Streamlit, headless, on the loopback interface only.

The app reads its settings from the arguments after `--` (and the same STEPMARK_* environment variables the
command line uses), so `streamlit run annotator/app.py -- --data D` and `stepmark annotate --data D` agree.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

APP = Path(__file__).resolve().parent / "server.py"  # st.App: the pages + the annotator's own routes
HOST = "127.0.0.1"


@dataclass(frozen=True)
class LaunchConfig:
    data_dir: Path
    store: str | None = None
    user: str | None = None
    port: int = 8501
    login_config: Path | None = None


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def url(config: LaunchConfig) -> str:
    return f"http://{HOST}:{config.port}/"


def command(config: LaunchConfig) -> list[str]:
    """The `streamlit run` command line (loopback only, no usage statistics, no browser opened)."""
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(APP),
        "--server.headless", "true",
        "--server.address", HOST,
        "--server.port", str(config.port),
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--client.toolbarMode", "minimal",
        "--runner.magicEnabled", "false",
        "--", "--data", str(config.data_dir),
    ]  # fmt: skip
    if config.store:
        cmd += ["--store", config.store]
    if config.user:
        cmd += ["--user", config.user]
    if config.login_config:
        cmd += ["--login-config", str(config.login_config)]
    return cmd


def start(config: LaunchConfig, **popen_kwargs) -> subprocess.Popen:
    """Start the server in the background (the caller waits on or terminates it)."""
    env = dict(os.environ)
    env.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    return subprocess.Popen(command(config), env=env, **popen_kwargs)


def run(config: LaunchConfig) -> int:
    """Become the Streamlit server (exec): signals such as Ctrl+C or a TERM from a supervisor reach it directly
    and no orphan server is left behind. Returns only if exec fails."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
    cmd = command(config)
    os.execv(cmd[0], cmd)
    return 1  # not reached
