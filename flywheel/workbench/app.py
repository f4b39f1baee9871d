"""The workbench's routes: pages (HTML from templates/, scripts and styles from static/, nothing from a CDN) and a
JSON API the pages call. Pages read only what they show, with filters (an assignment list, one live session, one
sample's episodes by id), never a scan of the episodes table, so they load fast on a big lake.
"""

from __future__ import annotations

import base64
import io
import secrets
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.middleware.sessions import SessionMiddleware

from flywheel.people.upload import Landing, check_bundle
from flywheel.workbench import auth
from flywheel.workbench.auth import current_user, require, require_owner
from flywheel.workbench.live import LiveSession, LiveSessions, to_action
from flywheel.workbench.recording import upload_limits
from flywheel.workbench.store import Store, User
from schemas.actions import ActionError
from storage.lake import Lake

HERE = Path(__file__).resolve().parent
MAX_UPLOAD_BYTES = 512 * 1024**2
CSP = (
    "default-src 'self'; img-src 'self' data: blob:; media-src 'self' blob:; script-src 'self'; "
    "style-src 'self'; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)


@dataclass(frozen=True)
class WorkbenchConfig:
    lake: str
    landing: str
    round: int = 0  # the round that landed sessions are ingested into
    secret: str | None = None  # signs session cookies; a random one per start when None
    secure_cookies: bool = True
    max_upload_bytes: int = MAX_UPLOAD_BYTES
    model: str | None = None  # a model folder for proposals instead of the lake's newest checkpoint
    proposals: int = 3


def create_app(cfg: WorkbenchConfig) -> FastAPI:
    from flywheel.workbench.proposals import Proposer

    app = FastAPI(title="Flywheel workbench", docs_url=None, redoc_url=None, openapi_url=None)
    lake = Lake.open(cfg.lake)
    landing = Landing.open(cfg.landing)
    app.state.cfg, app.state.lake, app.state.landing = cfg, lake, landing
    app.state.store = Store(landing.store)
    app.state.live = LiveSessions()
    app.state.proposer = Proposer(lake, cfg.model, k=cfg.proposals)
    templates = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape())

    app.add_middleware(auth.CSRFMiddleware)
    app.add_middleware(
        SessionMiddleware, secret_key=cfg.secret or secrets.token_urlsafe(32), session_cookie=auth.COOKIE,
        max_age=12 * 3600, same_site="strict", https_only=cfg.secure_cookies,
    )  # fmt: skip
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.middleware("http")
    async def headers(request: Request, call_next: Any) -> Response:
        resp = await call_next(request)
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Content-Type-Options"] = "nosniff"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 401 and not request.url.path.startswith("/api/"):
            return RedirectResponse("/login", status_code=303)
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)

    def page(request: Request, name: str, user: User | None, **ctx: Any) -> HTMLResponse:
        html = templates.get_template(name).render(user=user, csrf=auth.csrf_token(request), **ctx)
        return HTMLResponse(html)

    async def body(request: Request) -> dict[str, Any]:
        try:
            data = await request.json()
        except ValueError:
            raise HTTPException(400, "the request body is not JSON") from None
        if not isinstance(data, dict):
            raise HTTPException(400, "the request body must be a JSON object")
        return data

    def live_of(sid: str, user: User) -> LiveSession:
        s = app.state.live.get(sid)
        if s is None:
            raise HTTPException(404, f"no live session {sid!r}")
        require_owner(user, s.owner)
        return s

    # ----------------------------------------------------------------------------------------- login
    @app.get("/login", response_class=HTMLResponse)
    def login_page(request: Request) -> HTMLResponse:
        return page(request, "login.html", None)

    @app.post("/api/login")
    async def login(request: Request) -> dict[str, Any]:
        data = await body(request)
        u = app.state.store.authenticate(str(data.get("username", "")), str(data.get("password", "")))
        if u is None:
            raise HTTPException(401, "wrong user name or password")
        request.session.clear()
        request.session.update(user=u.username, csrf=secrets.token_urlsafe(32))  # a new token after login
        return {"user": u.username, "role": u.role, "csrf": request.session["csrf"], "next": "/"}

    @app.post("/api/logout")
    def logout(request: Request) -> dict[str, Any]:
        request.session.clear()
        return {"ok": True}

    # ------------------------------------------------------------------------------------------ home
    @app.get("/", response_class=HTMLResponse)
    def home(request: Request, user: User = Depends(current_user)) -> HTMLResponse:
        import pyarrow as pa
        import pyarrow.compute as pc

        mine = app.state.store.assignments(user.username)
        sids = [a.session_id for a in mine if a.session_id]
        ingested = {}
        if sids:
            flt = pc.field("session_id").isin(pa.array(sids, pa.string()))
            cols = ["session_id", "status", "round", "thought_share", "override_rate", "n_actions"]
            ingested = {r["session_id"]: r for r in lake.read("sessions", cols, filter=flt).to_pylist()}
        return page(request, "home.html", user, assignments=mine, ingested=ingested)

    @app.get("/sessions/{sid}", response_class=HTMLResponse)
    def session_page(request: Request, sid: str, user: User = Depends(current_user)) -> HTMLResponse:
        """A landed session once ingested: its transcript (each action with the thought aligned to it)."""
        import pyarrow.compute as pc

        owner = next((a.annotator for a in app.state.store.assignments() if a.session_id == sid), None)
        if owner is None:
            raise HTTPException(404, f"no workbench session {sid!r}")
        require_owner(user, owner)
        cols = ["session_id", "status", "round", "thought_share", "override_rate", "n_actions", "asr_confidence",
                "problems"]  # fmt: skip
        rows = lake.read("sessions", cols, filter=pc.field("session_id") == sid).to_pylist()
        steps = []
        if rows and rows[0]["round"] is not None:
            flt = (pc.field("round") == rows[0]["round"]) & (pc.field("session_id") == sid)
            for ep in lake.read("episodes", ["steps"], filter=flt).to_pylist():
                steps += ep["steps"] or []
        return page(request, "session.html", user, sid=sid, row=rows[0] if rows else None, steps=steps)

    @app.get("/api/assignments")
    def assignments(annotator: str | None = None, user: User = Depends(current_user)) -> list[dict[str, Any]]:
        who = annotator or user.username
        require_owner(user, who)
        return [asdict(a) for a in app.state.store.assignments(who)]

    @app.get("/lead", response_class=HTMLResponse)
    def lead_page(request: Request, user: User = Depends(current_user)) -> HTMLResponse:
        from flywheel.workbench.lead import lead_view

        require(user, "lead")
        return page(request, "lead.html", user, **lead_view(lake, landing, app.state.store))

    @app.post("/api/assign")
    async def assign(request: Request, user: User = Depends(current_user)) -> list[dict[str, Any]]:
        """A lead gives an annotator n training tasks of the sandbox (never held-out ones): drawn by `seed`, or with
        `round` the next n of the tasks that round of the engine published (landing/assignments/round-R.json) that
        nobody has in this mode yet."""
        from training.envs import env_backend

        require(user, "lead")
        data = await body(request)
        try:
            n, seed = int(data.get("n", 1)), int(data.get("seed", 0))
        except (TypeError, ValueError):
            raise HTTPException(400, "n and seed must be integers") from None
        if not 1 <= n <= 200:
            raise HTTPException(400, "n must be between 1 and 200")
        mode = str(data.get("mode", "annotate"))
        if data.get("round") is not None:  # the round engine's published tasks, each to one annotator only
            from core.errors import InputError
            from flows.stages import assignment_tasks, assignments_key

            try:
                r = int(data["round"])
                key = assignments_key(r)
                published = assignment_tasks(landing.store.get_text(key), r, key)
            except InputError as e:
                raise HTTPException(400, e.one_line()) from None
            except (TypeError, ValueError):
                raise HTTPException(400, "round must be an integer") from None
            taken = {a.task_id for a in app.state.store.assignments() if a.mode == mode}
            tasks = [t for t in published if t.task_id not in taken][:n]
            if not tasks:
                raise HTTPException(409, f"every task round {data['round']} published is assigned already")
        else:
            tasks = env_backend("sandbox").training_tasks(n, seed)
        try:
            out = app.state.store.assign(str(data.get("annotator", "")), tasks, user.username, mode)
        except ValueError as e:
            raise HTTPException(400, str(e)) from None
        return [asdict(a) for a in out]

    # ------------------------------------------------------------------------------ live sessions
    def ensure_proposals(s: LiveSession) -> None:
        """The current step's proposals, made once per step (what the person saw is what gets stored)."""
        if s.mode == "annotate" and not s.done and not s.proposals:
            s.proposals = app.state.proposer.propose(s.task.instruction, s.history(), s.env.observation().text)

    def state(s: LiveSession) -> dict[str, Any]:
        ensure_proposals(s)
        png = s.screenshot()
        v = s.env.verify() if s.done else None
        return {
            "session_id": s.session_id, "mode": s.mode, "task_id": s.task.task_id, "instruction": s.task.instruction,
            "step": len(s.steps), "done": s.done, "outcome": s.env.outcome, "passed": None if v is None else v.passed,
            "reason": None if v is None else v.reason, "error": s.error, "landed": s.landed,
            "width": s.task.width, "height": s.task.height,
            "screenshot": "data:image/png;base64," + base64.b64encode(png).decode(),
            "proposals": [asdict(p) for p in s.proposals],
            "history": [{"thought": st.thought, "action": st.action, "decision": st.decision} for st in s.steps],
        }  # fmt: skip

    @app.post("/api/live")
    async def start_live(request: Request, user: User = Depends(current_user)) -> dict[str, Any]:
        from sandbox.tasks import Task

        data = await body(request)
        a = app.state.store.assignment(str(data.get("assignment_id", "")))
        if a is None:
            raise HTTPException(404, "no such assignment")
        require_owner(user, a.annotator)
        s = app.state.live.start(a.annotator, Task.from_dict(a.task), a.mode, a.assignment_id)
        return {"session_id": s.session_id, "url": f"/live/{s.session_id}"}

    @app.get("/live/{sid}", response_class=HTMLResponse)
    def live_page(request: Request, sid: str, user: User = Depends(current_user)) -> HTMLResponse:
        s = live_of(sid, user)
        return page(request, "live.html", user, s=s)

    @app.get("/api/live/{sid}")
    def live_state(sid: str, user: User = Depends(current_user)) -> dict[str, Any]:
        s = live_of(sid, user)
        with s.lock:
            return state(s)

    @app.post("/api/live/{sid}/act")
    async def live_act(sid: str, request: Request, user: User = Depends(current_user)) -> dict[str, Any]:
        """One step: {"accept": i} runs proposal i; {"input": {kind, x, y, ...}, "thought": ...} runs the
        person's own action (an override in annotate mode, where the thought is required)."""
        s = live_of(sid, user)
        data = await body(request)
        return await run_in_threadpool(act, s, data)  # the env and the model run off the event loop

    def act(s: LiveSession, data: dict[str, Any]) -> dict[str, Any]:
        with s.lock:
            if s.done:
                raise HTTPException(409, "the episode is over; finish the session")
            ensure_proposals(s)
            if "accept" in data:
                if s.mode != "annotate":
                    raise HTTPException(400, "there are no proposals to accept in this session")
                i = data["accept"]
                if not isinstance(i, int) or not 0 <= i < len(s.proposals):
                    raise HTTPException(400, f"accept must be a proposal index below {len(s.proposals)}")
                p = s.proposals[i]
                s.act(p.action, p.thought, decision="accepted", accepted_index=i)
            else:
                try:
                    action = to_action(data.get("input"))  # type: ignore[arg-type]
                except ActionError as e:
                    raise HTTPException(400, f"bad action: {e}") from None
                thought = " ".join(str(data.get("thought") or "").split())
                if s.mode == "annotate":
                    if not thought:
                        raise HTTPException(400, "an override needs your thought: say why this action")
                    s.act(action, thought, decision="overridden")
                else:
                    t = data.get("t")
                    s.act(action, thought, t_client=float(t) if isinstance(t, (int, float)) else None)
            return state(s)

    @app.post("/api/live/{sid}/events")
    async def live_events(sid: str, request: Request, user: User = Depends(current_user)) -> dict[str, Any]:
        """Think-aloud: the recording's pointer and key events (sent before its audio)."""
        from flywheel.workbench.recording import RecordingError, clean_events

        s = live_of(sid, user)
        data = await body(request)
        try:
            s.events = clean_events(data.get("events"))
        except RecordingError as e:
            raise HTTPException(400, str(e)) from None
        return {"events": len(s.events)}

    @app.post("/api/live/{sid}/audio")
    async def live_audio(sid: str, request: Request, user: User = Depends(current_user)) -> dict[str, Any]:
        """Think-aloud: the recorded audio (the raw body, size-limited while it streams); builds, checks and lands
        the session's bundle."""
        from flywheel.workbench.recording import RecordingError, land_recording

        s = live_of(sid, user)
        if s.mode != "think-aloud":
            raise HTTPException(400, "this is not a think-aloud session")
        buf = io.BytesIO()
        await receive(request, buf)
        audio = buf.getvalue()
        owner = app.state.store.user(s.owner)

        def land() -> Response | dict[str, Any]:
            with s.lock:
                try:
                    res = land_recording(s, s.events, audio, landing, owner.group if owner else None,
                                         cfg.max_upload_bytes)  # fmt: skip
                except RecordingError as e:
                    return JSONResponse({"error": str(e), "problems": [str(p) for p in e.problems]}, status_code=422)
                s.landed = True
                if s.assignment_id:
                    app.state.store.mark_done(s.assignment_id, s.session_id)
            return res

        return await run_in_threadpool(land)

    @app.post("/api/live/{sid}/finish")
    def live_finish(sid: str, user: User = Depends(current_user)) -> dict[str, Any]:
        from flywheel.workbench.annotation import land_session

        s = live_of(sid, user)
        if s.mode != "annotate":
            raise HTTPException(400, "only annotation sessions are landed from here")
        with s.lock:
            owner = app.state.store.user(s.owner)
            try:
                res = land_session(lake, landing, s, cfg.round, owner.group if owner else None)
            except ValueError as e:
                raise HTTPException(400, str(e)) from None
            s.landed = True
            if s.assignment_id:
                app.state.store.mark_done(s.assignment_id, s.session_id)
        return asdict(res)

    # ------------------------------------------------------------------------------------------ audit
    def sample_of(sample_id: str):  # noqa: ANN202 - audits.Sample
        from flywheel.workbench.audits import get_sample

        smp = get_sample(landing.store, sample_id)
        if smp is None:
            raise HTTPException(404, f"no audit sample {sample_id!r}")
        return smp

    @app.get("/audit", response_class=HTMLResponse)
    def audit_home(request: Request, user: User = Depends(current_user)) -> HTMLResponse:
        from flywheel.workbench.audits import samples

        require(user, "auditor")
        return page(request, "audit.html", user, samples=samples(landing.store))

    @app.post("/api/audit/sample")
    async def audit_sample(request: Request, user: User = Depends(current_user)) -> dict[str, Any]:
        from flywheel.workbench.audits import draw_sample

        require(user, "auditor")
        data = await body(request)
        try:
            rnd, n, seed = int(data.get("round", 0)), int(data.get("n", 20)), int(data.get("seed", 0))
            smp = await run_in_threadpool(draw_sample, lake, landing.store, rnd, n, seed, user.username)
        except (TypeError, ValueError) as e:
            raise HTTPException(400, str(e)) from None
        return {"sample_id": smp.sample_id, "n": len(smp.episode_ids), "url": f"/audit/{smp.sample_id}/0"}

    @app.get("/audit/{sample_id}/{i}", response_class=HTMLResponse)
    def audit_episode(request: Request, sample_id: str, i: int, user: User = Depends(current_user)) -> HTMLResponse:
        from flywheel.workbench.audits import episode_view, recorded

        require(user, "auditor")
        smp = sample_of(sample_id)
        if not 0 <= i < len(smp.episode_ids):
            raise HTTPException(404, f"the sample has episodes 0 to {len(smp.episode_ids) - 1}")
        view = episode_view(lake, smp, i, user.username)
        done = recorded(lake, smp, user.username)
        return page(request, "audit_episode.html", user, smp=smp, i=i, n_done=len(done), **view)

    @app.post("/api/audit/{sample_id}/{i}")
    async def audit_verdict(request: Request, sample_id: str, i: int, user: User = Depends(current_user)) -> dict:
        from flywheel.workbench.audits import record_verdict

        require(user, "auditor")
        smp = sample_of(sample_id)
        if not 0 <= i < len(smp.episode_ids):
            raise HTTPException(404, "no such episode in the sample")
        data = await body(request)
        try:
            new = await run_in_threadpool(
                record_verdict, lake, smp, i, user.username, str(data.get("verdict", "")), data.get("note")
            )
        except ValueError as e:
            raise HTTPException(400, str(e)) from None
        nxt = f"/audit/{sample_id}/{i + 1}" if i + 1 < len(smp.episode_ids) else "/audit"
        return {"recorded": new, "next": nxt}

    async def receive(request: Request, sink: Any) -> None:
        """Copy the raw request body into `sink`, refused (413) past the upload limit before it is all read:
        at once when Content-Length says so, else as soon as the stream passes it."""
        limit = cfg.max_upload_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise HTTPException(413, f"the upload is {int(declared):,} bytes, over the limit of {limit:,}")
        n = 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > limit:
                raise HTTPException(413, f"the upload is over the limit of {limit:,} bytes")
            sink.write(chunk)

    # ----------------------------------------------------------------------------------------- upload
    @app.post("/api/upload")
    async def upload(request: Request, name: str = "bundle.zip", user: User = Depends(current_user)) -> dict[str, Any]:
        """A think-aloud bundle (.zip or .tar.gz, the raw request body): size-limited while it streams, then the
        same checks as `flywheel upload`, then the landing area. Nothing is stored before every check passes."""
        require(user, "annotator", "lead")
        suffix = ".tar.gz" if name.endswith((".tar.gz", ".tgz")) else ".zip"
        with tempfile.TemporaryDirectory(prefix="flywheel-workbench-upload-") as tmp:
            path = Path(tmp) / f"upload{suffix}"
            with path.open("wb") as fh:
                await receive(request, fh)
            check = await run_in_threadpool(check_bundle, path, upload_limits(cfg.max_upload_bytes))
            if not check.ok:
                return JSONResponse({"error": "the bundle did not pass its checks",
                                     "problems": [str(p) for p in check.problems]}, status_code=422)  # fmt: skip
            if user.role == "annotator" and check.annotator_id not in (None, user.username):
                raise HTTPException(403, "the bundle names another annotator")
            uri, uploaded = await run_in_threadpool(landing.upload, check, lambda _n: None)
        return {"landed_uri": uri, "uploaded": uploaded, "session_id": check.session_id, "n_actions": check.n_actions}

    return app
