"""Search with the verifier's outcome (training/search.py) and practice by search and imitation
(training/search_practice.py): the search finds shortest verified solutions without any demonstrator, gives up
within its node budget, and the practice job teaches a button the policy never samples."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.training.test_explore import ThreeButtons, _go_rate, three_button_tasks
from tests.training.test_practice import _biased_policy
from training.config import OptimConfig, SearchPracticeConfig
from training.search import SearchJob, search_batch, solution_row, solve


def _sandbox_tasks(n: int, levels: tuple[int, ...]):
    from training.envs import training_tasks

    return training_tasks(n, 4242, levels=levels)


def test_search_solves_sandbox_tasks_as_short_as_the_expert_without_asking_the_expert(monkeypatch) -> None:
    from sandbox.demonstrators import Expert

    tasks = _sandbox_tasks(14, (1, 2))
    plans = {t.task_id: t.make_env() for t in tasks}
    lengths = {}
    for t, env in plans.items():
        env.reset()
        lengths[t] = env.steps_to_go()  # the expert's shortest plan, measured before the expert is disabled

    def no_expert(*a, **k):
        raise AssertionError("the search consulted the demonstrator")

    monkeypatch.setattr(Expert, "move", no_expert)
    for t in tasks:
        r = solve(t, max_nodes=2000)
        assert r.solution is not None, t.task_id
        assert len(r.solution.actions) <= lengths[t.task_id], (t.task_id, r.solution.actions)
        env = t.make_env()  # the solution replays to a pass in a fresh environment
        obs = env.reset()
        for o, a in zip(r.solution.observations, r.solution.actions):
            assert o == obs
            obs, done, _ = env.step(a)
        assert done and env.verify()[0]
        row = solution_row(t, r.solution)
        assert [s["action"] for s in row["steps"]] == list(r.solution.actions) and row["instruction"] == t.instruction


def test_search_tells_apart_states_whose_screens_agree_but_whose_commits_differ(monkeypatch) -> None:
    """Pressing a button in an ordered sequence leaves the screen as it was: a search keyed on the text alone merged
    the pressed and unpressed states and never solved a level-4 or 5 click_button task; with the world's state key
    it does, and the screen-only key still fails (the test fails if the key stops mattering)."""
    from training.envs import SandboxEnv, training_tasks

    tasks = training_tasks(8, 4242, families=("click_button",), levels=(4, 5))
    for t in tasks:
        r = solve(t, max_nodes=2000)
        assert r.solution is not None, t.task_id
        env = t.make_env()
        env.reset()
        for a in r.solution.actions:
            _, done, _ = env.step(a)
        assert done and env.verify()[0]
    monkeypatch.delattr(SandboxEnv, "state_key")
    assert all(solve(t, max_nodes=2000).solution is None for t in tasks)


def test_text_typed_onto_an_old_value_is_pruned_so_a_level_3_form_is_solved_within_the_budget(monkeypatch) -> None:
    """Typing appends: a field holding 'DesignerChef' is never on a shortest path, and those states were most of what
    the search tried on a form of level 3 (none solved in 5,000 nodes). Pruned, a level-3 form is solved within the
    budget; without the pruning it is not (the test fails if the pruning stops mattering)."""
    import training.search as search
    from training.envs import training_tasks
    from training.explore import appended

    assert appended('textbox "Job" value="DesignerChef" (1,2)', "Chef")
    assert not appended('textbox "Job" value="Chef" (1,2)\ntextbox "X" value="DesignerChef" (1,3)', "Chef")
    assert not appended('textbox "Job" value="" (1,2)', "Chef")  # typed nowhere: the seen-state check's job
    tasks = list(training_tasks(300, 321, families=("fill_form",), levels=(3,)))[:2]
    assert len(tasks) == 2
    for t in tasks:
        r = solve(t, max_nodes=8000)
        assert r.solution is not None and len(r.solution.actions) == 7, t.task_id
        env = t.make_env()
        env.reset()
        for a in r.solution.actions:
            _, done, _ = env.step(a)
        assert done and env.verify()[0]
    monkeypatch.setattr(search, "appended", lambda obs, text: False)
    assert all(solve(t, max_nodes=8000).solution is None for t in tasks)


def test_found_examples_are_batched_by_length_each_once_oldest_first_then_replayed() -> None:
    import random
    from collections import deque
    from types import SimpleNamespace

    from training.search_practice import WINDOW, _Bucket, _next_batches

    rng = random.Random(0)
    found = [SimpleNamespace(input_ids=[0] * rng.randrange(5, 400), n=i) for i in range(5 * WINDOW * 4 + 3)]
    unseen, got = deque(found), []
    while unseen:
        batches = _next_batches(unseen, found, 4, rng)
        assert all(not again for _, again in batches)
        got += [b for b, _ in batches]
    assert sorted(e.n for b in got for e in b) == list(range(len(found)))  # every one once
    assert max(e.n for e in got[0] + got[1]) < WINDOW * 4  # the oldest first
    spread = sum(max(len(e.input_ids) for e in b) - min(len(e.input_ids) for e in b) for b in got) / len(got)
    assert spread < 60  # similar lengths in a batch (random batches of 4 spread over ~200 tokens)
    again = _next_batches(deque(), found, 4, rng)
    assert len(again) == WINDOW and all(a and len(b) == 4 for b, a in again)
    near = _Bucket(found).near(100, 4, rng)
    assert len(near) == 4 and all(abs(len(e.input_ids) - 100) < 60 for e in near)
    assert _Bucket([]).near(100, 4, rng) == []


def test_fresh_tasks_come_evenly_from_every_cell_of_a_generator_that_restarts_its_cycle_each_call() -> None:
    import random
    from collections import Counter

    from training.search_practice import fresh_tasks

    def cycling(n: int, seed: int) -> list[int]:  # 35 cells in order from the first, like the sandbox's generator
        return [i % 35 for i in range(n)]

    rng, counts = random.Random(0), Counter()
    for k in range(3000):
        counts.update(fresh_tasks(cycling, 32, k, rng))
    assert set(counts) == set(range(35))  # a plain draw of 32 never reaches the last 3 cells
    assert max(counts.values()) / min(counts.values()) < 1.25
    assert len(fresh_tasks(lambda n, s: list(range(5)), 32, 0, rng)) == 5  # a small world: all it has


def test_search_gives_up_within_its_node_budget_and_refuses_an_environment_it_cannot_copy() -> None:
    task = next(t for t in _sandbox_tasks(40, (4,)))
    r = solve(task, max_nodes=3)
    assert r.solution is None and r.nodes == 3

    class NoCopy(ThreeButtons):
        clone = None  # type: ignore[assignment]

    with pytest.raises(ValueError, match="cannot copy a state"):
        solve(replace(three_button_tasks(1, 0)[0], make_env=NoCopy))


def test_a_search_job_over_the_backend_s_own_tasks_matches_the_in_process_search() -> None:
    from sandbox.heldout import training_tasks as gen
    from training.envs import task_info

    payloads = gen(6, 9, levels=(1, 2))
    got = search_batch(SearchJob("sandbox", None, payloads, 500))
    want = [solve(task_info(p), 500) for p in payloads]
    assert got.results == want and got.seconds > 0


def test_practice_by_search_teaches_a_button_the_policy_never_samples(tiny_policy) -> None:
    from training.search_practice import train_by_search

    pol = _biased_policy(tiny_policy, share_yes=0.0)  # clicks (200,100), "Wait" on this screen, never "Go"
    assert _go_rate(pol) == 0.0
    cfg = SearchPracticeConfig(time_budget_s=600, max_steps=40, tasks_per_batch=4, workers=0, passes=4.0,
                               batch_size=8, optim=OptimConfig(lr=3e-3, warmup_steps=0))  # fmt: skip
    seen = []
    info = train_by_search(pol, three_button_tasks, cfg, on_iter=lambda i, st: seen.append(st))
    assert info["steps"] == 40 and info["solved"] == info["tasks"] > 0 and info["examples"] == info["solved"]
    assert seen and all(st["solved"] == st["tasks"] for st in seen)
    assert _go_rate(pol) >= 0.8


def test_practice_by_search_in_a_worker_process_trains_on_what_the_worker_found(tiny_policy) -> None:
    from training.search_practice import train_by_search

    before = {k: v.clone() for k, v in tiny_policy.model.state_dict().items()}
    cfg = SearchPracticeConfig(time_budget_s=600, max_steps=30, tasks_per_batch=8, workers=1, batch_size=4,
                               max_nodes=400)  # fmt: skip
    info = train_by_search(tiny_policy, lambda n, s: _sandbox_tasks(n, (1, 2))[:n], cfg, rehearsal=None)
    assert info["steps"] == 30 and info["examples"] > 0 and info["solved"] > 0
    assert any(not (v == before[k]).all() for k, v in tiny_policy.model.state_dict().items())


def test_a_worker_search_waits_while_the_learner_has_a_backlog_and_the_learner_takes_every_core(tiny_policy) -> None:
    """Gated (`backlog_steps`): the search is held back while found examples wait, and the learner's steps meanwhile
    run on `alone_threads`; non-stop (None): every step runs beside a search. Torch's threads are restored after."""
    from training.search_practice import train_by_search

    threads = torch.get_num_threads()
    got = {}
    for backlog in (1.0, None):
        cfg = SearchPracticeConfig(time_budget_s=600, max_steps=24, tasks_per_batch=8, workers=1, batch_size=4,
                                   max_nodes=400, backlog_steps=backlog, alone_threads=2)  # fmt: skip
        got[backlog] = train_by_search(tiny_policy, lambda n, s: _sandbox_tasks(n, (1, 2))[:n], cfg)
        assert torch.get_num_threads() == threads
    gated, nonstop = got[1.0], got[None]
    assert gated["steps"] == nonstop["steps"] == 24 and gated["examples"] > 0
    assert gated["alone_steps"] > 0 and nonstop["alone_steps"] == 0
    # held back, the search found about what the learner trained on (4 a step, plus the batch out at the end)
    fresh = 4 * (gated["steps"] - gated["replayed_steps"])
    assert gated["examples"] <= fresh + 2 * max(st["examples"] for st in gated["iterations"])
    assert len(gated["iterations"]) < len(nonstop["iterations"])


def test_practice_by_search_keeps_searching_when_it_has_given_up_on_every_level(tiny_policy) -> None:
    """A world the search never wins: every level is dropped after its probe, and the job still searches full
    batches (no empty ones, no spinning on nothing)."""
    from training.search_practice import train_by_search

    class NoWin(ThreeButtons):
        def verify(self) -> tuple[bool, str]:
            return False, "never"

        def clone(self) -> NoWin:
            c = NoWin()
            c.clicked = self.clicked
            return c

    def tasks(n: int, seed: int):
        return [replace(t, make_env=NoWin) for t in three_button_tasks(n, seed)]

    items = _rehearsal(tiny_policy)
    seen = []
    cfg = SearchPracticeConfig(time_budget_s=600, max_steps=None, tasks_per_batch=4, workers=0, probe=4,
                               batch_size=4, optim=OptimConfig(lr=1e-3, warmup_steps=0))  # fmt: skip

    def on_iter(i: int, st: dict) -> None:
        seen.append(st)
        if len(seen) >= 5:
            raise StopIteration  # enough batches seen

    with pytest.raises(StopIteration):
        train_by_search(tiny_policy, tasks, cfg, rehearsal=items, on_iter=on_iter)
    assert [st["tasks"] for st in seen] == [4] * 5 and all(st["solved"] == 0 for st in seen)
    assert seen[-1]["skipped"] == ["two/L1"]


def _rehearsal(policy) -> list:
    from training.data import encode_all, episode_examples

    env = ThreeButtons()
    row = {"instruction": "Click the right button", "steps": [{"observation": env.reset(), "thought": "",
                                                               "action": ThreeButtons.GO}]}  # fmt: skip
    return encode_all(policy.tokenizer, episode_examples(row))


def test_each_round_practises_at_its_own_learning_rate_and_the_last_one_holds_after() -> None:
    cfg = SearchPracticeConfig(optim=OptimConfig(lr=1e-3, warmup_steps=5), lr_by_round=(1e-3, 3e-4))
    assert [cfg.for_round(r).optim.lr for r in (1, 2, 3, 7)] == [1e-3, 3e-4, 3e-4, 3e-4]
    assert cfg.for_round(2).optim.warmup_steps == 5 and cfg.for_round(2).time_budget_s == cfg.time_budget_s
    assert cfg.for_round(0) is cfg  # practice from the cold start (make bench) keeps optim.lr
    plain = SearchPracticeConfig()
    assert plain.for_round(3) is plain  # no schedule: optim.lr in every round
