"""A round that ends with two specialists and their merge, on the Prefect engine: kill -9 while the second specialist
trains, resume, and the round ends with the recorded chain intact and nothing trained or recorded twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.rounds.conftest import FLYWHEEL, REPO
from tests.rounds.helpers import TINY_ROUND, round_cmd, run_cmd, setup_round, write_config

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("rounds")]

FORMS, MENUS = ["fill_form", "checkboxes"], ["menu_path", "scroll_find"]
SPECIALISTS = {
    "rl_mode": "specialists",
    "specialists": [{"name": "forms", "families": FORMS}, {"name": "menus", "families": MENUS}],
    "merge": {"mixed_per_cell": 1},
    "annotate_tasks": 0,  # round 1 is about its RL stage: no annotation, little sampling
}
FP32 = {"optim": {"bf16": False}}  # no precision measurement on a loaded machine: the test is about the chain


def _part(lk, name: str) -> dict:
    from validators.rounds import read_round

    rec = read_round(lk, 1)
    return (((rec.stages.get("rl") or {}).get("specialists") or {}).get(name) or {}) if rec else {}


def _kill_while_training(env: dict[str, str], argv: list[str], lake: Path, name: str, timeout: float = 600) -> None:
    """Start the round and kill -9 its whole process group once specialist `name` has been training a moment."""
    from storage import Lake

    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + timeout
    lk = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the round ended before {name} trained: {proc.stderr.read()[-3000:]}"
        if lk is None and (lake / "tables" / "rounds").exists():
            lk = Lake.open(lake)
        if lk is not None and _part(lk, name).get("status") == "running":
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"specialist {name} never started")
    time.sleep(0.5)  # into its RL job
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_specialists_round_resumes_after_kill_9_among_the_specialists(
    tmp_path: Path, flywheel_env: dict[str, str]
) -> None:
    from storage import Lake
    from training.checkpoints import version_of
    from validators.rounds import read_round

    env = flywheel_env
    lake, landing, cfg = setup_round(tmp_path, "spec")
    write_config(cfg, SPECIALISTS, cold_sft={**TINY_ROUND["flywheel"]["cold_sft"], **FP32},
                 sft={**TINY_ROUND["flywheel"]["sft"], "epochs": None, **FP32}, sampling={"tasks": 2, "attempts": 2, "max_new_tokens": 24},
                 rl={**TINY_ROUND["flywheel"]["rl"], "iterations": 8})  # fmt: skip
    # 8 RL iterations a specialist: seconds, so the kill lands inside the second one (one iteration took under the
    # poll and the half second below once the sampler got faster, and the kill found it done)
    r = run_cmd(env, round_cmd(lake, landing, cfg, "run"))  # round 0: cold-start SFT, no RL
    assert r.returncode == 0, r.stderr[-3000:]

    _kill_while_training(env, round_cmd(lake, landing, cfg, "run"), lake, "menus")
    lk = Lake.open(lake)
    forms = _part(lk, "forms")
    assert forms["status"] == "done" and _part(lk, "menus")["status"] == "running"
    assert read_round(lk, 1).status("rl") == "running"

    r = run_cmd(env, round_cmd(lake, landing, cfg, "resume", "1"))
    assert r.returncode == 0, r.stderr[-3000:]
    rec = read_round(lk, 1)
    assert rec.status("summary") == "done" and rec.rl_mode == "specialists"

    # the chain: both specialists grew from this round's SFT checkpoint; their merge is the rl stage's checkpoint,
    # the one evaluated, and the one round 2 acts with
    sft = rec.stages["sft"]["checkpoint"]
    runs = [x for x in lk.read("training_runs").to_pylist() if x["round"] == 1]
    rl = {json.loads(x["config"])["specialist"]["name"]: x for x in runs if x["stage"] == "rl"}
    merges = [x for x in runs if x["stage"] == "merge"]
    assert len([x for x in runs if x["stage"] == "rl"]) == 2 and set(rl) == {"forms", "menus"}  # no duplicate rows
    assert len(merges) == 1 and all(x["base_checkpoint"] == sft for x in [*rl.values(), *merges])
    merged = merges[0]["output_checkpoint"]
    assert rec.stages["rl"]["checkpoint"] == merged == rec.rl.checkpoint == rec.stages["evaluate"]["checkpoint"]
    assert rec.policy_version == version_of(merged) and rec.rl.base == sft
    from flows.stages import acting_checkpoint, round_markdown

    assert acting_checkpoint(lk, 2) == merged
    # the specialist finished before the kill was not trained again
    assert rl["forms"]["run_id"] == forms["run_id"] and _part(lk, "forms")["finished_at"] == forms["finished_at"]
    assert [s.name for s in rec.rl.specialists] == ["forms", "menus"]
    assert {s.name: s.checkpoint for s in rec.rl.specialists} == {n: x["output_checkpoint"] for n, x in rl.items()}
    assert rec.rl.alphas == {"forms": 0.5, "menus": 0.5}
    # the merged model on the mixed held-out set: each world, the composed two-world tasks, all of them
    rates = rec.mixed["rates"]
    assert set(rates) == {"forms", "menus", "composed", "overall"} and rates["composed"]["n"] > 0
    assert rates["overall"]["n"] == rec.mixed["n"] == sum(rates[k]["n"] for k in ("forms", "menus", "composed"))

    # the rounds table and the summary say so
    st = subprocess.run([FLYWHEEL, "round", "status", "--lake", str(lake)], env={**env, "COLUMNS": "250"}, cwd=REPO,
                        capture_output=True, text=True)  # fmt: skip
    assert st.returncode == 0 and "specialists (forms=0.5 menus=0.5)" in st.stdout, st.stdout + st.stderr
    assert "RL: specialists (forms=0.5 menus=0.5)" in round_markdown(lk, 1)
    chk = subprocess.run([FLYWHEEL, "check", "--lake", str(lake)], env=env, cwd=REPO, capture_output=True, text=True)
    assert chk.returncode == 0, chk.stdout + chk.stderr
