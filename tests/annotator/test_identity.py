"""The identity cookie's signing (annotator/web/identity.py): the data folder's key is made once (0600) and kept,
a cookie verifies only under its key, unchanged and not expired, with itsdangerous and with the stdlib fallback;
the routes set and clear the cookie (HttpOnly, SameSite=Lax, Path=/) and refuse under OIDC login."""

from __future__ import annotations

import builtins
import os
import stat
import time

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from annotator.web import context, identity


@pytest.fixture(autouse=True)
def _fresh_keys(monkeypatch):
    monkeypatch.delenv(identity.SECRET_ENV, raising=False)
    identity.secret.cache_clear()
    yield
    identity.secret.cache_clear()


@pytest.fixture(params=["itsdangerous", "stdlib"])
def signer(request, monkeypatch):
    if request.param == "stdlib":
        real_import = builtins.__import__

        def no_itsdangerous(name, *args, **kwargs):
            if name == "itsdangerous":
                raise ImportError(name)
            return real_import(name, *args, **kwargs)

        monkeypatch.setattr(builtins, "__import__", no_itsdangerous)
    return request.param


def test_the_data_folders_key_is_made_once_with_mode_0600_and_kept(tmp_path):
    key = identity.secret(str(tmp_path))
    path = tmp_path / identity.SECRET_FILE
    assert len(key) == identity.SECRET_BYTES and path.read_bytes() == key
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    identity.secret.cache_clear()  # a restarted server reads the same key: old cookies stay valid
    assert identity.secret(str(tmp_path)) == key


def test_a_key_already_made_by_another_server_is_the_key(tmp_path):
    theirs = os.urandom(identity.SECRET_BYTES)
    (tmp_path / identity.SECRET_FILE).write_bytes(theirs)
    assert identity.secret(str(tmp_path)) == theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == [identity.SECRET_FILE]  # nothing left beside it


def test_a_cut_key_file_is_refused_naming_it(tmp_path):
    (tmp_path / identity.SECRET_FILE).write_bytes(b"short")
    with pytest.raises(identity.IdentitySecretError, match=identity.SECRET_FILE):
        identity.secret(str(tmp_path))
    answer = _client(tmp_path).post("/api/identity", headers={"x-stepmark-token": context.mint("dana")})
    assert answer.status_code == 500 and identity.SECRET_FILE in answer.json()["error"]
    assert "set-cookie" not in answer.headers
    assert (tmp_path / identity.SECRET_FILE).read_bytes() == b"short"  # never overwritten


def test_the_key_can_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(identity.SECRET_ENV, "a shared secret of the team")
    assert identity.secret(str(tmp_path)) == b"a shared secret of the team"
    assert not (tmp_path / identity.SECRET_FILE).exists()


def test_a_cookie_names_its_person_only_under_its_key_unchanged_and_fresh(signer, monkeypatch):
    key, other = os.urandom(32), os.urandom(32)
    value = identity.sign("dana@example.com", key)
    assert value.count(".") == (1 if signer == "stdlib" else 2)  # body.mac, or itsdangerous' body.time.mac
    assert identity.name_in(value, key) == "dana@example.com"
    assert identity.name_in(value, other) is None
    payload, _, mac = value.rpartition(".")
    assert identity.name_in(payload + "." + ("A" if mac[0] != "A" else "B") + mac[1:], key) is None
    forged = identity.sign("mallory@example.com", other).split(".")[0] + value[len(value.split(".")[0]) :]
    assert identity.name_in(forged, key) is None
    for junk in ("", "x", "a.b", "a.b.c", "." * 3, "z" * (identity.MAX_COOKIE + 1)):
        assert identity.name_in(junk, key) is None
    later = time.time() + identity.MAX_AGE + 60
    monkeypatch.setattr(time, "time", lambda: later)
    assert identity.name_in(value, key) is None  # expired


def _client(tmp_path, login_config=None) -> TestClient:
    settings = context.Settings(data_dir=tmp_path, store=None, user=None, login_config=login_config)
    return TestClient(Starlette(routes=identity.routes(settings)), base_url="http://127.0.0.1")


def test_the_route_sets_the_cookie_for_the_page_tokens_user_and_clears_it(tmp_path):
    client = _client(tmp_path)
    assert client.post("/api/identity").status_code == 401  # no page token: nobody to remember
    assert client.post("/api/identity", headers={"x-stepmark-token": "forged.token"}).status_code == 401
    answer = client.post("/api/identity", headers={"x-stepmark-token": context.mint("dana@example.com")})
    assert answer.status_code == 200
    header = answer.headers["set-cookie"]
    assert header.startswith(identity.COOKIE + "=")
    assert {"httponly", "samesite=lax", "path=/"} <= {p.strip().lower() for p in header.split(";")}
    value = header.split(";")[0].split("=", 1)[1]
    assert identity.name_in(value, identity.secret(str(tmp_path))) == "dana@example.com"
    assert client.post("/api/identity/forget").status_code == 401
    token = {"x-stepmark-token": context.mint("dana@example.com")}
    cleared = client.post("/api/identity/forget", headers=token).headers["set-cookie"].lower()
    assert cleared.startswith(identity.COOKIE + '=""') and "max-age=0" in cleared


def test_with_openid_connect_login_the_routes_refuse(tmp_path):
    client = _client(tmp_path, login_config=tmp_path / "login.toml")
    token = context.mint("dana@example.com")
    assert client.post("/api/identity", headers={"x-stepmark-token": token}).status_code == 404
    assert client.post("/api/identity/forget", headers={"x-stepmark-token": token}).status_code == 404
    assert not (tmp_path / identity.SECRET_FILE).exists()
