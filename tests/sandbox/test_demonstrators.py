"""Novices fail at a realistic rate that falls with retries, and say what went wrong before fixing it."""

from __future__ import annotations

from collections import Counter

from scipy.stats import fisher_exact

from sandbox.demonstrators import Interactive, Novice
from sandbox.families import FAMILIES, LEVELS
from sandbox.rollout import run_attempt, run_until_pass
from sandbox.tasks import make_task

TASKS = [make_task(f, lvl, s) for f in FAMILIES for lvl in LEVELS for s in range(30)]  # 1,050 tasks


def test_novice_failure_rate_is_realistic_and_falls_with_retries() -> None:
    fails, mistakes = Counter(), Counter()
    for t in TASKS:
        for k in range(3):
            a = run_attempt(t, Novice(), k)
            fails[k] += not a.passed
            mistakes[k] += sum(1 for s in a.steps if s.mistake)
    n = len(TASKS)
    rates = [fails[k] / n for k in range(3)]
    assert 0.12 <= rates[0] <= 0.45, rates  # a first try fails sometimes, not mostly
    assert rates[0] > rates[1] > rates[2], rates
    # the drop from the first try to the third is not noise
    assert fisher_exact([[fails[0], n - fails[0]], [fails[2], n - fails[2]]])[1] < 0.01
    assert mistakes[0] > mistakes[1] > mistakes[2]


def test_harder_levels_fail_more_often() -> None:
    by_level = Counter()
    for t in TASKS:
        by_level[t.level] += not run_attempt(t, Novice(), 0).passed
    assert by_level[5] > by_level[1]


def test_recovery_thoughts_describe_the_mistake() -> None:
    seen = Counter()
    for t in TASKS:
        a = run_attempt(t, Novice(), 0)
        for i, s in enumerate(a.steps):
            assert s.thought.strip(), "every action has a thought before it"
            if s.mistake and not s.fatal and i + 1 < len(a.steps):
                nxt = a.steps[i + 1]
                assert nxt.recovers == s.mistake, (t.task_id, i)
                seen[s.mistake] += 1
                th = nxt.thought.lower()
                assert any(w in th for w in ("oops", "missed", "wrong", "typo", "instead", "didn't", "not on the way",
                                             "greyed", "isn't here", "wait")), nxt.thought  # fmt: skip
                if s.mistake == "typo":
                    assert "should be" in th
                if s.mistake in (
                    "wrong_checkbox",
                    "wrong_tab",
                    "wrong_menu",
                    "wrong_submenu",
                    "wrong_option",
                    "disabled_lookalike",
                    "wrong_focus",
                ):
                    # the thought names what was clicked by mistake
                    clicked = s.effect.split('"')[1] if '"' in s.effect else ""
                    assert clicked.lower() in th, (s.effect, nxt.thought)
    assert len(seen) >= 8, seen  # many kinds of mistakes occur and are recovered from


def test_retrying_until_pass_mostly_succeeds() -> None:
    results = [run_until_pass(t, Novice(), max_attempts=3) for t in TASKS[::10]]
    assert sum(r[-1].passed for r in results) / len(results) > 0.9
    assert any(len(r) > 1 and r[-1].passed for r in results)


def test_interactive_annotation_accepts_good_proposals_and_overrides_bad_ones() -> None:
    decisions = Counter()
    for t in TASKS[::9]:
        a = run_attempt(t, Interactive(), 0)
        assert a.passed, (t.task_id, a.verdict)  # the annotator's corrections keep the trajectory right
        for s in a.steps:
            decisions[s.decision] += 1
            assert s.proposal is not None
            if s.decision == "accepted":
                assert s.proposal == (s.thought, s.action)
            else:
                assert s.proposal[1] != s.action and s.thought.startswith("No, ")
    assert decisions["accepted"] > decisions["overridden"] > 0
