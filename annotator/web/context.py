"""What the pages and the routes of one annotator server share: its settings, the store, open episode readers,
and the tokens that tie a browser's requests to the annotator the page was shown to.

Everything here is process-wide: the Streamlit script and the Starlette routes run in the same process (`st.App`),
so an episode opened by the Replay page is the same reader the frame route serves from.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.errors import StepmarkError

TOKEN_SECONDS = 12 * 3600
# The one secret of this server process: a token minted by a page is only valid on the server that showed it.
_SECRET = secrets.token_bytes(32)


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    store: str | None
    user: str | None
    host: str = "127.0.0.1"
    port: int | None = None
    login_config: Path | None = None  # a TOML file with Streamlit's [auth] table: OIDC login (st.login)


def settings() -> Settings:
    """From the arguments after `--` of `streamlit run`, else the STEPMARK_* environment variables."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--data", default=os.environ.get("STEPMARK_DATA", "./stepmark-data"))
    parser.add_argument("--store", default=os.environ.get("STEPMARK_STORE"))
    parser.add_argument("--user", default=os.environ.get("STEPMARK_USER"))
    parser.add_argument("--host", default=os.environ.get("STEPMARK_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=None)
    parser.add_argument("--login-config", default=os.environ.get("STEPMARK_LOGIN_CONFIG"))
    args, _ = parser.parse_known_args(sys.argv[1:])
    from pipelines.storage import local_path

    login = local_path(args.login_config, "--login-config", "annotate", "file") if args.login_config else None
    return Settings(
        data_dir=local_path(args.data, "--data", "annotate").expanduser().resolve(),
        store=args.store,
        user=args.user or None,
        host=args.host,
        port=args.port,
        login_config=login.expanduser().resolve() if login else None,
    )


@functools.cache
def repository(store: str | None, data_dir: str):
    """One repository (connection pool) per process, shared by every page session and every route."""
    from pipelines.store import open_store

    Path(data_dir).mkdir(parents=True, exist_ok=True)
    return open_store(store, data_dir)


@functools.cache
def readers(data_dir: str):
    """Open episode readers, least recently used closed first (pages and routes share them)."""
    from annotator.readers import ReaderCache

    return ReaderCache(data_dir, max_open=16)


class TokenError(StepmarkError):
    """A request without a valid token of this server: refused (401)."""


@dataclass(frozen=True)
class Claims:
    user: str
    expires: float


def mint(user: str, seconds: int = TOKEN_SECONDS) -> str:
    """A token for `user`, handed to the browser inside the page that this user was shown."""
    if not user:
        raise TokenError("no user to mint a token for")
    body = base64.urlsafe_b64encode(
        json.dumps({"u": user, "e": int(time.time()) + seconds}, separators=(",", ":")).encode()
    ).rstrip(b"=")
    return (body + b"." + _sign(body)).decode("ascii")


def verify(token: str | None) -> Claims:
    """The claims of a token minted by this process, or TokenError."""
    if not token or token.count(".") != 1 or len(token) > 4096:
        raise TokenError("missing or malformed token")
    body, signature = token.encode("ascii", "replace").split(b".")
    if not hmac.compare_digest(_sign(body), signature):
        raise TokenError("token not issued by this server")
    try:
        claims = json.loads(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
        user, expires = str(claims["u"]), float(claims["e"])
    except (ValueError, KeyError, TypeError) as exc:
        raise TokenError("malformed token") from exc
    if expires < time.time():
        raise TokenError("token expired: reload the page")
    return Claims(user=user, expires=expires)


def _sign(body: bytes) -> bytes:
    return base64.urlsafe_b64encode(hmac.new(_SECRET, body, hashlib.sha256).digest()).rstrip(b"=")


_shutdown_hooks: list = []


def on_shutdown(hook) -> None:
    """Run `hook()` when the server stops (recordings in progress are closed as ABANDONED there)."""
    _shutdown_hooks.append(hook)


def run_shutdown_hooks() -> None:
    while _shutdown_hooks:
        hook = _shutdown_hooks.pop()
        try:
            hook()
        except Exception as exc:  # noqa: BLE001 - one failing hook must not keep the others from running
            print(f"stepmark: shutdown hook {hook!r} failed: {exc}", file=sys.stderr)
