"""Synthetic rollouts with known truth, built columnar (a million episodes in seconds) for `flywheel simulate` and
the routing benchmark. Episodes carry their truth in meta ({"truth": true|false}); the environment's verdict is
the truth, except that a lenient verifier passes a true failure with probability `leniency`.

Episode ids are content hashes of the generator's inputs (seed, round, index), not of the rows, which would cost
a Python pass over every step; they are unique and stable, which is what routing relies on.
"""

from __future__ import annotations

import hashlib
import io
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from core import PIPELINE_VERSION
from schemas.tables import EPISODES, STEP

FAMILIES = ("office", "browser", "files", "settings")


def screenshot_pool(lake: Any, k: int = 4, size: tuple[int, int] = (64, 40)) -> list[tuple[str, str]]:
    """k real PNG screenshots in the lake's object store: [(uri, sha256)]."""
    from PIL import Image

    out = []
    for i in range(k):
        buf = io.BytesIO()
        Image.new("RGB", size, (40 * i % 256, 90, 160)).save(buf, format="PNG")
        data = buf.getvalue()
        out.append((lake.objects.put_object(data, ".png"), hashlib.sha256(data).hexdigest()))
    return out


def _ids(seed: int, round: int, start: int, n: int, salt: str = "") -> pa.Array:
    return pa.array(
        [
            hashlib.blake2b(f"{salt}{seed}:{round}:{i}".encode(), digest_size=16).hexdigest()
            for i in range(start, start + n)
        ]
    )


def _s(a: np.ndarray | pa.Array) -> pa.Array:
    return pc.cast(pa.array(a), pa.string())


def synthetic_rollouts(
    n: int,
    round: int,
    *,
    screenshots: list[tuple[str, str]],
    steps: int = 20,
    seed: int = 0,
    true_pass_share: float = 0.5,
    leniency: float = 0.0,
    bad_share: float = 0.0,
    dup_share: float = 0.0,
    width: int = 1280,
    height: int = 800,
    start: int = 0,
) -> pa.Table:
    """n rollout episodes of `steps` steps with the episodes table's schema.

    bad_share: share with a structural fault (a click off the screen); dup_share: share that repeat an earlier
    episode's instruction and actions under a new id (exact duplicates).
    """
    rng = np.random.default_rng([seed, round, start])
    N = n * steps
    ep = np.repeat(np.arange(n), steps)
    pos = np.tile(np.arange(steps), n)
    gi = ep + start
    x = rng.integers(0, width, N)
    y = rng.integers(0, height, N)
    bad = rng.random(n) < bad_share
    x[(pos == 0) & bad[ep]] = width + 7  # off screen
    kind = rng.integers(0, 4, N)
    kind[pos == steps - 1] = 4
    xs, ys = _s(x), _s(y)
    pt = pc.binary_join_element_wise("'<point>", xs, " ", ys, "</point>'", "")
    click = pc.binary_join_element_wise("click(point=", pt, ")", "")
    typ = pc.binary_join_element_wise("type(content='report ", _s(gi), "')", "")
    scroll = pc.binary_join_element_wise("scroll(point=", pt, ", direction='down')", "")
    hotkey = pa.array(np.full(N, "hotkey(key='ctrl s')", dtype=object), pa.string())
    finished = pa.array(np.full(N, "finished(content='done')", dtype=object), pa.string())
    k = pa.array(kind)
    action = pc.choose(k, click, typ, scroll, hotkey, finished)
    names = np.array(["click", "type", "scroll", "hotkey", "finished"], dtype=object)
    has_pt = (kind == 0) | (kind == 2)
    none_i = pa.nulls(N, pa.int32())
    text = pc.if_else(
        pa.array(kind == 1),
        pc.binary_join_element_wise("report ", _s(gi), ""),
        pc.if_else(pa.array(kind == 4), "done", pa.scalar(None, pa.string())),
    )
    thought = pc.binary_join_element_wise("I ", pa.array(names[kind], pa.string()), " to reach report ", _s(gi), "")
    shot = np.arange(N) % len(screenshots)
    cols = {
        "index": pa.array(pos.astype(np.int32)),
        "t_start": pa.array(pos * 1.5),
        "t_end": pa.array(pos * 1.5 + 1.0),
        "thought": thought,
        "raw_thought": thought,
        "action": action,
        "action_type": pa.array(names[kind], pa.string()),
        "x": pa.array(np.where(has_pt, x, 0).astype(np.int32), mask=~has_pt),
        "y": pa.array(np.where(has_pt, y, 0).astype(np.int32), mask=~has_pt),
        "x2": none_i,
        "y2": none_i,
        "text": text,
        "key": pc.if_else(pa.array(kind == 3), "ctrl s", pa.scalar(None, pa.string())),
        "direction": pc.if_else(pa.array(kind == 2), "down", pa.scalar(None, pa.string())),
        "screenshot_uri": pa.array([s[0] for s in screenshots], pa.string()).take(pa.array(shot)),
        "screenshot_sha256": pa.array([s[1] for s in screenshots], pa.string()).take(pa.array(shot)),
    }
    arrays = [cols[f.name] if f.name in cols else pa.nulls(N, f.type) for f in STEP]
    step_struct = pa.StructArray.from_arrays(arrays, fields=list(STEP))
    steps_col = pa.ListArray.from_arrays(pa.array(np.arange(0, N + 1, steps, dtype=np.int32)), step_struct)
    truth = rng.random(n) < true_pass_share
    env_passed = truth | (rng.random(n) < leniency)
    idx = np.arange(start, start + n)
    table = pa.table(
        {
            "episode_id": _ids(seed, round, start, n),
            "session_id": pa.array(np.full(n, f"sim-{seed}-r{round}", dtype=object), pa.string()),
            "source": pa.array(np.full(n, "rollout", dtype=object), pa.string()),
            "round": pa.array(np.full(n, round, dtype=np.int32)),
            "task_id": pc.binary_join_element_wise("task-", _s(idx % 997), ""),
            "task_family": pa.array(np.array(FAMILIES, dtype=object)[idx % len(FAMILIES)], pa.string()),
            "instruction": pc.binary_join_element_wise(
                "Open report ", _s(idx), " and export it as PDF (round ", _s(np.full(n, round)), ")", ""
            ),
            "screen_width": pa.array(np.full(n, width, dtype=np.int32)),
            "screen_height": pa.array(np.full(n, height, dtype=np.int32)),
            "group": pa.array(np.full(n, "model", dtype=object), pa.string()),
            "policy_version": pa.array(np.full(n, f"sim-policy-r{round}", dtype=object), pa.string()),
            "attempt": pa.array(idx.astype(np.int32)),
            "final_answer": pa.array(np.full(n, "done", dtype=object), pa.string()),
            "outcome": pa.array(np.full(n, "finished", dtype=object), pa.string()),
            "env_reward": pa.array(env_passed.astype(float)),
            "env_passed": pa.array(env_passed),
            "n_steps": pa.array(np.full(n, steps, dtype=np.int32)),
            "steps": steps_col,
            "pipeline_version": pa.array(np.full(n, PIPELINE_VERSION, dtype=object), pa.string()),
            "ingested_at": pa.array(np.full(n, datetime.now(UTC))).cast(pa.timestamp("us", tz="UTC")),
            "meta": pc.if_else(pa.array(truth), '{"truth": true}', '{"truth": false}'),
        }
    )
    if dup_share > 0 and n > 1:
        n_dup = int(n * dup_share)
        src = rng.integers(0, n, n_dup)
        dups = table.take(pa.array(src))
        dups = dups.set_column(0, "episode_id", _ids(seed, round, start, n_dup, salt="dup:"))
        table = pa.concat_tables([table, dups])
    arrays = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in EPISODES
    ]
    return pa.Table.from_arrays(arrays, schema=EPISODES)
