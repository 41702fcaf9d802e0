"""The typed name, remembered per browser: a signed, HttpOnly cookie of the annotator's own server.

Without OpenID Connect login (and without `--user`) each annotator types a name; a reload, a deep link or a new
tab starts a new Streamlit session, which would ask again and lose the link's episode and step. So once a name
is typed, the page has this server's route set a cookie naming it (`POST /api/identity`, with a short-lived
page token for that name); the next session reads it from `st.context.cookies` and starts as that person.
"not you?" has the route clear it (`POST /api/identity/forget`). A cookie whose signature does not verify is
ignored (the page asks again). With `--login-config` the routes refuse and the cookie is never read: OIDC
decides who is annotating. Contract: schemas/annotator_identity.md.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from annotator.web import context
from annotator.web.routes_common import error_response
from pipelines.errors import StepmarkError

COOKIE = "stepmark_identity"
MAX_AGE = 90 * 24 * 3600  # a browser is remembered for 90 days after the name was last typed
MAX_NAME = 200  # characters of a typed name kept in the cookie
MAX_COOKIE = 1024
SECRET_ENV = "STEPMARK_IDENTITY_SECRET"
SECRET_FILE = "annotator_identity.key"  # in the data folder, mode 0600, made once
SECRET_BYTES = 32
_SALT = b"stepmark-identity"
PAGE_TOKEN_SECONDS = 300  # the page token that asks the route to set the cookie


class IdentitySecretError(StepmarkError):
    """The signing key file of the data folder cannot be made or read."""


@functools.cache
def secret(data_dir: str) -> bytes:
    """The key that signs identity cookies: `STEPMARK_IDENTITY_SECRET`, else the data folder's own key file,
    created once (never overwritten: every cookie signed with it stays valid across restarts)."""
    from_env = os.environ.get(SECRET_ENV)
    if from_env:
        return from_env.encode("utf-8")
    path = Path(data_dir) / SECRET_FILE
    if not path.exists():
        _create_key(path)
    try:
        with path.open("rb") as f:
            key = f.read(SECRET_BYTES + 1)
    except OSError as exc:
        raise IdentitySecretError(f"{path}: cannot read the identity key: {exc.strerror}") from None
    if len(key) != SECRET_BYTES:  # a half-written file from a crash, or someone else's file: refuse it
        raise IdentitySecretError(f"{path}: the identity key is not {SECRET_BYTES} bytes; remove it to make a new one")
    return key


def _create_key(path: Path) -> None:
    """Write the key whole under a private name, then link it into place: two servers starting on one data
    folder end up with the same key, and no one reads a half-written file."""
    part = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(SECRET_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(part, path)
        except FileExistsError:
            pass  # another server made it first: theirs is the key
    except OSError as exc:
        raise IdentitySecretError(f"{path}: cannot create the identity key: {exc.strerror}") from None
    finally:
        part.unlink(missing_ok=True)


def sign(name: str, key: bytes) -> str:
    """The cookie value naming `name` (HMAC-SHA256, dated so that an old cookie expires)."""
    name = name[:MAX_NAME]
    try:
        import itsdangerous
    except ImportError:
        body = base64.urlsafe_b64encode(
            json.dumps({"u": name, "t": int(time.time())}, separators=(",", ":")).encode()
        ).rstrip(b"=")
        return (body + b"." + _mac(key, body)).decode("ascii")
    return _serializer(itsdangerous, key).dumps(name)


def name_in(value: str | None, key: bytes) -> str | None:
    """The name a cookie value was signed for by `key` and not older than MAX_AGE, else None (tampered,
    foreign, expired or malformed: the page asks again)."""
    if not value or len(value) > MAX_COOKIE:
        return None
    try:
        import itsdangerous
    except ImportError:
        return _stdlib_name(value, key)
    try:
        name = _serializer(itsdangerous, key).loads(value, max_age=MAX_AGE)
    except itsdangerous.BadData:
        return None
    return name if isinstance(name, str) and 0 < len(name) <= MAX_NAME else None


def _serializer(itsdangerous, key: bytes):
    return itsdangerous.URLSafeTimedSerializer(
        key, salt=_SALT, signer_kwargs={"digest_method": hashlib.sha256}
    )


def _mac(key: bytes, body: bytes) -> bytes:
    return base64.urlsafe_b64encode(hmac.new(key, _SALT + b"." + body, hashlib.sha256).digest()).rstrip(b"=")


def _stdlib_name(value: str, key: bytes) -> str | None:
    if value.count(".") != 1:
        return None
    body, mac = value.encode("ascii", "replace").split(b".")
    if not hmac.compare_digest(_mac(key, body), mac):
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(body + b"=" * (-len(body) % 4)))
        name, issued = claims["u"], float(claims["t"])
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or time.time() - issued > MAX_AGE:
        return None
    return name


def routes(settings: context.Settings) -> list[Route]:
    """`POST /api/identity` (the page token's user becomes this browser's cookie) and
    `POST /api/identity/forget` (the cookie is cleared), both with a page token. Both refuse (404) when OIDC
    login is configured."""

    def refused() -> Response | None:
        if settings.login_config is not None:
            return error_response(404, "the typed name is not used with --login-config")
        return None

    def page_user(request: Request) -> str | Response:
        """The user of the page token the request carries (a header: no form or link of another site can)."""
        if (answer := refused()) is not None:
            return answer
        try:
            return context.verify(request.headers.get("x-stepmark-token")).user.strip()
        except context.TokenError as exc:
            return error_response(401, str(exc))

    async def remember(request: Request) -> Response:
        user = page_user(request)
        if isinstance(user, Response):
            return user
        if not user:
            return error_response(400, "no name to remember")
        try:
            key = secret(str(settings.data_dir))
        except IdentitySecretError as exc:
            return error_response(500, str(exc))
        response = JSONResponse({"ok": True}, headers={"cache-control": "no-store"})
        response.set_cookie(COOKIE, sign(user, key), max_age=MAX_AGE, path="/",
                            httponly=True, samesite="lax")  # fmt: skip
        return response

    async def forget(request: Request) -> Response:
        if isinstance(answer := page_user(request), Response):
            return answer
        response = JSONResponse({"ok": True}, headers={"cache-control": "no-store"})
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="lax")
        return response

    return [
        Route("/api/identity", remember, methods=["POST"]),
        Route("/api/identity/forget", forget, methods=["POST"]),
    ]

