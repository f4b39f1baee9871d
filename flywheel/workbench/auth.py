"""Who is asking, and may they: signed session cookies, CSRF tokens, roles.

The session cookie is Starlette's SessionMiddleware (itsdangerous-signed, HttpOnly, SameSite=Strict, Secure
unless turned off for plain-HTTP tests); it holds only the user name and the CSRF token; the role is read from
the account store on every request, so a changed role takes effect at once. Every request that changes
something (POST, PUT, PATCH, DELETE) must carry the session's CSRF token in the X-CSRF-Token header (pages put
it in a <meta> tag): a form on another site cannot read it, so it cannot forge the request.
"""

from __future__ import annotations

import hmac
import secrets

from fastapi import HTTPException, Request
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import JSONResponse, Response

from flywheel.workbench.store import Store, User

COOKIE = "flywheel_workbench"
CSRF_HEADER = "x-csrf-token"
SAFE = ("GET", "HEAD", "OPTIONS")


def csrf_token(request: Request) -> str:
    """The session's CSRF token (made on first use, also before login, so the login form carries one)."""
    tok = request.session.get("csrf")
    if not tok:
        tok = request.session["csrf"] = secrets.token_urlsafe(32)
    return tok


class CSRFMiddleware(BaseHTTPMiddleware):
    """Refuse (403) any state-changing request whose X-CSRF-Token header does not match the session's token."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.method not in SAFE:
            sent = request.headers.get(CSRF_HEADER, "")
            want = request.session.get("csrf", "")
            if not sent or not want or not hmac.compare_digest(sent, want):
                return JSONResponse({"error": "csrf token missing or wrong"}, status_code=403)
        return await call_next(request)


def current_user(request: Request) -> User:
    """The logged-in user, or 401 (pages turn that into a redirect to /login)."""
    store: Store = request.app.state.store
    name = request.session.get("user")
    u = store.user(name) if name else None
    if u is None:
        raise HTTPException(401, "log in first")
    return u


def require(user: User, *roles: str) -> User:
    """403 unless the user has one of `roles` (admin may do everything)."""
    if user.role != "admin" and user.role not in roles:
        raise HTTPException(403, f"this needs the role {' or '.join(roles)}; you are {user.role}")
    return user


def require_owner(user: User, owner: str) -> None:
    """Annotators see only their own tasks and sessions; leads and admins see everyone's."""
    if user.username != owner and user.role not in ("lead", "admin"):
        raise HTTPException(403, "this belongs to another annotator")
