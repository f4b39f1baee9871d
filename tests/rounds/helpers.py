"""A tiny round configuration and a landing area with demonstrator data, for the round-flow tests."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

TINY_ROUND = {
    "people": "scripted",  # the annotate stage plays the sandbox's scripted annotator (real work to kill it in)
    "annotate_tasks": 3,
    "eval_per_cell": 1,
    "flywheel": {
        "model": {
            "vocab_size": 600,
            "hidden_size": 48,
            "intermediate_size": 96,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "max_number": 640,
        },
        # a fixed precision: these tests compare two processes' rounds bit for bit (training/precision.py); and no
        # compile, which costs more than these few steps (training/compiled.py)
        "cold_sft": {"steps": 6, "batch_size": 8, "optim": {"bf16": False, "compile": False}},
        "sft": {"steps": 4, "batch_size": 8, "optim": {"bf16": False, "compile": False}},
        "ct": {"steps": 3, "batch_size": 8, "optim": {"bf16": False, "compile": False}},
        "rl": {
            "iterations": 1,
            "tasks_per_iter": 4,
            "group_size": 2,
            "value_pretrain_steps": 2,
            "minibatch_size": 8,
            "ppo_epochs": 1,
        },
        "sampling": {"tasks": 6, "attempts": 2, "max_new_tokens": 24},
        "eval": {"max_new_tokens": 24},
        "max_new_tokens": 24,
        "ct_every": 2,
    },
}


def write_config(path: Path, top: dict | None = None, **flywheel: object) -> Path:
    cfg = {**TINY_ROUND, **(top or {}), "flywheel": {**TINY_ROUND["flywheel"], **flywheel}}
    path.write_text(json.dumps(cfg))
    return path


def write_landing(lake, landing: Path, n_expert: int = 24, n_novice: int = 6, n_inter: int = 2) -> Path:
    """Demonstrator attempts as upload files: landing/rollouts/*.jsonl and landing/annotations/*.json."""
    from sandbox.demonstrators import Expert, Interactive, Novice
    from sandbox.heldout import training_tasks
    from sandbox.parallel import run_many
    from training.demo import write_annotations_with_shots, write_rollouts_with_shots

    tasks = training_tasks(n_expert + n_novice + n_inter, seed=0)
    (landing / "rollouts").mkdir(parents=True, exist_ok=True)
    (landing / "annotations").mkdir(parents=True, exist_ok=True)
    write_rollouts_with_shots(
        lake, run_many(tasks[:n_expert], Expert, screenshots=True), landing / "rollouts" / "expert.jsonl", "expert"
    )
    write_rollouts_with_shots(lake, run_many(tasks[n_expert:n_expert + n_novice], Novice, screenshots=True),
                              landing / "rollouts" / "novice.jsonl", "novice")  # fmt: skip
    inter = run_many(tasks[n_expert + n_novice :], Interactive, screenshots=True)
    write_annotations_with_shots(lake, inter, landing / "annotations" / "session.json")
    return landing


#: The MiniWoB++ tasks of the round tests: two whose pages behave the same on every run.
MINIWOB_TASKS = ("click-button", "click-link")


def write_miniwob_landing(lake, landing: Path) -> Path:
    """Round 0's upload files played by MiniWoB++'s scripted demonstrators in a browser pool (the demo's cold start,
    smaller)."""
    from training.demo import ColdStart, write_cold_start
    from training.envs import env_backend

    write_cold_start(lake, landing, env_backend("miniwob", MINIWOB_TASKS), ColdStart(8, 2, 2, 0))
    return landing


def setup_round(tmp: Path, name: str, env: str = "sandbox") -> tuple[Path, Path, Path]:
    """A lake, a landing area with demonstrator data (deterministic: the same files for every lake) and a tiny
    config (for `env`: the sandbox, or two MiniWoB++ tasks in headless Chromium)."""
    from storage import Lake

    lake, landing, cfg = tmp / f"{name}-lake", tmp / f"{name}-landing", tmp / f"round-{env}.json"
    (write_landing if env == "sandbox" else write_miniwob_landing)(Lake.open(lake, create=True), landing)
    if not cfg.exists():
        extra = {"env": "miniwob", "env_tasks": list(MINIWOB_TASKS), "eval_per_cell": 2} if env == "miniwob" else {}
        write_config(cfg, extra, ct_every=1)
    return lake, landing, cfg


def round_cmd(lake: Path, landing: Path, cfg: Path, *args: str) -> list[str]:
    from tests.rounds.conftest import FLYWHEEL

    return [FLYWHEEL, "round", *args, "--lake", str(lake), "--landing", str(landing), "--config", str(cfg)]


def run_cmd(env: dict[str, str], argv: list[str], timeout: float = 600) -> subprocess.CompletedProcess:
    from tests.rounds.conftest import REPO

    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _content_keys(lk, table: str) -> list[tuple]:
    """A pile's episodes by what was done (source, task, attempt, round, actions, pass), not by episode id: an id
    hashes the screenshots too, and a live browser's screenshot bytes are not stable across processes."""
    eps = lk.read("episodes", columns=["episode_id", "source", "task_id", "attempt", "round", "env_passed", "steps"])
    by_id = {
        r["episode_id"]: (r["source"], r["task_id"], r["attempt"], r["round"], r["env_passed"],
                          tuple(s["action"] for s in r["steps"]))
        for r in eps.to_pylist()
    }  # fmt: skip
    return sorted(by_id[e] for e in lk.read(table, columns=["episode_id"]).column(0).to_pylist())


def lake_state(lake: Path, by: str = "id") -> dict:
    """What an interrupted round must end with exactly as an uninterrupted one: piles, episodes, round counts.
    `by="content"` names episodes by what was done instead of by id (see _content_keys)."""
    from storage import Lake

    lk = Lake.open(lake)
    if by == "content":
        rounds = {r["round"]: (r["n_new"], r["n_pass"], r["n_fail"], r["sft_size"], r["ct_size"])
                  for r in lk.read("rounds").to_pylist()}  # fmt: skip
        return {"sft": _content_keys(lk, "sft"), "ct": _content_keys(lk, "ct"),
                "episodes": sorted(k[:5] for k in _content_keys(lk, "episodes")), "rounds": rounds}  # fmt: skip
    rounds = {
        r["round"]: (r["n_new"], r["n_pass"], r["n_fail"], r["sft_size"], r["ct_size"])
        for r in lk.read("rounds").to_pylist()
    }
    return {
        "sft": sorted(lk.read("sft", columns=["episode_id"]).column(0).to_pylist()),
        "ct": sorted(lk.read("ct", columns=["episode_id"]).column(0).to_pylist()),
        "episodes": sorted(
            zip(*[lk.read("episodes", columns=["episode_id", "round"]).column(i).to_pylist() for i in (0, 1)])
        ),
        "rounds": rounds,
    }


def wait_for_stage(proc: subprocess.Popen, lake: Path, stage: str, timeout: float = 600) -> str:
    """Wait until the round lock says `proc` runs `stage`; return what the lock said."""
    lock = lake / "locks" / "round.json"
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            seen = json.loads(lock.read_text())["what"]
        except (FileNotFoundError, ValueError, KeyError):
            seen = ""
        if f"(stage {stage})" in seen:
            return seen
        time.sleep(0.05)
    err = proc.stderr.read() if proc.stderr else ""
    proc.kill()
    raise AssertionError(f"never saw stage {stage} running (last: {seen!r}; exit {proc.returncode}): {err[-1500:]}")
