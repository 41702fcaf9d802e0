"""The annotator's server: the Streamlit pages (`app.py`) and the annotator's own routes in one `st.App`.

`stepmark annotate` runs `streamlit run annotator/server.py -- --data D ...`; Streamlit finds `app` below and serves
it with its own Starlette/Uvicorn server, so pages, frames, step data and the recorder's WebSocket share one origin,
one process and one store.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import streamlit as st
from starlette.middleware import Middleware

from annotator.live.routes import routes as live_routes
from annotator.web import context, guard, identity, login, page_base
from annotator.web.field_routes import routes as field_routes
from annotator.web.grounding_routes import routes as grounding_routes
from annotator.web.replay_routes import routes as replay_routes
from annotator.web.routes_common import unknown_api_route

APP_SCRIPT = Path(__file__).resolve().parent / "app.py"


@asynccontextmanager
async def _lifespan(_app: Any) -> AsyncIterator[None]:
    try:
        yield
    finally:
        context.run_shutdown_hooks()


_settings = context.settings()
_secrets = {"auth": login.load(_settings.login_config)} if _settings.login_config else None

# Written as a plain `st.App(...)` assignment: `streamlit run` finds the app by reading this file's syntax tree.
app = st.App(
    str(APP_SCRIPT),
    routes=[*replay_routes(_settings), *grounding_routes(_settings), *field_routes(_settings), *live_routes(), *identity.routes(_settings), unknown_api_route()],
    middleware=[
        Middleware(guard.OriginGuard, allowed_hosts={*guard.LOOPBACK_NAMES, _settings.host}),
        Middleware(page_base.PageBase),  # pages at /replay etc. name the server's root: no 404s in the console
    ],
    lifespan=_lifespan,
    secrets=_secrets,
)
