"""Routing: piles, reasons, verdicts, rounds bookkeeping, idempotence, crash repair, conservation, DQ gate."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from dataclasses import replace

import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.land import land
from storage import Lake
from tests.validators.factory import make_episode, store_png, with_step
from validators.quality import DataQualityError
from validators.rewards import make_reward, policy_reward
from validators.rounds import update_round
from validators.routing import RoutingError, route_round, summarize
from validators.simulate import simulate


def _ids(lake, pile, round=None):
    flt = None if round is None else pc.field("round_routed") == round
    return set(lake.read(pile, ["episode_id"], filter=flt).column("episode_id").to_pylist())


def _mixed(lake, round=1):
    shot = store_png(lake)
    good = [make_episode(shot, i=i, round=round) for i in range(6)]
    bad_env = make_episode(shot, i=100, round=round, env_passed=False, env_reward=0.0)
    off = with_step(make_episode(shot, i=50, round=round), 1, action="click(point='<point>9999 1</point>')")
    dup = replace(good[1], session_id="copy", episode_id="")  # same instruction and actions
    both = with_step(replace(off, env_passed=False, session_id="y", episode_id=""), 2, action="nonsense")
    ta = make_episode(shot, i=60, source="think_aloud", round=round)
    return good + [bad_env, off, dup, both, ta], {"bad_env": bad_env, "off": off, "dup": dup, "both": both}


def test_route_piles_reasons_and_rounds(lake):
    eps, named = _mixed(lake)
    land(lake, eps)
    s = route_round(lake, 1)
    assert (s.n_new, s.n_pass, s.n_fail) == (11, 7, 4)
    assert s.sft_size == 7 and s.ct_size == 4
    assert s.pass_rate_lo < 7 / 11 < s.pass_rate_hi
    ct = {r["episode_id"]: r["reasons"] for r in lake.read("ct", ["episode_id", "reasons"]).to_pylist()}
    assert ct[named["bad_env"].episode_id] == ["env_failed"]
    assert ct[named["off"].episode_id] == ["off_screen"]
    assert ct[named["dup"].episode_id] == ["duplicate"]
    assert ct[named["both"].episode_id] == ["bad_action", "off_screen", "env_failed"]  # every reason, policy order
    row = lake.read("rounds").to_pylist()[0]
    assert (row["n_new"], row["n_pass"], row["n_fail"], row["sft_size"], row["ct_size"]) == (11, 7, 4, 7, 4)
    bd = json.loads(row["breakdown"])
    assert bd["by_source"]["think_aloud"]["n"] == 1 and bd["by_source"]["rollout"]["n"] == 10
    assert bd["by_family"]["office"]["n"] == 11 and bd["dq"]["success"] is True
    assert lake.count("dq_results") == 1
    n_verdicts = lake.count("verdicts")
    assert n_verdicts == 10 * 9 + 1 * 10  # rollout policy: 9 validators; think-aloud: 10
    # re-running routes nothing and writes nothing
    versions = {t: lake.version(t) for t in ("sft", "ct", "verdicts")}
    again = route_round(lake, 1)
    assert again.routed_now == 0 and (again.n_pass, again.n_fail) == (7, 4)
    assert {t: lake.version(t) for t in ("sft", "ct", "verdicts")} == versions


def test_duplicates_across_rounds_never_twice_in_sft(lake):
    shot = store_png(lake)
    first = make_episode(shot, i=1, round=1)
    land(lake, [first])
    route_round(lake, 1)
    again = replace(first, round=2, session_id="later", episode_id="")
    land(lake, [again])
    s = route_round(lake, 2)
    assert s.n_fail == 1 and s.reasons == {"duplicate": 1}
    assert _ids(lake, "sft") == {first.episode_id}


def test_duplicates_of_early_rounds_are_caught_through_the_high_word_filter(lake, monkeypatch):
    """With more than four pile runs, exact dedup looks keys up through its HighWordFilter: copies of round 1's and
    round 3's episodes still fail as duplicates of the pile in round 6, and new episodes pass."""
    from storage import keyindex

    asked = []
    candidates = keyindex.HighWordFilter.candidates
    monkeypatch.setattr(
        keyindex.HighWordFilter, "candidates", lambda self, w: asked.append(len(w)) or candidates(self, w)
    )
    shot = store_png(lake)
    rounds = {r: [make_episode(shot, i=10 * r + k, round=r) for k in range(2)] for r in range(1, 6)}
    for r, eps in rounds.items():
        land(lake, eps)
        assert route_round(lake, r).n_pass == 2
    copies = [replace(rounds[1][0], round=6, session_id="c1", episode_id=""),
              replace(rounds[3][1], round=6, session_id="c3", episode_id="")]  # fmt: skip
    new = make_episode(shot, i=99, round=6)
    land(lake, copies + [new])
    s = route_round(lake, 6)
    assert (s.n_pass, s.n_fail) == (1, 2) and s.reasons == {"duplicate": 2}
    assert _ids(lake, "sft", 6) == {new.episode_id}
    assert asked, "the filter was not used with five pile runs"


def _crash_after_sft(uri: str) -> None:
    from storage import Lake as L
    from validators.routing import route_round as rr

    def stop(stage, info):
        if stage == "sft_appended":
            os._exit(3)  # a kill: no cleanup, no exception handling

    rr(L.open(uri), 1, progress=stop)


def test_crash_between_pile_appends_is_repaired(lake):
    eps, _ = _mixed(lake)
    land(lake, eps)
    p = mp.get_context("spawn").Process(target=_crash_after_sft, args=(str(lake.uri),))
    p.start()
    p.join(120)
    assert p.exitcode == 3
    assert len(_ids(lake, "sft")) == 7 and lake.count("ct") == 0  # killed between the two appends
    with pytest.raises(RoutingError, match="neither pile"):
        summarize(lake, 1)
    s = route_round(lake, 1)
    assert s.routed_now == 4 and (s.n_pass, s.n_fail) == (7, 4)
    sft, ct = _ids(lake, "sft"), _ids(lake, "ct")
    assert not sft & ct and sft | ct == {e.episode_id for e in eps}
    assert lake.count("verdicts") == 100  # the stored verdicts were reused, not duplicated


def test_failed_data_quality_stops_routing_unless_overridden(lake):
    shot = store_png(lake)
    eps = [make_episode(shot, i=i, screen_width=99999) for i in range(3)]  # absurd screen sizes
    land(lake, eps)
    with pytest.raises(DataQualityError, match="--allow-failed-dq"):
        route_round(lake, 1)
    assert lake.count("sft") + lake.count("ct") == 0
    dq = lake.read("dq_results").to_pylist()
    assert len(dq) == 1 and not dq[0]["success"] and not dq[0]["overridden"]
    s = route_round(lake, 1, allow_failed_dq=True)
    assert s.n_new == 3 and s.dq["overridden"] is True
    assert sorted(r["overridden"] for r in lake.read("dq_results").to_pylist()) == [False, True]


def test_update_round_merges(lake):
    update_round(lake, 4, n_new=10, breakdown={"by_source": {"x": 1}})
    update_round(lake, 4, eval_pass_rate=0.5, breakdown={"eval": {"a": 2}})
    row = lake.read("rounds").to_pylist()[0]
    assert row["n_new"] == 10 and row["eval_pass_rate"] == 0.5
    assert json.loads(row["breakdown"]) == {"by_source": {"x": 1}, "eval": {"a": 2}}


@given(
    st.lists(
        st.tuples(
            st.integers(0, 5), st.booleans(), st.booleans(), st.sampled_from(["rollout", "interactive", "think_aloud"])
        ),
        min_size=1,
        max_size=12,
    )
)
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
def test_conservation_for_random_batches(tmp_path_factory, spec):
    lake = Lake.open(tmp_path_factory.mktemp("lake") / "lake", create=True)
    shot = store_png(lake)
    eps = []
    for k, (content, env_ok, off_screen, source) in enumerate(spec):
        ep = make_episode(
            shot, i=content, source=source, session_id=f"s{k}", env_passed=env_ok if source == "rollout" else None
        )
        if off_screen:
            ep = with_step(ep, 0, action="click(point='<point>4000 1</point>')")
        eps.append(ep)
    land(lake, eps)
    s = route_round(lake, 1)
    ids = {e.episode_id for e in eps}
    sft, ct = _ids(lake, "sft"), _ids(lake, "ct")
    assert s.n_new == len(ids) == s.n_pass + s.n_fail
    assert not sft & ct and sft | ct == ids
    # every content at most once in SFT
    contents = {}
    for e in eps:
        if e.episode_id in sft:
            key = (e.instruction, tuple(st.action for st in e.steps))
            assert key not in contents
            contents[key] = e.episode_id


def test_simulate_leniency_reaches_sft(lake):
    strict = simulate(2, 600, [0.3, 0.7], 0.0)
    assert all(r.failures_in_sft == 0 and r.n_pass + r.n_fail == 600 for r in strict)
    assert abs(strict[1].pass_rate - 0.7) < 0.07
    lenient = simulate(1, 2000, [0.4], 0.25, lake=lake)
    r = lenient[0]
    assert 0.19 < r.failures_to_sft_share < 0.31
    assert lake.count("sft") == r.n_pass


def test_rewards_match_routing(lake):
    from validators.registry import ValidationContext

    eps, named = _mixed(lake)
    reward = policy_reward("rollout", context=ValidationContext(lake=lake))  # screenshots are keys of this lake
    rewards = reward([e for e in eps if e.source == "rollout"])
    land(lake, eps)
    route_round(lake, 1)
    sft = _ids(lake, "sft")
    for e, r in zip([e for e in eps if e.source == "rollout"], rewards):
        if e is named["dup"]:
            assert r == 1.0  # dedup is not part of the reward
        else:
            assert r == (1.0 if e.episode_id in sft else 0.0)
    assert make_reward(["env_verdict"], mode="score")([named["bad_env"]]) == [0.0]
