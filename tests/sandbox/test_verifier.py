"""The verifier accepts every expert attempt and rejects wrong final states, in every family (many seeds)."""

from __future__ import annotations

import pytest

from sandbox.demonstrators import Expert
from sandbox.env import Env
from sandbox.families import FAMILIES, LEVELS
from sandbox.goals import answers_match
from sandbox.rollout import run_attempt
from sandbox.tasks import make_task
from schemas.actions import Action, format_action

SEEDS = range(30)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_expert_passes_every_level_and_seed(family: str) -> None:
    lengths = {}
    for lvl in LEVELS:
        for seed in SEEDS:
            t = make_task(family, lvl, seed)
            a = run_attempt(t, Expert())
            assert a.passed, (t.task_id, a.verdict)
            assert a.reward == 1.0 and len(a.steps) == t.optimal_steps <= t.max_steps
            assert all(s.thought for s in a.steps)
            lengths.setdefault(lvl, []).append(len(a.steps))
    means = [sum(v) / len(v) for _, v in sorted(lengths.items())]
    assert means == sorted(means), f"levels must get longer: {means}"


def test_levels_span_one_to_ten_plus_steps() -> None:
    lens = [make_task(f, lvl, s).optimal_steps for f in FAMILIES for lvl in LEVELS for s in range(5)]
    assert min(lens) == 1 and max(lens) >= 12
    assert sum(1 for n in lens if n >= 10) >= 20


def _wrong_commit(env: Env, ex: Expert) -> str | None:
    """Play the expert, but replace its final committing click with a click on another element of the same
    kind (the wrong button / item / menu command / dialog choice), then stop. None when there is no such
    element."""
    hist: list[str] = []
    while not env.done:
        m = ex.move(env)
        probe = Env(env.task)  # does the expert's move end the episode? replay it on a copy
        for a in hist:
            probe.step(a)
        if probe.step(format_action(m.action())).done and m.element is not None:
            alts = [e for e in env.screen.elements() if e.kind == m.element.kind and e.role == m.element.role
                    and e.name != m.element.name and not e.blocked and getattr(e.ref, "enabled", True)
                    and e.kind in ("content", "listitem", "menuitem", "dialogbtn")
                    and not getattr(e.ref, "children", None)]  # fmt: skip
            if not alts:
                return None
            e = alts[len(hist) % len(alts)]
            a = format_action(Action("click", x=e.cx, y=e.cy))
            env.step(a)
            if not env.done:  # a recoverable slip (e.g. Cancel in a confirmation): stopping here is wrong
                env.step("finished(content='')")
            return a
        hist.append(format_action(m.action()))
        env.step(hist[-1])
    return None


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_wrong_final_states_are_rejected(family: str) -> None:
    rejected = 0
    for lvl in LEVELS:
        for seed in range(12):
            t = make_task(family, lvl, seed)
            # 1) stopping at once (or answering wrongly) is never a pass
            env = Env(t)
            env.step("finished(content='I am not sure')")
            v = env.verify()
            assert not v.passed and v.reason in ("not_done", "not_submitted", "wrong_answer") and v.details["message"]
            # 2) the expert's path with its final commit swapped for a look-alike
            if family == "answer":
                env, ex = Env(t), Expert()
                ex.reset(t)
                while not env.done:
                    d = ex.act(env)
                    if d.action.startswith("finished("):
                        wrong = str(int(t.reference_answer) + 1) if (t.reference_answer or "").isdigit() else "$0.01"
                        env.step(format_action(Action("finished", text=wrong)))
                    else:
                        env.step(d.action)
                v = env.verify()
                assert not v.passed and v.reason == "wrong_answer", (t.task_id, v)
                rejected += 1
                continue
            env, ex = Env(t), Expert()
            ex.reset(t)
            a = _wrong_commit(env, ex)
            if a is None:
                continue
            v = env.verify()
            assert env.done and not v.passed, (t.task_id, a, v)
            assert v.reason in ("wrong_button", "wrong_item", "wrong_command", "harmful_choice", "wrong_checkboxes",
                                "wrong_value", "not_done", "not_submitted"), v  # fmt: skip
            rejected += 1
    assert rejected >= 30, f"only {rejected} wrong final states built for {family}"


def test_form_with_a_wrong_value_is_rejected_with_the_field_named() -> None:
    t = make_task("fill_form", 2, 3)
    env, ex = Env(t), Expert()
    ex.reset(t)
    while not env.done:
        d = ex.act(env)
        if d.action.startswith("type("):  # a wrong value, then straight to the submit button
            env.step("type(content='WRONG')")
            e = env.screen.element_of(env.screen.find(env.goal.submit))
            env.step(format_action(Action("click", x=e.cx, y=e.cy)))
        else:
            env.step(d.action)
    v = env.verify()
    assert v.reason == "wrong_value" and "WRONG" in v.details["message"]


def test_answer_matching_is_lenient_on_format_only() -> None:
    assert answers_match(" $42.50. ", "$42.50") and answers_match("42.5", "42.50") and answers_match("'Oslo'", "oslo")
    assert not answers_match("$42.51", "$42.50") and not answers_match("Osl", "Oslo") and not answers_match(None, "1")
