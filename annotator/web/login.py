"""OpenID Connect login for the annotator: Streamlit's `st.login` configured from one TOML file.

`stepmark annotate --login-config FILE` names a file with an `[auth]` table exactly as Streamlit documents it
(`redirect_uri`, `cookie_secret`, `client_id`, `client_secret`, `server_metadata_url`, or one sub-table per
provider). It is read once at start-up, bounded and checked here, and handed to `st.App(secrets=...)`; a missing
key is an error naming the file and the key, not a traceback at the first "Log in".
"""

from __future__ import annotations

import stat
import tomllib
from pathlib import Path
from typing import Any

from pipelines.errors import StepmarkError

MAX_BYTES = 64 * 1024
REQUIRED = ("client_id", "client_secret", "server_metadata_url")


class LoginConfigError(StepmarkError):
    """The login configuration file is missing, unreadable or incomplete."""


def load(path: str | Path) -> dict[str, Any]:
    """The `[auth]` table of `path`, checked; raises LoginConfigError naming the file and what is wrong."""
    path = Path(path)
    try:
        info = path.stat()
    except OSError as exc:
        raise LoginConfigError(f"{path}: cannot read the login configuration: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise LoginConfigError(f"{path}: the login configuration is not a regular file")
    if info.st_size > MAX_BYTES:
        raise LoginConfigError(f"{path}: the login configuration is over {MAX_BYTES} bytes")
    with path.open("rb") as f:
        raw = f.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise LoginConfigError(f"{path}: the login configuration is over {MAX_BYTES} bytes")
    try:
        config = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise LoginConfigError(f"{path}: not a TOML file: {exc}") from None
    auth = config.get("auth")
    if not isinstance(auth, dict):
        raise LoginConfigError(f"{path}: no [auth] table (see Streamlit's st.login documentation)")
    for key in ("redirect_uri", "cookie_secret"):
        if not isinstance(auth.get(key), str) or not auth[key]:
            raise LoginConfigError(f"{path}: [auth] needs {key!r}")
    providers = {k: v for k, v in auth.items() if isinstance(v, dict)} or {"auth": auth}
    for name, provider in providers.items():
        for key in REQUIRED:
            if not isinstance(provider.get(key), str) or not provider[key]:
                table = "[auth]" if name == "auth" else f"[auth.{name}]"
                raise LoginConfigError(f"{path}: {table} needs {key!r}")
    return auth
