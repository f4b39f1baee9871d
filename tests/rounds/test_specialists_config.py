"""The round config's RL mode: specialists load from TOML/JSON (the documented example included), survive the round's
record, and are refused in one line when they could not run; the rounds record reads back how RL ended."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from flows.config import (
    MergeConfig,
    RoundConfig,
    SpecialistConfig,
    config_from_dict,
    load_round_config,
    recorded_config,
    round_config,
)
from flows.stages import due_stages, record_config, rl_markdown
from validators.rounds import RoundRecord, SpecialistRun, read_round, update_round

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "round-specialists.toml"


def test_the_documented_example_loads_and_is_the_one_in_the_docs() -> None:
    cfg = load_round_config(EXAMPLE)
    assert cfg.rl_mode == "specialists" and cfg.merge == MergeConfig(sweep=True, objective="worst", mixed_per_cell=2)
    assert cfg.specialists == (
        SpecialistConfig("forms", ("fill_form", "checkboxes")),
        SpecialistConfig("menus", ("menu_path", "scroll_find", "click_button")),
    )
    assert cfg.flywheel == RoundConfig().flywheel  # everything else stays as shipped
    blocks = re.findall(r"```toml\n(.*?)```", (REPO / "docs" / "training.md").read_text(), re.S)
    assert EXAMPLE.read_text() in blocks


def test_joint_is_the_default_and_the_stages_do_not_change() -> None:
    assert RoundConfig().rl_mode == "joint" and round_config().specialists == ()
    spec = load_round_config(EXAMPLE)
    assert due_stages(1, spec) == due_stages(1, RoundConfig())  # the specialists and the merge are the rl stage


def test_a_specialists_config_survives_the_rounds_record_and_json(lake, tmp_path: Path) -> None:
    cfg = replace(round_config(people="scripted"), rl_mode="specialists",
                  specialists=(SpecialistConfig("easy", levels=(1, 2), alpha=0.3), SpecialistConfig("hard", levels=(4, 5), alpha=0.7)))  # fmt: skip
    record_config(lake, 0, cfg, tmp_path / "landing")
    assert recorded_config(lake) == cfg
    p = tmp_path / "round.json"
    p.write_text(json.dumps({"rl_mode": "specialists", "specialists": [{"name": "a", "families": ["popup"]},
                                                                       {"name": "b", "levels": [5]}]}))  # fmt: skip
    got = load_round_config(p)
    assert got.specialists == (SpecialistConfig("a", ("popup",)), SpecialistConfig("b", levels=(5,)))


BAD = [
    ({"rl_mode": "both"}, "rl_mode must be one of joint, specialists"),
    ({"specialists": [{"name": "a"}]}, "at least two"),
    ({"specialists": [{"name": "a"}, {"name": "a"}]}, "name of its own"),
    ({"specialists": [{"name": "a"}, {"name": "overall"}]}, "not composed or overall"),
    ({"specialists": [{"name": "a", "families": ["fill_form"]}, {"name": "b", "families": ["nope"]}]},
     "specialist b: sandbox has no family or level nope"),
    ({"specialists": [{"name": "a", "levels": [0]}, {"name": "b"}]}, "no family or level 0"),
    ({"specialists": [{"name": "a", "alpha": 0.5}, {"name": "b"}]}, "every specialist an alpha, or none"),
    ({"specialists": [{"name": "a", "alpha": 0.5}, {"name": "b", "alpha": 0.6}]}, "alphas must sum to 1"),
    ({"specialists": [{"name": "a"}, {"name": "b"}, {"name": "c"}], "merge": {"sweep": True}}, "two specialists"),
    ({"merge": {"sweep": True, "objective": "best"}}, "objective must be one of worst, mean"),
    ({"merge": {"sweep": True, "grid": [0.5, 2]}}, "grid must be weights in"),
    ({"specialists": [{"name": "a", "env": "moon"}, {"name": "b"}]}, "specialist a: unknown environment"),
    ({"env": "miniwob", "env_tasks": ["click-button"], "specialists": [{"name": "a", "families": ["click-link"]},
                                                                        {"name": "b"}]}, "not among this round's tasks"),
    ({"flywheel": {"backend": "trl sft {pile}"}}, "needs the builtin training backend"),
    ({"specialists": [{"name": "a", "famillies": ["popup"]}, {"name": "b"}]}, "unknown option.*famillies"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), BAD)
def test_specialists_that_could_not_run_are_refused_in_one_line(data: dict, message: str) -> None:
    base = {"rl_mode": "specialists", "specialists": [{"name": "a"}, {"name": "b"}]}
    with pytest.raises(ValueError, match=message) as e:
        config_from_dict(RoundConfig, {**base, **data})
    assert "\n" not in str(e.value)


def test_the_round_record_says_how_rl_ended(lake) -> None:
    update_round(lake, 1, stage_status={"rl": {"status": "done", "checkpoint": "objects/aa/joint.tar"}})
    assert read_round(lake, 1).rl.mode == "joint" and read_round(lake, 1).rl.checkpoint == "objects/aa/joint.tar"
    assert RoundRecord(0).rl is None and RoundRecord(0).rl_mode is None  # no RL in round 0
    sp = [{"name": "forms", "env": "sandbox", "families": ["fill_form"], "levels": None, "checkpoint": "objects/f.tar",
           "run_id": "r1"},
          {"name": "menus", "env": "sandbox", "families": ["menu_path"], "levels": [1, 2], "checkpoint": "objects/m.tar",
           "run_id": "r2"}]  # fmt: skip
    rl = {"mode": "specialists", "base": "objects/sft.tar", "specialists": sp,
          "merge": {"checkpoint": "objects/merged.tar", "run_id": "r3", "alphas": {"forms": 0.25, "menus": 0.75},
                    "sweep": {"objective": "worst world", "kept_alpha": 0.25, "first": "forms"}}}  # fmt: skip
    rate = {"n": 10, "k": 4, "rate": 0.4, "lo": 0.17, "hi": 0.69}
    update_round(lake, 2, breakdown={"rl": rl, "mixed": {"rates": {"forms": rate, "composed": rate, "overall": rate}}})
    rec = read_round(lake, 2)
    assert (
        rec.rl_mode == "specialists" and rec.rl.checkpoint == "objects/merged.tar" and rec.rl.base == "objects/sft.tar"
    )
    assert rec.rl.specialists[1] == SpecialistRun("menus", "sandbox", ("menu_path",), (1, 2), "objects/m.tar", "r2")
    assert rec.rl.specialists[1].subset() == "sandbox: menu_path (levels 1, 2)"
    assert rec.rl.describe() == "specialists (forms=0.25 menus=0.75, sweep by worst world)"
    md = "\n".join(rl_markdown(rec))
    assert "RL: specialists (forms=0.25 menus=0.75, sweep by worst world) -> objects/merged.tar" in md
    assert "| forms | sandbox: fill_form | 0.25 | objects/f.tar |" in md
    assert "| composed | 10 | 40.0% [17.0%, 69.0%] |" in md
