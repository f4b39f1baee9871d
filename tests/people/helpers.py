"""A populated lake for the people tests: every table has rows, episodes have real PNG screenshots in the store.

Rows are written through Lake.append with the tables' own schemas (the same path ingestion and routing use).
Pass/fail is decided here by a fixed rule so the expected numbers are known: episode i of a round passes unless
i % 3 == 2 (so each round's pass rate is known exactly).
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.records import Episode, Proposal, Step, episodes_to_table
from schemas.tables import CT, SFT
from storage.lake import Lake, content_id

T0 = datetime(2025, 1, 1, tzinfo=UTC)
SOURCES = ("think_aloud", "interactive", "rollout")
VALIDATORS = (("structural", "1"), ("outcome", "2"))
ANNOTATORS = ("anon-a", "anon-b")


def png(color: tuple[int, int, int], size: tuple[int, int] = (64, 40)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def make_episode(lake: Lake, round: int, source: str, i: int) -> Episode:
    shots = [png(((40 * i + 20 * k) % 256, 10 * round, 100 + k)) for k in range(2)]
    uris = [lake.objects.put_object(s, ".png") for s in shots]
    import hashlib

    interactive = source == "interactive"
    annot = None if source == "rollout" else ANNOTATORS[i % 2]
    steps = []
    for k, (uri, data) in enumerate(zip(uris, shots)):
        overridden = interactive and k == 0 and i % 2 == 0
        steps.append(
            Step(
                index=k,
                action="click(point='<point>10 20</point>')" if k == 0 else "finished(content='done')",
                thought=f"step {k} of episode {i} <b>bold?</b>" if k == 0 else "",
                observation=f"[button] OK ({source} {i})",
                screenshot_uri=uri,
                screenshot_sha256=hashlib.sha256(data).hexdigest(),
                t_start=float(k),
                t_end=k + 0.5,
                proposals=(Proposal("the model thinks", "click(point='<point>30 30</point>')", "policy-r0", 0.4),)
                if interactive
                else None,
                decision=("overridden" if overridden else "accepted") if interactive else None,
                decided_by=annot if interactive else None,
            )
        )
    return Episode(
        session_id=f"sess-{source}-{round}-{i // 2}",
        source=source,
        task_id=f"task-{i % 4}",
        task_family=("office", "browser")[i % 2],
        instruction=f"Open the {source} report {i} & export it (round {round})",
        steps=tuple(steps),
        round=round,
        screen_width=64,
        screen_height=40,
        annotator=annot,
        group="model" if source == "rollout" else ("expert", "novice")[i % 2],
        policy_version=f"policy-r{round - 1}",
        reference_answer="done" if source == "rollout" else None,
        final_answer="done",
        outcome="finished",
        meta={"truth": i % 5 != 4},
        ingested_at=T0 + timedelta(days=round, seconds=i),
    )


def passes(i: int) -> bool:
    return i % 3 != 2


def populate(
    lake: Lake, rounds: tuple[int, ...] = (1, 2, 3), per_source: int = 6, audits: bool = True
) -> dict[str, Any]:
    """Fill every table; return the expected numbers the tests check against."""
    eps: list[Episode] = []
    for r in rounds:
        for src in SOURCES:
            eps += [make_episode(lake, r, src, i) for i in range(per_source)]
    lake.append("episodes", episodes_to_table(eps))
    sft_rows, ct_rows, verdicts, pairs = [], [], [], []
    for e in eps:
        i = int(e.instruction.split(" report ")[1].split(" ")[0])
        ok = passes(i)
        row = e.to_row()
        row["round_routed"] = e.round
        for name, ver in VALIDATORS:
            v_ok = ok or name == "structural"
            verdicts.append(
                {
                    "episode_id": e.episode_id, "round": e.round, "validator": name, "version": ver, "passed": v_ok,
                    "reason": "ok" if v_ok else "env_failed", "score": 1.0 if v_ok else 0.0,
                    "validated_at": T0 + timedelta(days=e.round),
                }
            )  # fmt: skip
        if ok:
            sft_rows.append(row)
        else:
            ct_rows.append({**row, "reasons": ["outcome:env_failed"]})
        for s in e.steps:
            if s.decision == "overridden":
                pairs.append(
                    {
                        "pair_id": content_id(e.episode_id, str(s.index)), "episode_id": e.episode_id,
                        "step_index": s.index, "round": e.round, "instruction": e.instruction,
                        "prompt": f"Instruction: {e.instruction}\nObservation:\n{s.observation}\n",
                        "chosen": f"Thought: {s.thought}\nAction: {s.action}",
                        "rejected": f"Thought: {s.proposals[0].thought}\nAction: {s.proposals[0].action}",
                        "model_version": "policy-r0", "annotator": e.annotator,
                    }
                )  # fmt: skip
    import pyarrow as pa

    lake.append("verdicts", verdicts)
    lake.append("sft", pa.Table.from_pylist(sft_rows, schema=SFT))
    lake.append("ct", pa.Table.from_pylist(ct_rows, schema=CT))
    lake.append("preference_pairs", pairs)
    sessions = []
    for r in rounds:
        for k in range(3):
            sessions.append(
                {
                    "session_id": f"ta-{r}-{k}", "source": "think_aloud", "annotator": ANNOTATORS[k % 2],
                    "group": ("expert", "novice")[k % 2], "status": "landed", "landed_uri": f"/landing/ta-{r}-{k}.zip",
                    "content_sha256": f"{r}{k}" * 8, "round": r, "n_episodes": 1, "n_actions": 5 + k, "duration_s": 30.0 + k,
                    "thought_share": 0.5 + 0.1 * k, "asr_confidence": 0.8, "problems": [] if k else ["no_audio"],
                    "ingested_at": T0 + timedelta(days=r, minutes=k),
                }
            )  # fmt: skip
    lake.append("sessions", sessions)
    lake.append(
        "quarantine",
        [
            {"quarantine_id": "q1", "source": "think_aloud", "landed_uri": "/landing/broken-abc.zip", "error_type": "audio_undecodable",
             "error": "cannot decode audio", "round": 1, "quarantined_at": T0},
            {"quarantine_id": "q2", "source": "think_aloud", "landed_uri": "/landing/ta-1-1.zip", "locator": "line 3",
             "error_type": "event_bad_field", "error": "x missing", "round": 1, "quarantined_at": T0},
        ],
    )  # fmt: skip
    n_by_round = {r: (sum(1 for e in eps if e.round == r)) for r in rounds}
    n_pass = {
        r: sum(1 for e in eps if e.round == r and passes(int(e.instruction.split(" report ")[1].split(" ")[0])))
        for r in rounds
    }
    lake.upsert(
        "rounds",
        [
            {"round": r, "n_new": n_by_round[r], "n_pass": n_pass[r], "n_fail": n_by_round[r] - n_pass[r],
             "pass_rate": n_pass[r] / n_by_round[r], "policy_version": f"policy-r{r}", "stage_status": json.dumps({}),
             "updated_at": T0 + timedelta(days=r)}
            for r in rounds
        ],
    )  # fmt: skip
    lake.append(
        "training_runs",
        [
            {"run_id": f"run-{r}", "round": r, "stage": "sft", "pile_version": 1, "samples": 10, "started_at": T0}
            for r in rounds
        ],
    )
    lake.append("dq_results", [{"result_id": f"dq-{r}", "round": r, "batch_id": f"b{r}", "suite": "episodes", "success": True,
                                "validated_at": T0} for r in rounds])  # fmt: skip
    sft_ids = [r["episode_id"] for r in sft_rows if r["round"] == rounds[0]] if audits else []
    lake.append(
        "audits",
        [
            {"audit_id": f"a{k}", "round": rounds[0], "episode_id": eid, "seed": 1, "auditor": "auditor-1",
             "verdict": "good" if k % 4 else "bad", "recorded_at": T0 + timedelta(days=10)}
            for k, eid in enumerate(sft_ids)
        ],
    )  # fmt: skip
    return {
        "episodes": eps,
        "n_pass": n_pass,
        "n_routed": n_by_round,
        "n_sft": len(sft_rows),
        "n_ct": len(ct_rows),
        "n_pairs": len(pairs),
        "n_steps": sum(len(e.steps) for e in eps),
    }
