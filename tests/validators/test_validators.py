"""Every shipped validator: a passing and a failing case with its reason code; check == check_batch."""

from __future__ import annotations

import json
from dataclasses import replace

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.actions import ActionError, parse_action
from schemas.records import episodes_to_table
from tests.validators.factory import make_episode, store_png, with_step
from validators.dedup import ExactDedup, NearDedup
from validators.outcome import EnvVerdict, ReferenceAnswer
from validators.registry import REGISTRY, load_policy, parse_policy
from validators.review import HumanReview
from validators.structural import (
    ActionGrammar,
    MonotonicTime,
    OnScreen,
    Schema,
    Screenshot,
    StepLimit,
    Thoughts,
    actions_valid,
)


@pytest.fixture
def shot(tmp_path):
    return store_png(tmp_path)


def _fail_cases(shot):
    ep = make_episode(shot)
    return [
        (Schema(), replace(ep, instruction="  ", episode_id=""), "schema_invalid"),
        (ActionGrammar(), with_step(ep, 1, action="click(point='<point>1 2</point>'"), "bad_action"),
        (OnScreen(), with_step(ep, 0, action="click(point='<point>5000 3</point>')"), "off_screen"),
        (OnScreen(), replace(ep, screen_width=None, episode_id=""), "no_screen_size"),
        (MonotonicTime(), with_step(ep, 2, t_start=0.2, t_end=0.3), "time_not_monotonic"),
        (Thoughts(), with_step(ep, 1, thought=" "), "empty_thought"),
        (Screenshot(), with_step(ep, 1, screenshot_sha256=None), "screenshot_missing"),
        (Screenshot(), with_step(ep, 1, screenshot_sha256="0" * 64), "screenshot_undecodable"),
        (StepLimit(max_steps=3), ep, "step_limit"),
        (StepLimit(), replace(ep, outcome="step_limit", episode_id=""), "step_limit"),
        (EnvVerdict(), replace(ep, env_passed=False, env_reward=0.0, episode_id=""), "env_failed"),
        (EnvVerdict(), replace(ep, env_passed=None, env_reward=None, episode_id=""), "no_env_verdict"),
        (
            ReferenceAnswer(),
            replace(ep, reference_answer="42 apples", final_answer="7 pears", episode_id=""),
            "answer_mismatch",
        ),
        (ReferenceAnswer(), replace(ep, reference_answer="42", final_answer=None, episode_id=""), "no_answer"),
        (
            HumanReview(),
            replace(
                ep,
                meta={"reviews": [{"annotator": "a", "verdict": "good"}, {"annotator": "b", "verdict": "bad"}]},
                episode_id="",
            ),
            "review_disagreement",
        ),
        (
            HumanReview(),
            replace(
                ep,
                meta={"reviews": [{"annotator": "a", "passed": False}, {"annotator": "b", "passed": False}]},
                episode_id="",
            ),
            "review_rejected",
        ),
        (HumanReview(require_two=True), ep, "review_missing"),
    ]


def test_every_validator_passes_a_good_episode(shot):
    ep = make_episode(
        shot,
        reference_answer="Done.",
        meta={"reviews": [{"annotator": "a", "verdict": "good"}, {"annotator": "b", "verdict": "good"}]},
    )
    for name, cls in REGISTRY.items():
        if name == "judge":
            continue  # tests/validators/test_judge.py
        v = cls()
        verdict = v.check(ep)
        assert verdict.passed and verdict.reason == "ok", (name, verdict)


def test_failing_cases_have_their_reason_code(shot):
    cases = _fail_cases(shot)
    for v, ep, code in cases:
        verdict = v.check(ep)
        assert not verdict.passed and verdict.reason == code, (v.name, code, verdict)
        assert code in v.codes
    covered = {v.name for v, _, _ in cases} | {"dedup_exact", "dedup_near", "judge"}
    assert covered == set(REGISTRY)


def test_reference_answer_fuzzy_and_normalised(shot):
    ep = make_episode(shot)
    exact = ReferenceAnswer().check(
        replace(ep, reference_answer="The Answer: 42!", final_answer="the answer 42", episode_id="")
    )
    assert exact.passed and exact.details["match"] == "exact"
    fuzzy = ReferenceAnswer().check(
        replace(
            ep, reference_answer="Quarterly report for 2024", final_answer="Quartely report for 2024", episode_id=""
        )
    )
    assert fuzzy.passed and fuzzy.details["match"] == "fuzzy" and fuzzy.score < 1


def test_exact_dedup_batch_and_pile(shot):
    a = make_episode(shot, i=1)
    b = replace(a, session_id="other", episode_id="")  # same instruction and actions, another session
    c = make_episode(shot, i=2)
    v = ExactDedup()
    res = v.check_batch(episodes_to_table([a, b, c])).to_pylist()
    assert [r["passed"] for r in res] == [True, False, True]
    assert res[1]["reason"] == "duplicate" and json.loads(res[1]["details"])["duplicate_of"] == "batch"
    from validators.base import EpisodeBatch

    v.after_batch(EpisodeBatch(episodes_to_table([a])), None)
    again = v.check(b)
    assert not again.passed and again.reason == "duplicate" and again.details["duplicate_of"] == "pile"
    assert v.check(c).passed


def test_exact_dedup_passes_the_first_copy_of_each_content_wherever_the_copies_sit(shot):
    """In-batch duplicates are found from the sorted content words: exactly the first episode of each content
    passes, every later copy fails as a duplicate of the batch."""
    pool = [make_episode(shot, i=i) for i in range(4)]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.integers(0, 3), min_size=1, max_size=14))
    def check(picks):
        eps = [replace(pool[p], session_id=f"copy{j}", episode_id="") for j, p in enumerate(picks)]
        res = ExactDedup().check_batch(episodes_to_table(eps)).to_pylist()
        first = {p: j for j, p in reversed(list(enumerate(picks)))}
        assert [r["passed"] for r in res] == [first[p] == j for j, p in enumerate(picks)]
        assert all(json.loads(r["details"])["duplicate_of"] == "batch" for r in res if not r["passed"])
        assert all(r["details"] is None and r["reason"] == "ok" for r in res if r["passed"])

    check()


def test_near_dedup_catches_a_small_change(shot):
    a = make_episode(shot, i=1, n_steps=12)
    near = with_step(a, 3, action="click(point='<point>11 20</point>')")
    other = make_episode(shot, i=2, n_steps=12, instruction="Rename every photo in the holiday folder by date")
    other = replace(
        other,
        steps=tuple(replace(s, action="scroll(point='<point>50 60</point>', direction='up')") for s in other.steps),
        episode_id="",
    )
    res = NearDedup(threshold=0.7).check_batch(episodes_to_table([a, near, other])).to_pylist()
    assert [r["passed"] for r in res] == [True, False, True]
    assert res[1]["reason"] == "duplicate"


def test_policy_file_and_errors(tmp_path):
    pol = load_policy()
    assert {s.name for s in pol.for_source("rollout")} >= {"schema", "action_grammar", "env_verdict", "dedup_exact"}
    assert "thoughts" in {s.name for s in pol.for_source("interactive")}
    with pytest.raises(ValueError, match="unknown validator"):
        parse_policy({"sources": {"rollout": ["nope"], "default": ["schema"]}})
    with pytest.raises(ValueError, match="no parameter"):
        parse_policy({"sources": {"default": [{"name": "step_limit", "max_step": 3}]}})
    p = tmp_path / "p.yaml"
    p.write_text("sources:\n  default: [schema]\n")
    assert [s.name for s in load_policy(p).for_source("think_aloud")] == ["schema"]


def test_params_change_the_version():
    assert StepLimit().version == "1"
    assert (
        StepLimit(max_steps=5).version.startswith("1+")
        and StepLimit(max_steps=5).version != StepLimit(max_steps=6).version
    )


# ------------------------------------------------------------------------------------- grammar agreement
def _parses(s: str) -> bool:
    try:
        parse_action(s)
        return True
    except ActionError:
        return False


action_like = st.one_of(
    st.text(max_size=40),
    st.builds(
        lambda k, x, y: f"{k}(point='<point>{x} {y}</point>')",
        st.sampled_from(["click", "left_double", "right_single", "clik"]),
        st.integers(-5, 20000),
        st.integers(0, 20000),
    ),  # fmt: skip
    st.builds(lambda t: f"type(content='{t}')", st.text(max_size=15)),
    st.builds(lambda k: f"hotkey(key='{k}')", st.text(max_size=10)),
    st.builds(
        lambda d: f"scroll(point='<point>1 2</point>', direction='{d}')", st.sampled_from(["up", "down", "sideways"])
    ),
    st.sampled_from(["wait()", "press_home()", "finished(content='x')", "wait( )", " click(point='(3,4)')"]),
    # digits of other scripts: `\d` in Rust's regex (the fast path's engine) would take them, the parser does not
    st.sampled_from(
        [
            "click(point='<point>\u0661\u0662 5</point>')",
            "type(content='\u0663')",
            "click(point='<point>7 \uff18</point>')",
        ]
    ),
)


@given(st.lists(action_like, min_size=1, max_size=30))
@settings(max_examples=150, deadline=None)
def test_vector_grammar_equals_parse_action(actions):
    assert list(actions_valid(pa.array(actions, pa.string()))) == [_parses(a) for a in actions]


# --------------------------------------------------------------------------------- check == check_batch
@st.composite
def episodes(draw, shot):
    from tests.validators.factory import make_steps

    n = draw(st.integers(1, 6))
    acts = draw(st.lists(action_like, min_size=n, max_size=n))
    steps = list(make_steps(n, shot, actions=acts))
    for i in range(n):
        if draw(st.booleans()):
            steps[i] = replace(
                steps[i], t_start=draw(st.floats(-1, 10)), t_end=draw(st.one_of(st.none(), st.floats(-1, 10)))
            )
        if draw(st.integers(0, 4)) == 0:
            steps[i] = replace(steps[i], thought=draw(st.sampled_from(["", " ", "ok"])))
        if draw(st.integers(0, 6)) == 0:
            steps[i] = replace(steps[i], screenshot_sha256=draw(st.sampled_from([None, "zz", "0" * 64])))
    ep = make_episode(shot, i=draw(st.integers(0, 3)), instruction=draw(st.sampled_from(["", "Open it", "Open it"])),
                      screen_width=draw(st.sampled_from([None, 100, 320])), env_passed=draw(st.sampled_from([None, True, False])),
                      env_reward=draw(st.sampled_from([None, 0.0, 1.0])), reference_answer=draw(st.sampled_from([None, "done", "Done!", "nope"])))  # fmt: skip
    return replace(ep, steps=tuple(steps), episode_id="")


@pytest.mark.parametrize("name", [n for n in REGISTRY if n != "judge"])
def test_check_agrees_with_check_batch(name, tmp_path_factory):
    shot = store_png(tmp_path_factory.mktemp("png"))

    @given(st.lists(episodes(shot), min_size=1, max_size=6))
    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def prop(eps):
        v = REGISTRY[name]()
        batch = v.check_batch(episodes_to_table(eps)).to_pylist()
        for ep, row in zip(eps, batch):
            one = v.check(ep)
            if name.startswith("dedup"):  # alone, an episode is never a duplicate of its batch
                assert one.passed
                continue
            assert (one.passed, one.reason) == (row["passed"], row["reason"]), (ep, one, row)
            assert one.score == row["score"] or (one.score is None and row["score"] is None)

    prop()


def test_exact_dedup_keys_round_trip_as_integers_and_match_exactly() -> None:
    """The pile index holds keys as two uint64 words (validators/dedup.py): decoding the stored hex is exact, and a
    key that differs in one bit of either word is not a match."""
    import numpy as np

    from storage.keyindex import contains, key_words, sort_words
    from validators.dedup import _hex

    rng = np.random.default_rng(0)
    hi, lo = (rng.integers(0, 2**63, 1000, dtype=np.int64).astype(np.uint64) * np.uint64(2) for _ in range(2))
    words = key_words(_hex([hi, lo]))
    assert (words[:, 0] == hi).all() and (words[:, 1] == lo).all()
    assert (key_words(_hex([hi, lo]).slice(10, 5)) == words[10:15]).all()  # an offset slice decodes the same
    q = np.concatenate([words[:50], words[:50] ^ np.array([1, 0], np.uint64), words[:50] ^ np.array([0, 1], np.uint64)])
    hit = contains([sort_words(words)], q)
    assert hit[:50].all() and not hit[50:].any()
    assert not contains([np.zeros((0, 2), np.uint64)], q).any()


def test_schema_step_index_rule_equals_index_is_position(shot):
    """Schema checks step indices as "the first is 0, each next one more"; that must fail exactly the episodes where
    some step's index differs from its position (the rule as written), whatever the indices and nulls."""
    import numpy as np

    ep = make_episode(shot, n_steps=4)
    cases = [[0, 1, 2, 3], [1, 2, 3, 4], [0, 2, 3, 4], [0, 1, 1, 2], [0, 1, 2, 2], [3, 2, 1, 0], [0, 1, None, 3]]
    eps = [ep]
    for k, idx in enumerate(cases):
        steps = tuple(replace(s, index=i) for s, i in zip(ep.steps, idx))
        eps.append(replace(ep, steps=steps, session_id=f"s-{k}", episode_id=""))
    table = episodes_to_table(eps)
    got = ~Schema().check_batch(table).column("passed").to_numpy(zero_copy_only=False)
    want = [idx != list(range(4)) for idx in [list(range(4)), *cases]]
    assert list(got) == want
    # chunked and offset: the rule reads the steps of each chunk where the batch starts
    chunked = pa.concat_tables([table.slice(0, 3), table.slice(3)]).slice(1)
    got2 = ~Schema().check_batch(chunked).column("passed").to_numpy(zero_copy_only=False)
    assert list(got2) == want[1:] and np.asarray(want[1:]).any()


def test_exact_dedup_keys_do_not_depend_on_chunking(shot):
    """Content keys are hashed chunk by chunk (no copy of the actions): the same rows give the same keys however the
    table is chunked or sliced, null actions included."""
    import pyarrow.compute as pc

    from validators.base import EpisodeBatch
    from validators.dedup import content_keys, content_text

    table = episodes_to_table([make_episode(shot, i=i, n_steps=2 + i % 3) for i in range(9)]).combine_chunks()
    steps = table.column("steps").chunk(0)
    values = steps.values
    k = values.type.get_field_index("action")
    action = pc.if_else(pa.array([i == 5 for i in range(len(values))]), pa.scalar(None, pa.string()), values.field(k))
    children = [action if i == k else values.field(i) for i in range(values.type.num_fields)]
    values = pa.StructArray.from_arrays(children, fields=list(values.type))
    table = table.set_column(
        table.column_names.index("steps"), "steps", pa.ListArray.from_arrays(steps.offsets, values)
    )
    whole = content_keys(EpisodeBatch(table.combine_chunks()))
    parts = pa.concat_tables([table.slice(0, 2), table.slice(2, 5), table.slice(7)])
    assert content_keys(EpisodeBatch(parts)).equals(whole)
    assert content_keys(EpisodeBatch(parts.slice(3))).equals(whole.slice(3))
    assert content_text(EpisodeBatch(parts)).to_pylist() == content_text(EpisodeBatch(table)).to_pylist()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.text(st.sampled_from(" \t\n\x00a\u00a0\u2003\u00e9\x7f\x1fZ"), max_size=4)),
             max_size=30),
    st.integers(0, 5),
    st.integers(0, 3),
)  # fmt: skip
def test_has_text_matches_arrows_whitespace_test(values, offset, cut):
    """The numpy first-byte path of `_has_text` agrees with Arrow's Unicode whitespace test on every string: empty,
    null, leading NUL, non-ASCII spaces (U+00A0, U+2003), sliced and chunked arrays."""
    import numpy as np
    import pyarrow.compute as pc

    from validators.structural import _has_text

    def arrow(a):
        ok = pc.and_(pc.greater(pc.binary_length(a), 0), pc.invert(pc.utf8_is_space(a)))
        return np.asarray(pc.fill_null(ok, False).to_numpy(zero_copy_only=False), dtype=bool)

    a = pa.array(values, pa.string()).slice(min(offset, len(values)))
    assert _has_text(a).tolist() == arrow(a).tolist()
    chunked = pa.chunked_array([a, a.slice(cut)], pa.string())
    assert _has_text(chunked).tolist() == arrow(chunked).tolist()


def test_per_value_over_dictionaries_equals_the_plain_answer():
    """`per_value` answers once per distinct value and gathers by the indices: the same booleans as asking every
    element, null indices and an all-null chunk (empty dictionary) False."""
    import pyarrow.compute as pc

    from validators.base import per_value

    values = ["a", None, "bb", "a", "", "bb", None]
    plain = pa.array(values, pa.string())
    dictionary = pa.chunked_array([plain.dictionary_encode(), pa.array([None, None], pa.string()).dictionary_encode()])
    fn = lambda v: pc.greater(pc.binary_length(v), 0)
    want = [v is not None and len(v) > 0 for v in values] + [False, False]
    assert per_value(dictionary, fn).tolist() == want
    assert per_value(pa.chunked_array([plain, pa.array([None, None], pa.string())]), fn).tolist() == want


def test_the_high_word_prefilter_never_changes_what_contains_finds() -> None:
    """`contains` with a HighWordFilter finds exactly what it finds without one: random keys, keys sharing their
    high word (sequential ids pass the filter and are searched), queries present, absent and off by one bit, and a
    run added after the filter was built."""
    import numpy as np

    from storage.keyindex import HighWordFilter, contains, sort_words

    rng = np.random.default_rng(3)
    rand = rng.integers(0, 2**63, (3000, 2), dtype=np.int64).astype(np.uint64) * np.uint64(2)
    seq = np.column_stack([np.full(500, 7, np.uint64), np.arange(500, dtype=np.uint64)])
    runs = [sort_words(rand[:1000]), sort_words(rand[1000:2000]), sort_words(seq[:250])]
    filt = HighWordFilter(runs, 100_000)
    late = sort_words(rand[2000:2500])
    runs.append(late)
    filt.add(late)
    q = np.concatenate([rand, seq, rand[:300] ^ np.array([0, 1], np.uint64)])
    want = contains(runs, q)
    assert want[:2500].all() and not want[2500:3000].any() and want[3000:3250].all() and not want[3250:].any()
    assert (contains(runs, q, prefilter=filt) == want).all()
    assert len(filt.candidates(q[2500:3000])) < 100  # absent random keys mostly stop at the filter
