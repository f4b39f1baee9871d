"""Preference pairs from interactive annotation: each override says "in this state, this step, not that one".

One pair per (overridden step, rejected proposal): prompt = the state the model saw (instruction, the executed
history, the current observation), chosen = the annotator's thought and action, rejected = the model's
proposal. Prompt and answers are rendered with training.prompt, the same functions the trainer uses, so a DPO
job can take the rows as they are. Rows go to the `preference_pairs` table (key pair_id, a content hash).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from schemas.records import Episode
from schemas.tables import PREFERENCE_PAIRS
from storage.lake import content_id


def preference_pairs(episode: Episode) -> list[dict[str, Any]]:
    """PREFERENCE_PAIRS rows for every overridden step of one episode (none for accepted steps)."""
    from schemas.prompt import Turn, render_answer, render_prompt

    rows: list[dict[str, Any]] = []
    history: list[Turn] = []
    for s in episode.steps:
        if s.decision == "overridden" and s.proposals:
            prompt = render_prompt(episode.instruction, history, s.observation)
            chosen = render_answer(s.thought, s.action)
            for p in s.proposals:
                rejected = render_answer(p.thought, p.action)
                if rejected == chosen:  # the annotator re-typed the proposal: no preference expressed
                    continue
                rows.append(
                    {
                        "pair_id": content_id(episode.episode_id, str(s.index), rejected),
                        "episode_id": episode.episode_id,
                        "step_index": s.index,
                        "round": episode.round,
                        "instruction": episode.instruction,
                        "prompt": prompt,
                        "chosen": chosen,
                        "rejected": rejected,
                        "model_version": p.model_version,
                        "annotator": episode.annotator,
                    }
                )
        history.append(Turn(s.observation, s.thought, s.action))
    return rows


def pairs_table(episodes: Iterable[Episode]) -> pa.Table:
    return pa.Table.from_pylist([r for e in episodes for r in preference_pairs(e)], schema=PREFERENCE_PAIRS)
