"""Streaming rollout ingestion into a real Delta lake: landing, malformed lines, idempotency, Parquet, blocks."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from ingest.formats.rollouts import ROLLOUT, RolloutAttempt, write_rollouts
from ingest.rollouts import ingest_rollout_file
from schemas.records import Episode
from tests.ingest_records.helpers import attempt, write_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "rollouts"


def _quarantine(lake) -> list[dict]:
    return sorted(lake.read("quarantine").to_pylist(), key=lambda r: r["locator"] or "")


def test_example_file_lands_with_every_field(lake) -> None:
    r = ingest_rollout_file(lake, EXAMPLES / "rollouts.jsonl", round=4)
    assert (r.result.episodes_added, r.result.quarantined_seen, r.n_steps) == (3, 0, 10)
    eps = {e["attempt"]: e for e in lake.read("episodes").to_pylist()}
    ok, limit, unread = eps[0], eps[1], eps[2]
    assert ok["source"] == "rollout" and ok["round"] == 4 and ok["group"] == "model"
    assert (ok["outcome"], ok["env_reward"], ok["env_passed"], ok["final_answer"]) == ("finished", 1.0, True, "Q3 plan")
    assert ok["session_id"] == "rs-round4" and ok["policy_version"] == "ckpt-r4" and ok["group_id"] == "grp-0003-r4"
    assert (ok["screen_width"], ok["task_family"], ok["difficulty"], ok["reference_answer"]) == (
        800,
        "form",
        1,
        "Q3 plan",
    )
    s0 = ok["steps"][0]
    assert (s0["index"], s0["action_type"], s0["x"], s0["y"]) == (0, "click", 300, 120)
    assert s0["token_logprobs"] == pytest.approx([-0.1, -0.3]) and s0["logprob_sum"] == pytest.approx(-0.4)
    assert ok["steps"][1]["text"] == "Q3 plan" and [s["index"] for s in ok["steps"]] == [0, 1, 2, 3]
    assert limit["outcome"] == "step_limit" and limit["steps"][2]["direction"] == "down"
    # the unreadable action is kept: a real failed attempt with the report's reward of -1
    assert (unread["outcome"], unread["env_reward"], unread["env_passed"]) == ("unreadable_action", -1.0, False)
    assert unread["steps"][-1]["action"] == "press(save)" and unread["steps"][-1]["action_type"] is None
    # ids are Episode.content_hash
    for row in eps.values():
        assert Episode.from_row(row).content_hash() == row["episode_id"]
    sess = lake.read("sessions").to_pylist()
    assert (
        len(sess) == 1 and sess[0]["n_episodes"] == 3 and sess[0]["n_actions"] == 10 and sess[0]["status"] == "landed"
    )


def test_a_missing_logprob_sum_is_the_sum_of_the_token_logprobs(lake, tmp_path: Path) -> None:
    """Only steps without logprob_sum get the sum; a given one is kept, and a step with neither stays empty."""
    a = attempt(0, n_steps=4)  # steps 0-2 give logprob_sum -1.5; the last gives only token_logprobs [-0.25, -0.5]
    a["steps"][1] = {"action": "wait()"}  # neither
    a["steps"][2] = {"action": "wait()", "token_logprobs": [-1.0, -2.0, -0.5]}
    ingest_rollout_file(lake, write_lines(tmp_path / "r.jsonl", [a, attempt(1)]))
    eps = {e["attempt"]: e for e in lake.read("episodes").to_pylist()}
    sums = [s["logprob_sum"] for s in eps[0]["steps"]]
    assert sums[0] == pytest.approx(-1.5) and sums[1] is None
    assert sums[2] == pytest.approx(-3.5) and sums[3] == pytest.approx(-0.75)
    assert [s["logprob_sum"] for s in eps[1]["steps"]] == pytest.approx([-1.5, -1.5, -0.75])


def test_jsonl_and_parquet_of_the_same_attempts_are_the_same_episodes(lake) -> None:
    a = ingest_rollout_file(lake, EXAMPLES / "rollouts.jsonl")
    b = ingest_rollout_file(lake, EXAMPLES / "rollouts.parquet")
    assert a.result.episodes_added == 3 and b.result.episodes_added == 0 and b.result.episodes_seen == 3
    assert lake.count("sessions") == 2  # one row per file


def _malformed(tmp_path: Path) -> Path:
    lines: list = [attempt(i) for i in range(12)]
    lines[1] = '{"task_id": "t0", "group_id": '  # invalid JSON
    lines[2] = {k: v for k, v in attempt(2).items() if k != "policy_version"}  # missing field
    lines[3] = attempt(3, attempt="three")  # wrong type
    lines[4] = attempt(
        4,
        steps=[
            {"thought": "x", "action": "teleport(point='<point>1 2</point>')"},
            {"thought": "y", "action": "finished(content='ok')"},
        ],
    )  # unknown action kind
    lines[5] = attempt(5, reward=3.5)  # reward outside [-1, 1]
    lines[6] = json.dumps(attempt(6)).replace('"token_logprobs": [-1.0, -0.5]', '"token_logprobs": [NaN, -0.5]', 1)
    lines[7] = attempt(
        7,
        steps=[
            {"thought": "x", "action": "click(point='<point>1 2</point>')"},
            {"thought": "I press it", "action": "press the button!!"},
        ],
        termination="unreadable_action",
        reward=None,
        passed=None,
    )  # kept
    lines[8] = attempt(8, termination="crashed")  # unknown termination
    lines[9] = "[1, 2, 3]"  # JSON, but not an object
    lines[10] = attempt(10, steps=[{"thought": "x"}])  # a step without action
    return write_lines(tmp_path / "bad.jsonl", lines)


EXPECTED = {
    "line 2": "invalid_json",
    "line 3": "missing_field",
    "line 4": "wrong_type",
    "line 5": "unknown_action_kind",
    "line 6": "reward_out_of_range",
    "line 7": "nan_logprob",
    "line 9": "bad_termination",
    "line 10": "wrong_type",
    "line 11": "missing_field",
}


@pytest.mark.parametrize("block_bytes", [1 << 20, 700])  # one block, and blocks of a line or two
def test_each_malformed_line_is_quarantined_with_its_line_and_reason(lake, tmp_path: Path, block_bytes: int) -> None:
    r = ingest_rollout_file(lake, _malformed(tmp_path), block_bytes=block_bytes)
    q = {row["locator"]: row for row in _quarantine(lake)}
    assert {k: v["error_type"] for k, v in q.items()} == EXPECTED
    assert "policy_version" in q["line 3"]["error"] and "line 3" in q["line 3"]["error"]
    assert "teleport" in q["line 5"]["error"] and "3.5" in q["line 6"]["error"]
    landed = sorted(lake.read("episodes", columns=["attempt", "task_id"]).to_pylist(), key=lambda d: d["task_id"])
    assert len(landed) == 12 - len(EXPECTED) == r.result.episodes_added  # lines 1, 8 (kept), 12
    unread = lake.read("episodes", filter=pc.field("outcome") == "unreadable_action").to_pylist()
    assert (
        len(unread) == 1 and unread[0]["env_reward"] == -1.0 and unread[0]["steps"][1]["action"] == "press the button!!"
    )
    assert sorted(lake.read("sessions").to_pylist()[0]["problems"]) == sorted(
        f"{c} x{n}" for c, n in {c: list(EXPECTED.values()).count(c) for c in set(EXPECTED.values())}.items()
    )


def test_unreadable_action_must_be_last_and_score_minus_one(lake, tmp_path: Path) -> None:
    mid = attempt(
        0,
        steps=[{"action": "press the button"}, {"action": "finished(content='x')"}],
        termination="unreadable_action",
        reward=-1.0,
        passed=False,
    )
    wrong_reward = attempt(1, steps=[{"action": "garbage"}], termination="unreadable_action", reward=0.5, passed=False)
    finished_garbage = attempt(2, steps=[{"action": "garbage"}], termination="finished")
    ingest_rollout_file(lake, write_lines(tmp_path / "u.jsonl", [mid, wrong_reward, finished_garbage]))
    assert [r["error_type"] for r in _quarantine(lake)] == ["bad_action", "reward_mismatch", "bad_action"]
    assert lake.count("episodes") == 0


def test_blank_lines_keep_line_numbers_right(lake, tmp_path: Path) -> None:
    p = write_lines(tmp_path / "b.jsonl", [attempt(0), "", "   ", attempt(1, reward=9.0), attempt(2)])
    ingest_rollout_file(lake, p)
    assert [(r["locator"], r["error_type"]) for r in _quarantine(lake)] == [("line 4", "reward_out_of_range")]
    metas = sorted(json.loads(m)["line"] for m in lake.read("episodes", columns=["meta"]).column("meta").to_pylist())
    assert metas == [1, 5]


def test_reingesting_the_same_or_an_overlapping_file_adds_only_new_episodes(lake, tmp_path: Path) -> None:
    a = write_lines(tmp_path / "a.jsonl", [attempt(i) for i in range(100)])
    b = write_lines(tmp_path / "b.jsonl", [attempt(i) for i in range(60, 150)])  # 40 overlap, 50 new
    assert ingest_rollout_file(lake, a).result.episodes_added == 100
    v = lake.version("episodes")
    again = ingest_rollout_file(lake, a)
    assert again.result.episodes_added == 0 and again.result.sessions_added == 0 and lake.version("episodes") == v
    assert ingest_rollout_file(lake, b, block_bytes=2048).result.episodes_added == 50
    assert lake.count("episodes") == 150 and lake.count("sessions") == 2
    ids = lake.read("episodes", columns=["episode_id"]).column("episode_id")
    assert pc.count_distinct(ids).as_py() == 150


def test_small_blocks_give_the_same_episodes_as_one_block(tmp_path: Path) -> None:
    from storage import Lake

    p = write_lines(tmp_path / "x.jsonl", [attempt(i, n_steps=1 + i % 4) for i in range(40)])
    tables = []
    for i, bb in enumerate([1 << 20, 300]):
        lk = Lake.open(tmp_path / f"lake{i}", create=True)
        ingest_rollout_file(lk, p, block_bytes=bb)
        tables.append(lk.read("episodes").sort_by("episode_id").drop_columns(["ingested_at"]))
    assert tables[0].num_rows == 40 and tables[0].equals(tables[1])


def test_a_table_of_several_chunks_converts_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON reader gives one chunk per 16 MiB; convert() takes them one by one (no combining copy): the same
    episodes, quarantine rows and step count as the combined table, bad rows in any chunk."""
    import io

    import numpy as np
    import pyarrow.json as pj

    import ingest.rollouts as ir
    from ingest.rollouts import _PARSE, convert

    lines = [attempt(i, n_steps=1 + i % 4) for i in range(5000)]
    lines[1234]["reward"] = 7.0  # out of range, in the first chunk
    lines[4321]["steps"][0]["action"] = "fly(to='moon')"  # unknown action kind, in the last chunk
    raw = "".join(json.dumps(d) + "\n" for d in lines).encode()
    t = pj.read_json(io.BytesIO(raw), parse_options=_PARSE, read_options=pj.ReadOptions(block_size=500_000))
    assert t.column("steps").num_chunks >= 3
    nums = np.arange(1, t.num_rows + 1)
    calls = []
    one = ir._convert_chunk
    monkeypatch.setattr(ir, "_convert_chunk", lambda *a, **k: calls.append(1) or one(*a, **k))
    a = convert(t, nums, landed_uri="x.jsonl")
    assert len(calls) == t.column("steps").num_chunks  # chunk by chunk
    b = convert(t.combine_chunks(), nums, landed_uri="x.jsonl")
    assert a.episodes.num_rows == 4998 and a.n_steps == b.n_steps
    assert a.episodes.drop_columns(["ingested_at"]).equals(b.episodes.drop_columns(["ingested_at"]))
    assert len(set(a.episodes.column("ingested_at").to_pylist())) == 1  # one time for the block
    assert [(q.error_type, q.error) for q in a.quarantined] == [(q.error_type, q.error) for q in b.quarantined]
    assert [q.error_type for q in a.quarantined] == ["reward_out_of_range", "unknown_action_kind"]


def test_parquet_streams_in_batches_and_quarantines_nan(lake, tmp_path: Path) -> None:
    good = [RolloutAttempt.from_dict(attempt(i)) for i in range(30)]
    p = tmp_path / "r.parquet"
    write_rollouts(p, good, "parquet", batch_size=7)
    # a NaN that only Parquet can carry: patch one value in the written file
    t = pq.read_table(p)
    rows = t.to_pylist()
    rows[12]["steps"][0]["logprob_sum"] = float("nan")
    rows[20]["reward"] = -1.5
    pq.write_table(pa.Table.from_pylist(rows, schema=ROLLOUT), p, row_group_size=7)
    r = ingest_rollout_file(lake, p, parquet_batch_rows=5)
    assert r.result.episodes_added == 28
    assert [(q["locator"], q["error_type"]) for q in _quarantine(lake)] == [
        ("row 13", "nan_logprob"),
        ("row 21", "reward_out_of_range"),
    ]


def test_parquet_with_a_wrong_column_type_is_quarantined_whole(lake, tmp_path: Path) -> None:
    p = tmp_path / "w.parquet"
    pq.write_table(pa.table({"task_id": ["t"], "attempt": [[1, 2]]}), p)
    r = ingest_rollout_file(lake, p)
    q = _quarantine(lake)
    assert (
        r.result.episodes_added == 0
        and len(q) == 1
        and q[0]["error_type"] == "wrong_type"
        and "attempt" in q[0]["error"]
    )


def test_writer_refuses_what_the_reader_would_quarantine(tmp_path: Path) -> None:
    for bad in (
        attempt(0, reward=2.0),
        attempt(0, termination="oops"),
        {**attempt(0), "task_id": None},
        attempt(0, steps=[{"action": "wait()", "logprob_sum": float("nan")}]),
    ):
        with pytest.raises(ValueError):
            write_rollouts(tmp_path / "x.jsonl", [bad])
    # an unreadable action is not the writer's business: it is a legitimate outcome
    ok = attempt(0, steps=[{"action": "??"}], termination="unreadable_action", reward=-1.0, passed=False)
    assert write_rollouts(tmp_path / "x.jsonl", [ok]) == 1


@pytest.mark.slow
def test_one_bad_line_in_100000(lake, tmp_path: Path) -> None:
    from bench.bench_ingest_rollouts import generate

    p = tmp_path / "big.jsonl"
    generate(p, 100_000, steps=2, bad_lines=(54_321,))
    r = ingest_rollout_file(lake, p)
    assert r.result.episodes_added == 99_999 == lake.count("episodes")
    q = lake.read("quarantine").to_pylist()
    assert len(q) == 1 and q[0]["locator"] == "line 54321" and q[0]["error_type"] == "invalid_json"
    assert q[0]["error"].startswith("line 54321: invalid JSON")
