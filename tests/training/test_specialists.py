"""Specialists (flows/specialists.py): worlds draw only their tasks, the mixed held-out set, runs tagged with what
they were for, and the RL stage as real specialists' RL + their merge, resumable part by part without redoing a
finished part or duplicating a row."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from flows.config import MergeConfig, RoundConfig, SpecialistConfig, tuned_flywheel
from sandbox.heldout import heldout_fingerprints
from training.envs import SandboxBackend, World, check_world, mixed_heldout

FORMS, MENUS = ("fill_form", "checkboxes"), ("menu_path", "scroll_find")


def test_a_world_draws_only_its_families_and_levels_and_never_a_heldout_task() -> None:
    w = World("forms", SandboxBackend(), FORMS, (1, 2))
    tasks = w.training_tasks(40, seed=7)
    assert len(tasks) == 40 and {t.family for t in tasks} == set(FORMS) and {t.level for t in tasks} == {1, 2}
    assert not {t.payload.fingerprint for t in tasks} & heldout_fingerprints()
    assert [t.task_id for t in w.training_tasks(40, seed=7)] == [t.task_id for t in tasks]  # seeded
    held = w.heldout_tasks(2)
    assert len(held) == 2 * 2 * 2 and all(w.contains(t) for t in held)
    assert World("all", SandboxBackend()).heldout_tasks(1) == SandboxBackend().heldout_tasks(1)


class LevelsOnly(SandboxBackend):
    """The sandbox as a backend without a subset draw of its own (as a plug-in may be): worlds use its split."""

    name = "levels-only"
    subset_tasks = None
    check_subset = None


def test_a_backend_without_a_subset_draw_is_split_over_its_groups() -> None:
    w = World("hard", LevelsOnly(), levels=(4, 5))
    tasks = w.training_tasks(9, seed=1)
    assert len(tasks) == 9 and {t.level for t in tasks} == {4, 5}
    with pytest.raises(ValueError, match="draws training tasks by level"):
        World("forms", LevelsOnly(), FORMS)


def test_worlds_a_backend_does_not_have_are_refused_without_starting_it() -> None:
    with pytest.raises(ValueError, match="no family or level nope"):
        World("x", SandboxBackend(), ["nope"])
    with pytest.raises(ValueError, match="no family or level 9"):
        check_world("sandbox", None, None, [9])
    with pytest.raises(ValueError, match="not among this round's tasks"):  # no browser is started to say so
        check_world("miniwob", ("click-button", "click-link"), ["enter-text"], None)
    with pytest.raises(ValueError, match="no levels"):
        check_world("miniwob", None, ["click-button"], [1])
    with pytest.raises(ValueError, match="unknown environment"):
        check_world("nowhere", None, None, None)


def test_a_miniwob_world_is_a_subset_of_the_rounds_task_names() -> None:
    """MiniWoB++ (its tasks are its families): a world draws and holds out only its own task names, in the round's
    browser pool, and has no composed tasks."""
    from tests.miniwob.conftest import _need_chromium
    from training.envs_miniwob import MiniwobBackend

    _need_chromium()
    b = MiniwobBackend(["click-button", "click-link"], pool_size=1)
    try:
        w = World("buttons", b, ["click-button"])
        assert {t.family for t in w.training_tasks(3, seed=1)} == {"click-button"}
        held = w.heldout_tasks(2)
        assert len(held) == 2 and {t.family for t in held} == {"click-button"}
        assert set(mixed_heldout([w, World("links", b, ["click-link"])], 1)) == {"buttons", "links"}
    finally:
        b.close()


def test_the_mixed_heldout_set_composes_disjoint_sandbox_family_groups_only() -> None:
    forms, menus = World("forms", SandboxBackend(), FORMS), World("menus", SandboxBackend(), MENUS)
    sets = mixed_heldout([forms, menus], 1, composed_per_cell=1)
    assert set(sets) == {"forms", "menus", "composed"}
    assert {t.family for t in sets["composed"]} == {
        f"{a}+{b}" for x, y in ((FORMS, MENUS), (MENUS, FORMS)) for a in x for b in y
    }
    assert sets["forms"] == forms.heldout_tasks(1)
    # worlds of levels, or sharing a family, have no clean composition: the union of their held-out sets
    easy, hard = World("easy", SandboxBackend(), levels=(1, 2)), World("hard", SandboxBackend(), levels=(4, 5))
    assert set(mixed_heldout([easy, hard], 1)) == {"easy", "hard"}
    both = World("both", SandboxBackend(), ("fill_form", "menu_path"))
    assert "composed" not in mixed_heldout([forms, both], 1)


def test_runs_recorded_inside_run_tags_say_what_they_were_for(lake, tiny_policy) -> None:
    import time

    from training.jobs import finish
    from training.runs import JobResult, run_tags

    with run_tags(specialist={"name": "forms"}):
        finish(lake, JobResult("rl", 1, None, config={"rl": {}}), tiny_policy, time.perf_counter())
    finish(lake, JobResult("rl", 1, None), tiny_policy, time.perf_counter())
    configs = {r["config"] for r in lake.read("training_runs").to_pylist()}
    assert configs == {"{}", json.dumps({"rl": {}, "specialist": {"name": "forms"}}, sort_keys=True)}


def _cfg(**merge) -> RoundConfig:
    from schemas.prompt import PromptConfig
    from training.config import EvalConfig

    f = tuned_flywheel()
    rl = replace(f.rl, iterations=1, tasks_per_iter=2, group_size=2, value_pretrain_steps=1, minibatch_size=8)
    f = replace(f, rl=rl, prompt=PromptConfig(), eval=EvalConfig(max_new_tokens=16), max_new_tokens=16)
    sp = (SpecialistConfig("forms", FORMS, (1,)), SpecialistConfig("menus", MENUS, (1,)))
    return RoundConfig(eval_per_cell=1, flywheel=f, rl_mode="specialists", specialists=sp,
                       merge=MergeConfig(mixed_per_cell=1, **merge))  # fmt: skip


def _rows(lake, stage: str) -> list[dict]:
    return [r for r in lake.read("training_runs").to_pylist() if r["stage"] == stage]


def test_specialists_practise_their_own_worlds_then_merge_and_resume_part_by_part(
    lake, tiny_policy, monkeypatch
) -> None:
    from flows.specialists import mark_part, mixed_eval, part_status, run_specialists
    from training.checkpoints import fetch, publish
    from training.merge import lineage

    base = publish(lake, tiny_policy)
    drawn: dict[str, set] = {}
    sizes: dict[str, list[int]] = {}
    draw = World.training_tasks

    def spy(self, n, seed):
        out = draw(self, n, seed)
        drawn.setdefault(self.name, set()).update((t.family, t.level) for t in out)
        sizes.setdefault(self.name, []).append(n)
        return out

    monkeypatch.setattr(World, "training_tasks", spy)
    cfg = _cfg(sweep=True, objective="mean")
    info = run_specialists(lake, 1, cfg, base, lambda **kw: None)

    # each specialist practised only its world, from the common checkpoint, and says so in its row
    assert drawn == {"forms": {(f, 1) for f in FORMS}, "menus": {(f, 1) for f in MENUS}}
    assert all(len(n) >= 2 for n in sizes.values()), sizes  # RL's own draws, beside the known-good task's
    rl = _rows(lake, "rl")
    assert sorted(json.loads(r["config"])["specialist"]["name"] for r in rl) == ["forms", "menus"]
    assert all(r["base_checkpoint"] == base for r in rl)
    assert json.loads(rl[0]["config"])["specialist"]["families"] in (list(FORMS), list(MENUS))
    # the sweep kept the alpha with the best mean, and the merged checkpoint is the stage's
    (merge,) = _rows(lake, "merge")
    curve = json.loads(merge["metrics"])["sweep"]
    means = {p["alpha"]: sum(r["rate"] for r in p["rates"].values()) / 2 for p in curve["points"]}
    assert curve["objective"] == "mean over worlds" and means[curve["kept_alpha"]] == max(means.values())
    assert info["checkpoint"] == merge["output_checkpoint"] and info["base"] == base and info["mode"] == "specialists"
    assert sum(info["alphas"].values()) == pytest.approx(1.0)
    assert lineage(lake, info["specialists"]["forms"]) == [base] and merge["base_checkpoint"] == base

    # run again: every part is done, nothing runs, nothing is added
    assert run_specialists(lake, 1, cfg, base, lambda **kw: None)["checkpoint"] == info["checkpoint"]
    # killed after menus' job recorded its row but before its status said so, and before the merge's did:
    # both are adopted from their rows, not run again
    mark_part(lake, 1, "rl", ("specialists", "menus"), "running")
    mark_part(lake, 1, "rl", ("merge",), "running", specialists={})
    again = run_specialists(lake, 1, cfg, base, lambda **kw: None)
    assert again["checkpoint"] == info["checkpoint"] and len(_rows(lake, "rl")) == 2 and len(_rows(lake, "merge")) == 1
    assert part_status(lake, 1, "rl", "specialists", "menus")["adopted"] is True
    assert part_status(lake, 1, "rl", "merge")["adopted"] is True

    # the merged model on the mixed held-out set; outcomes already measured are not played again
    from flows.stages import mark

    mark(lake, 1, "rl", "done", checkpoint=info["checkpoint"], base=base, mode="specialists")
    known = {t.task_id: True for t in World("forms", SandboxBackend(), FORMS, (1,)).heldout_tasks(1)}
    out = mixed_eval(lake, 1, replace(cfg, merge=replace(cfg.merge, eval_members=True)),
                     fetch(lake, info["checkpoint"]), known, lambda **kw: None)  # fmt: skip
    rates = out["rates"]
    assert set(rates) == {"forms", "menus", "composed", "overall"} and out["composed"]
    assert rates["forms"]["n"] == 2 and rates["forms"]["k"] == 2  # the given outcomes, not replayed
    assert rates["overall"]["n"] == rates["forms"]["n"] + rates["menus"]["n"] + rates["composed"]["n"] == out["n"]
    assert all(r["lo"] <= r["rate"] <= r["hi"] for r in rates.values())
    assert set(out["members"]) == {"base", "forms", "menus"}
    assert all(m["composed"]["n"] == rates["composed"]["n"] for m in out["members"].values())


def test_a_merge_with_configured_alphas(lake, tiny_policy) -> None:
    """No sweep: the specialists' own alphas (equal ones when none are given) merge them."""
    from flows.specialists import _merge
    from training.checkpoints import publish
    from training.merge import Specialist, merge_job

    base = publish(lake, tiny_policy)
    merge_job(lake, base, [Specialist("forms", base, 0.5), Specialist("menus", base, 0.5)], round=1)  # by hand
    cfg = _cfg()
    cfg = replace(cfg, specialists=tuple(replace(s, alpha=a) for s, a in zip(cfg.specialists, (0.25, 0.75))))
    st = _merge(lake, 1, cfg, base, {"forms": base, "menus": base})
    assert st["alphas"] == {"forms": 0.25, "menus": 0.75} and st["sweep"] is None and st["status"] == "done"
    assert "adopted" not in st and len(_rows(lake, "merge")) == 2  # the hand-made merge had other weights
    equal = _merge(lake, 2, _cfg(), base, {"forms": base, "menus": base})
    assert equal["alphas"] == {"forms": 0.5, "menus": 0.5}
