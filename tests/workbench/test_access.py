"""Accounts, roles, sessions, CSRF and upload limits of the workbench, over the real app, lake and landing area."""

from __future__ import annotations

import json
from pathlib import Path

from tests.workbench.conftest import PASSWORD, client, csrf_of


def _assign(b, annotator: str = "alice", n: int = 2, mode: str = "annotate") -> list[dict]:
    r = client(b, "lena").post("/api/assign", json={"annotator": annotator, "n": n, "seed": 3, "mode": mode})
    assert r.status_code == 200, r.text
    return r.json()


def test_passwords_are_argon2_hashes_and_wrong_ones_are_refused(bench) -> None:
    raw = (bench.landing / ".workbench" / "users.json").read_text()
    assert PASSWORD not in raw
    assert json.loads(raw)["alice"]["password_hash"].startswith("$argon2id$")
    c = client(bench)
    assert c.post("/api/login", json={"username": "alice", "password": "wrong password"}).status_code == 401
    assert c.post("/api/login", json={"username": "nobody", "password": PASSWORD}).status_code == 401
    assert c.get("/", follow_redirects=False).status_code == 303  # not logged in: to the login page
    assert c.get("/api/assignments").status_code == 401


def test_session_cookie_is_signed_httponly_strict_and_secure(bench) -> None:
    c = client(bench)
    r = c.post("/api/login", json={"username": "alice", "password": PASSWORD})
    cookie = r.headers["set-cookie"].lower()
    for flag in ("httponly", "samesite=strict", "secure"):
        assert flag in cookie
    assert c.get("/").status_code == 200
    # a tampered cookie is not a session
    name = "flywheel_workbench"
    value = c.cookies.get(name)
    c2 = client(bench)
    c2.cookies.set(name, value[:-3] + "xyz")
    assert c2.get("/", follow_redirects=False).status_code == 303


def test_requests_without_the_csrf_token_are_refused(bench) -> None:
    c = client(bench, "lena")
    token = c.headers.pop("X-CSRF-Token")
    r = c.post("/api/assign", json={"annotator": "alice", "n": 1})
    assert r.status_code == 403 and "csrf" in r.json()["error"]
    r = c.post("/api/assign", json={"annotator": "alice", "n": 1}, headers={"X-CSRF-Token": token[::-1]})
    assert r.status_code == 403
    assert bench.app.state.store.assignments("alice") == []  # nothing changed
    assert (
        c.post("/api/assign", json={"annotator": "alice", "n": 1}, headers={"X-CSRF-Token": token}).status_code == 200
    )
    # login itself needs the token of the login page
    fresh = client(bench)
    fresh.headers.pop("X-CSRF-Token")
    assert fresh.post("/api/login", json={"username": "alice", "password": PASSWORD}).status_code == 403


def test_annotators_see_only_their_own_tasks_and_sessions(bench) -> None:
    tasks = _assign(bench, "alice")
    alice, bob = client(bench, "alice"), client(bench, "bob")
    assert [a["task_id"] for a in alice.get("/api/assignments").json()] == [t["task_id"] for t in tasks]
    assert tasks[0]["task_id"] in alice.get("/").text
    assert tasks[0]["task_id"] not in bob.get("/").text
    assert bob.get("/api/assignments?annotator=alice").status_code == 403
    assert bob.post("/api/live", json={"assignment_id": tasks[0]["assignment_id"]}).status_code == 403
    sid = alice.post("/api/live", json={"assignment_id": tasks[0]["assignment_id"]}).json()["session_id"]
    assert bob.get(f"/live/{sid}").status_code == 403
    assert bob.get(f"/api/live/{sid}").status_code == 403
    assert bob.post(f"/api/live/{sid}/act", json={"input": {"kind": "wait"}}).status_code == 403
    assert bob.post(f"/api/live/{sid}/finish").status_code == 403
    assert client(bench, "lena").get("/api/assignments?annotator=alice").status_code == 200  # a lead sees all


def test_roles_gate_the_lead_actions(bench) -> None:
    for who in ("alice", "otto"):
        assert client(bench, who).post("/api/assign", json={"annotator": "alice", "n": 1}).status_code == 403
    assert client(bench, "ada").post("/api/assign", json={"annotator": "alice", "n": 1}).status_code == 200
    r = client(bench, "lena").post("/api/assign", json={"annotator": "otto", "n": 1})
    assert r.status_code == 400 and "not an annotator" in r.json()["error"]
    r = client(bench, "lena").post("/api/assign", json={"annotator": "alice", "n": "lots"})
    assert r.status_code == 400


def test_assignments_are_training_tasks_and_not_repeated(bench) -> None:
    from sandbox.heldout import heldout_tasks

    first = _assign(bench, "alice", n=3)
    again = _assign(bench, "alice", n=3)
    assert [a["assignment_id"] for a in first] == [a["assignment_id"] for a in again]
    assert len(bench.app.state.store.assignments("alice")) == 3
    held = {t.task_id for t in heldout_tasks()}
    assert not held & {a["task_id"] for a in first}


def _bundle(tmp_path: Path, annotator: str = "alice") -> Path:
    from sandbox.demonstrators import Expert
    from sandbox.export import write_think_aloud
    from sandbox.rollout import run_attempt
    from training.envs import env_backend

    task = env_backend("sandbox").training_tasks(1, 5)[0].payload
    attempt = run_attempt(task, Expert(), screenshots=True)
    return write_think_aloud(attempt, tmp_path / "bundles", annotator_id=annotator, speech=False, archive="zip")


def test_upload_checks_and_lands_a_bundle_once(bench, tmp_path: Path) -> None:
    z = _bundle(tmp_path)
    c = client(bench, "alice")
    r = c.post("/api/upload?name=s.zip", content=z.read_bytes())
    assert r.status_code == 200, r.text
    landed = Path(r.json()["landed_uri"])
    assert landed.is_file() and landed.parent == bench.landing and r.json()["uploaded"]
    r = c.post("/api/upload?name=s.zip", content=z.read_bytes())
    assert r.status_code == 200 and not r.json()["uploaded"]  # the same bundle again: a no-op
    # another annotator's bundle is refused for an annotator
    assert client(bench, "bob").post("/api/upload?name=s.zip", content=z.read_bytes()).status_code == 403
    # a broken bundle is refused with the upload checks' codes
    r = c.post("/api/upload?name=x.zip", content=b"PK\x03\x04 not really a zip")
    assert r.status_code == 422 and any(p.startswith("archive_corrupt") for p in r.json()["problems"])
    assert client(bench, "otto").post("/api/upload?name=s.zip", content=z.read_bytes()).status_code == 403


def test_too_large_upload_is_refused_before_it_is_stored(tmp_path: Path, lake) -> None:
    from tests.workbench.conftest import make_bench

    b = make_bench(tmp_path, lake, max_upload_bytes=4096)
    z = _bundle(tmp_path)
    assert z.stat().st_size > 4096
    before = sorted(p.name for p in b.landing.iterdir())
    c = client(b, "alice")
    r = c.post("/api/upload?name=s.zip", content=z.read_bytes())
    assert r.status_code == 413 and "limit" in r.json()["error"]

    def chunks():  # no Content-Length: the limit is enforced while the body streams
        data = z.read_bytes()
        for i in range(0, len(data), 1000):
            yield data[i : i + 1000]

    r = c.post("/api/upload?name=s.zip", content=chunks())
    assert r.status_code == 413
    assert sorted(p.name for p in b.landing.iterdir()) == before


def test_add_user_command_stores_a_hash(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from flywheel.cli import app

    landing = tmp_path / "landing"
    r = CliRunner().invoke(app, ["workbench", "add-user", "carol", "--role", "auditor", "--password", "s3cret-pass",
                                 "--landing", str(landing)])  # fmt: skip
    assert r.exit_code == 0, r.output
    users = json.loads((landing / ".workbench" / "users.json").read_text())
    assert users["carol"]["role"] == "auditor" and "s3cret-pass" not in json.dumps(users)
    r = CliRunner().invoke(app, ["workbench", "add-user", "dan", "--role", "boss", "--password", "s3cret-pass",
                                 "--landing", str(landing)])  # fmt: skip
    assert r.exit_code != 0


def test_pages_send_a_strict_content_security_policy(bench) -> None:
    r = client(bench).get("/login")
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert csrf_of(r.text)
    assert "<script>" not in r.text  # no inline script: the policy would block it


def test_a_lead_assigns_the_tasks_a_round_published_each_to_one_annotator(bench) -> None:
    """`people=humans` rounds publish landing/assignments/round-R.json; the workbench hands those tasks out."""
    from flows.stages import ASSIGNMENTS
    from training.envs import training_tasks

    tasks = training_tasks(3, 77)
    doc = {"format": ASSIGNMENTS, "round": 2, "env": "sandbox", "checkpoint": "objects/x.tar",
           "tasks": [{"task_id": t.task_id, "instruction": t.instruction, "family": t.family, "level": t.level,
                      "seed": t.payload.seed} for t in tasks]}  # fmt: skip
    (bench.landing / "assignments").mkdir(parents=True, exist_ok=True)
    (bench.landing / "assignments" / "round-2.json").write_text(json.dumps(doc))
    lena = client(bench, "lena")
    first = lena.post("/api/assign", json={"annotator": "alice", "n": 2, "round": 2})
    assert first.status_code == 200, first.text
    assert [a["task_id"] for a in first.json()] == [t.task_id for t in tasks[:2]]
    assert first.json()[0]["task"]["seed"] == tasks[0].payload.seed  # rebuilt from the published seed
    rest = lena.post("/api/assign", json={"annotator": "bob", "n": 5, "round": 2}).json()
    assert [a["task_id"] for a in rest] == [tasks[2].task_id]  # never the same task to two annotators
    full = lena.post("/api/assign", json={"annotator": "bob", "n": 1, "round": 2})
    assert full.status_code == 409
    missing = lena.post("/api/assign", json={"annotator": "bob", "n": 1, "round": 9})
    assert missing.status_code == 400 and "no_assignments" in missing.text
    doc["env"] = "miniwob"
    (bench.landing / "assignments" / "round-3.json").write_text(json.dumps(doc))
    other = lena.post("/api/assign", json={"annotator": "bob", "n": 1, "round": 3})
    assert other.status_code == 400 and "wrong_env" in other.text
