"""Search under the learner's prior (training/prior.py, training/search.py `guided_solve`): the prior is the policy's
own answer probability over the screen's actions, and a search ordered by it reaches solutions that breadth-first
search with the same work cannot."""

from __future__ import annotations

import math

import torch


def _form_task():
    from training.envs import env_backend, known_good, training_tasks

    tasks = training_tasks(12, 5151, families=("fill_form",), levels=(3,))
    good = known_good(env_backend("sandbox"), tasks)
    assert good is not None
    return good


def test_the_prior_is_the_policy_s_whole_answer_probability_renormalised_over_the_screen_s_actions(tiny_policy) -> None:
    from schemas.prompt import PromptConfig, Turn, render_answer, render_prompt
    from training.data import next_token_logprobs
    from training.explore import screen_actions
    from training.prior import ActionPrior
    from training.prompt import encode_examples

    info, expert = _form_task()
    env = info.make_env()
    first = env.reset()
    obs, _, _ = env.step(expert[0])
    history = [Turn(first, "", expert[0])]
    actions = screen_actions(obs, info.instruction)
    cfg = PromptConfig()
    got = ActionPrior(tiny_policy.model, tiny_policy.tokenizer, cfg)(info.instruction, history, obs, actions)
    prompt = render_prompt(info.instruction, history, obs, cfg)
    want = []
    for e in encode_examples(
        tiny_policy.tokenizer, [(prompt, render_answer("", a, cfg, obs, info.instruction)) for a in actions], cfg
    ):
        ids = torch.tensor([e.input_ids])
        n = e.mask.index(1)
        with torch.no_grad():
            want.append(
                float(next_token_logprobs(tiny_policy.model.eval(), ids, torch.ones_like(ids))[0, n - 1 :].sum())
            )
    want_t = torch.log_softmax(torch.tensor(want), 0)
    assert len(got) == len(actions) > 5
    assert torch.allclose(torch.tensor(got), want_t, atol=1e-4)  # one prompt pass and its cache = a full pass each
    assert math.isclose(sum(math.exp(x) for x in got), 1.0, rel_tol=1e-5)


def test_a_search_ordered_by_the_prior_solves_a_form_breadth_first_search_cannot_with_the_same_work() -> None:
    from training.search import guided_solve, solve

    info, expert = _form_task()
    calls = []

    def prior(instruction, history, observation, actions):  # a policy that knows this form: the expert's next action
        calls.append(len(history))
        nxt = expert[len(history)] if len(history) < len(expert) else None
        return [0.0 if a == nxt else -20.0 for a in actions]

    r = guided_solve(info, prior, max_states=len(expert) + 2)
    assert r.solution is not None and list(r.solution.actions) == expert
    assert calls == list(range(len(expert)))  # one state a step; the state after the last action is never expanded
    env = info.make_env()  # the solution replays to a pass in a fresh environment
    env.reset()
    for a in r.solution.actions:
        _, done, _ = env.step(a)
    assert done and env.verify()[0]
    assert solve(info, max_nodes=r.nodes).solution is None  # breadth-first with the same actions tried: none

    def flat(instruction, history, observation, actions):
        return [0.0] * len(actions)

    assert guided_solve(info, flat, max_states=len(expert) + 2).solution is None  # the prior did the work


def test_a_guided_search_job_in_a_worker_searches_with_the_weights_it_was_sent(tiny_policy) -> None:
    from schemas.prompt import PromptConfig
    from training.prior import ActionPrior
    from training.procs import PolicyBlob, local_executor
    from training.search import SearchJob, search_batch, search_infos

    info, _ = _form_task()
    blob = PolicyBlob.of(tiny_policy)  # shipped once; the weights travel with every job
    with torch.no_grad():
        for p in tiny_policy.model.parameters():
            p.add_(0.01 * torch.randn_like(p))  # the learner's weights now differ from the blob's
    weights = {k: v.detach().clone() for k, v in tiny_policy.model.state_dict().items()}
    from training.envs import training_tasks

    easy = training_tasks(1, 77, levels=(1,))[0]
    job = SearchJob("sandbox", None, [easy.payload, info.payload], 500, (False, True), 4,
                    blob, weights, PromptConfig())  # fmt: skip
    pool = local_executor(1, 1)
    try:
        got = pool.submit(search_batch, job).result()
    finally:
        pool.shutdown()
    prior = ActionPrior(tiny_policy.model, tiny_policy.tokenizer, PromptConfig())
    want = search_infos([easy, info], 500, prior, (False, True), 4)
    assert got.results == want.results
    assert 0 < prior.calls <= 4  # the second task was searched under the prior, at most 4 states


def test_practice_searches_given_up_cells_under_its_prior_and_pauses_a_cell_the_prior_fails_too(tiny_policy) -> None:
    """In-process: level-3 forms are given up by breadth-first search within 50 actions, then searched under the
    learner's own prior (a random tiny policy fails there too, so the cell is paused after its probe; nothing is
    found, so the job searches until its clock ends). Never probed again within the job: a fast host searched 1,065
    of these batches in the 8 s, so a re-probe after 1,000 batches had made the count host-dependent."""
    from training.config import SearchPracticeConfig
    from training.envs import training_tasks
    from training.search_practice import train_by_search

    def tasks(n: int, seed: int):
        return training_tasks(n, seed, families=("fill_form",), levels=(3,))

    cfg = SearchPracticeConfig(time_budget_s=8, tasks_per_batch=2, workers=0, batch_size=4,
                               max_nodes=50, probe=2, guide_states=2, guided_per_batch=1, reprobe_batches=10**9)  # fmt: skip
    seen = []
    info = train_by_search(tiny_policy, tasks, cfg, rehearsal=None, on_iter=lambda i, st: seen.append(st))
    tried = sum(n for _, n in info["guided"].values())
    # the probe, then paused; the batch drawn while the probe's last one was searched holds one more
    assert tried == cfg.probe + cfg.guided_per_batch
    assert len(seen) >= 8 and seen[-1]["guided"] == seen[-4]["guided"]  # no guided task in the last batches
    assert seen[0]["guided"] == {} and any(st["guided"] for st in seen)
