"""What every page shares: the settings, the store, who is annotating, and this browser session's Operations.

The repository and episode readers are process-wide (`annotator.web.context`, shared with the routes): opening an episode once serves every
annotator and every rerun. The `Operations` object is per browser session; it holds only what the protocol keeps
per connection (selected study, replayed episode, running environment). Tags, notes and states go to the store.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import streamlit as st

from annotator import queue_ops
from annotator.operations import Operations
from annotator.plain import md_escape
from annotator.readers import SharedReader
from annotator.web import context, identity
from pipelines.errors import StepmarkError
from protos.rlds_creator import study_pb2

Settings = context.Settings
settings = context.settings


def repository(store: str | None, data_dir: str):
    return context.repository(store, data_dir)


def _reader_for(data_dir: Path):
    shared = context.readers(str(data_dir))

    def open_reader(episode: study_pb2.Episode) -> SharedReader:
        return shared(episode)

    return open_reader


def current_user(config: Settings) -> str | None:
    """`st.user` when OIDC login is configured, else --user, else the name typed into the sidebar."""
    if _login_configured():
        if not st.user.get("is_logged_in"):
            return None
        return str(st.user.get("email") or st.user.get("name") or "")
    if config.user:
        return config.user
    if "_user" not in st.session_state:  # a new session (reload, deep link, new tab): this browser's cookie
        st.session_state["_user"] = _remembered_user(config) or ""
    return st.session_state.get("_user") or None


def _remembered_user(config: Settings) -> str | None:
    """The name this browser's identity cookie was signed for by this data folder's key, else None."""
    try:
        value = st.context.cookies.get(identity.COOKIE)
    except Exception:  # noqa: BLE001 - no browser request behind this run (the test harness)
        return None
    if not value:
        return None
    try:
        key = identity.secret(str(config.data_dir))
    except identity.IdentitySecretError as exc:  # the name is asked for, and the reason shown
        st.sidebar.warning(str(exc))
        return None
    return identity.name_in(value, key)


def _remember_typed_user() -> None:
    # Widget values may be dropped when the page changes; the name is kept under a plain key.
    name = (st.session_state.get("typed_user") or "").strip()[: identity.MAX_NAME]
    st.session_state["_user"] = name
    if name:  # the browser asks this server to set its cookie, with a short-lived token for this name
        _cookie_request("remember", context.mint(name, identity.PAGE_TOKEN_SECONDS))


def _not_me() -> None:
    """"not you?": this session and this browser forget the name; the next one asks again."""
    user = st.session_state.get("_user") or "?"
    st.session_state["_user"] = ""
    st.session_state.pop("typed_user", None)
    _cookie_request("forget", context.mint(user, identity.PAGE_TOKEN_SECONDS))


def _cookie_request(action: str, token: str) -> None:
    st.session_state["_identity_request"] = {"id": secrets.token_hex(8), "action": action, "token": token}


@st.cache_resource(show_spinner=False)
def _identity_component():
    js = (Path(identity.__file__).with_suffix(".js")).read_text(encoding="utf-8")
    return st.components.v2.component("stepmark_identity", js=js)


def _send_cookie_request() -> None:
    """Mount the cookie request until the browser reports it done (the cookie is HttpOnly: only a response of
    this server can set or clear it)."""
    request = st.session_state.get("_identity_request")
    if request is None:
        return
    result = _identity_component()(key="identity_cookie", data=request, on_done_change=_ignore)
    done = result.get("done") if hasattr(result, "get") else getattr(result, "done", None)
    if done and str(done).endswith(request["id"]):
        st.session_state.pop("_identity_request", None)


def _ignore() -> None:
    """State callbacks must exist for the values to reach Python."""


def _login_configured() -> bool:
    try:
        return "auth" in st.secrets
    except (FileNotFoundError, StepmarkError):
        return False
    except Exception:  # noqa: BLE001 - no secrets file at all
        return False


def sidebar_identity(config: Settings) -> str | None:
    """Show (or ask for) who is annotating in the sidebar; returns the user or None when unknown yet."""
    user = current_user(config)
    with st.sidebar:
        if _login_configured():
            if user:
                st.caption(f"Signed in as **{md_escape(user)}**")
                st.button("Log out", on_click=st.logout)
            else:
                st.button("Log in", on_click=st.login, type="primary")
        elif user:
            st.caption(f"Annotating as **{md_escape(user)}**")
            if not config.user:
                st.button("not you?", key="not_me", on_click=_not_me, type="tertiary")
        else:
            st.text_input("Your name or e-mail", key="typed_user", on_change=_remember_typed_user,
                          help="Recorded with every change you make (remembered by this browser)")  # fmt: skip
        if not _login_configured():
            _send_cookie_request()
        st.caption(f"Data: {md_escape(config.data_dir)}")
    return user


def operations() -> Operations:
    """This browser session's Operations (made once the user is known)."""
    ops = st.session_state.get("_ops")
    if ops is None:
        raise StepmarkError("no annotator session yet: enter your name in the sidebar")
    return ops


def start(config: Settings, user: str) -> Operations:
    ops = st.session_state.get("_ops")
    if ops is None or ops.user != user:
        repo = repository(config.store, str(config.data_dir))
        ops = Operations(
            repo, config.data_dir, user, open_reader=_reader_for(config.data_dir), store_url=config.store
        )
        st.session_state["_ops"] = ops
    return ops


def confirm(message: str, icon: str = ":material/check_circle:") -> None:
    """Every stored change is confirmed on screen (kept across the rerun that follows the change)."""
    st.session_state.setdefault("_toasts", []).append((message, icon))


def show_confirmations() -> None:
    for message, icon in st.session_state.pop("_toasts", []):
        st.toast(message, icon=icon)


LIVE_SECONDS = 3  # how often a page that follows the team looks for news (one small query)


def choose_study(ops: Operations, key: str, *, holding: bool = False) -> str | None:
    """The study box of the team pages (Label, Quality). It opens on the study this annotator last worked on
    (with `holding`, first the one where they hold an episode), else the first with a work queue; a choice made
    during this visit stays."""
    studies = {s.id: s.name for s in ops.all_studies()}
    if not studies:
        st.info("No study yet.")
        return None
    if st.session_state.get(key) not in studies:
        st.session_state[key] = queue_ops.default_study(ops, list(studies), holding=holding)
    return st.selectbox("Study", list(studies), format_func=studies.get, key=key)


@st.fragment(run_every=LIVE_SECONDS)
def follow_study(ops: Operations, study_id: str) -> None:
    """Draw the page again when the team changed what it shows (an episode taken, done or given back, a step
    adjudicated), the way the player shows other annotators' tags: nobody has to touch the page."""
    now = queue_ops.activity(ops, study_id)
    key = f"_seen_activity_{study_id}"
    seen = st.session_state.get(key)
    st.session_state[key] = now
    if seen is not None and seen != now:
        st.rerun(scope="app")
