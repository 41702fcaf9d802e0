"""`--login-config`: the [auth] table is read bounded, checked, and refused with the file and key named."""

from __future__ import annotations

import os

import pytest

from annotator.web import login

GOOD = """[auth]
redirect_uri = "http://127.0.0.1:8501/oauth2callback"
cookie_secret = "s3cret"
client_id = "stepmark"
client_secret = "x"
server_metadata_url = "http://127.0.0.1:9400/.well-known/openid-configuration"
"""


def test_a_complete_auth_table_is_returned(tmp_path):
    path = tmp_path / "login.toml"
    path.write_text(GOOD)
    assert login.load(path)["client_id"] == "stepmark"


def test_named_providers_are_checked_one_by_one(tmp_path):
    path = tmp_path / "login.toml"
    path.write_text('[auth]\nredirect_uri = "r"\ncookie_secret = "c"\n[auth.google]\nclient_id = "a"\n')
    with pytest.raises(login.LoginConfigError, match=r"\[auth.google\] needs 'client_secret'"):
        login.load(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no \\[auth\\] table"),
        ("[auth\n", "not a TOML file"),
        (GOOD.replace('cookie_secret = "s3cret"\n', ""), "needs 'cookie_secret'"),
        (GOOD.replace('client_id = "stepmark"\n', ""), "needs 'client_id'"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(tmp_path, text, message):
    path = tmp_path / "login.toml"
    path.write_text(text)
    with pytest.raises(login.LoginConfigError, match=message) as refused:
        login.load(path)
    assert str(path) in str(refused.value)


def test_non_regular_and_oversized_files_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    with pytest.raises(login.LoginConfigError, match="not a regular file"):
        login.load(fifo)  # would block forever if it were opened for reading
    big = tmp_path / "big.toml"
    big.write_text("#" * (login.MAX_BYTES + 1))
    with pytest.raises(login.LoginConfigError, match="over"):
        login.load(big)
    with pytest.raises(login.LoginConfigError, match="cannot read"):
        login.load(tmp_path / "missing.toml")
