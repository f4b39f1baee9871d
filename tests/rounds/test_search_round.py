"""A round whose RL stage is practice by search and imitation (`rl_mode = "search"`), on the Prefect engine: the stage
searches fresh sandbox tasks in a worker process, trains on what it found, and is recorded like any RL stage (its
checkpoint evaluated, its run in training_runs with what the search solved); the documented example loads; a world
that cannot copy a state is refused in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from flows.config import RoundConfig, load_round_config
from flywheel.commands.demo import DEMO_SEARCH_S
from tests.rounds.conftest import REPO
from tests.rounds.helpers import round_cmd, run_cmd, setup_round, write_config

EXAMPLE = REPO / "examples" / "round-search.toml"


def test_the_documented_search_example_loads_and_a_world_without_state_copies_is_refused() -> None:
    cfg = load_round_config(EXAMPLE)
    assert (
        cfg.rl_mode == "search"
        and cfg.flywheel.search.time_budget_s == DEMO_SEARCH_S == 150
        and cfg.flywheel.search.max_nodes == 5000
    )
    assert cfg.flywheel.rl == RoundConfig().flywheel.rl
    blocks = re.findall(r"```toml\n(.*?)```", (REPO / "docs" / "training.md").read_text(), re.S)
    assert EXAMPLE.read_text() in blocks
    with pytest.raises(ValueError, match="rl_mode 'search' needs the sandbox"):
        RoundConfig(rl_mode="search", env="miniwob")


@pytest.mark.slow
@pytest.mark.xdist_group("rounds")
def test_a_search_round_practises_on_what_its_search_found_and_records_it(
    tmp_path: Path, flywheel_env: dict[str, str]
) -> None:
    from storage import Lake
    from validators.rounds import read_round

    lake, landing, cfg = setup_round(tmp_path, "search")
    search = {"time_budget_s": 600, "max_steps": 12, "tasks_per_batch": 8, "max_nodes": 400, "batch_size": 8,
              "optim": {"bf16": False, "compile": False}}  # fmt: skip
    write_config(cfg, {"rl_mode": "search", "annotate_tasks": 0}, search=search)
    for _ in range(2):  # round 0 (cold start, no RL), then round 1 with the search stage
        r = run_cmd(flywheel_env, round_cmd(lake, landing, cfg, "run"))
        assert r.returncode == 0, r.stderr[-3000:]
    lk = Lake.open(lake)
    rec = read_round(lk, 1)
    assert rec.status("summary") == "done" and rec.rl_mode == "search"
    sft, rl = rec.stages["sft"]["checkpoint"], rec.stages["rl"]
    assert rl["base"] == sft and rl["checkpoint"] == rec.stages["evaluate"]["checkpoint"] != sft
    runs = [x for x in lk.read("training_runs").to_pylist() if x["round"] == 1 and x["stage"] == "rl"]
    assert len(runs) == 1 and runs[0]["base_checkpoint"] == sft
    m, c = json.loads(runs[0]["metrics"]), json.loads(runs[0]["config"])
    assert c["search"]["max_steps"] == 12 and m["solved"] > 0 and m["examples"] >= m["solved"]
    assert m["iterations"] and all(it["solved"] <= it["tasks"] for it in m["iterations"])
    assert runs[0]["steps"] == 12 + m["waiting_steps"]  # 12 on what the search found, copying while it was out
