"""Piles -> training examples -> padded batches, and the per-token log-probabilities every job's loss is built on.

A pile is read at a recorded Delta version (the version goes on the training_runs row), each step of each episode
becomes one (prompt, answer) example, and batches are right-padded with a loss mask.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import torch
import torch.nn.functional as F

from schemas.prompt import PromptConfig
from training.attention import TRAIN_ATTENTION, attention
from training.compiled import run_decoder
from training.prompt import Encoded, Turn, encode_examples, render_answer, render_prompt

#: Columns a training job needs from a pile, and the step fields of `steps` it reads (episode_examples).
PILE_COLUMNS = ["episode_id", "task_id", "task_family", "difficulty", "instruction", "steps"]
PILE_STEP_FIELDS = ["observation", "thought", "action"]


@dataclass(frozen=True)
class PileSnapshot:
    """A pile as read at one Delta version."""

    table: str
    version: int
    rows: pa.Table


def read_pile(lake, table: str, version: int | None = None, screenshots: bool = False) -> PileSnapshot:  # noqa: ANN001
    """Read pile `table` at `version` (the newest when None), joined to its episodes (storage.piles.read_pile), and
    remember which version that was. `screenshots` also reads each step's screenshot_uri (a VLM's examples)."""
    from storage.piles import read_pile as read_pile_rows

    v = lake.version(table) if version is None else version
    fields = PILE_STEP_FIELDS + ["screenshot_uri"] if screenshots else PILE_STEP_FIELDS
    return PileSnapshot(table, v, read_pile_rows(lake, table, PILE_COLUMNS, version=v, step_fields=fields))


def episode_states(row: dict) -> Iterator[tuple[str | None, list[Turn], str, str]]:
    """(observation, the turns before it, thought, action) for every step of one episode row."""
    history: list[Turn] = []
    for s in row["steps"] or []:
        action = (s.get("action") or "").strip()
        thought = s.get("thought") or ""
        yield s.get("observation"), list(history), thought, action
        history.append(Turn(s.get("observation"), thought, action))


def episode_examples(row: dict, cfg: PromptConfig = PromptConfig()) -> list[tuple[str, str]]:
    """(prompt, answer) for every step of one episode row, with the history the policy would have seen."""
    return [
        (
            render_prompt(row["instruction"], hist, obs, cfg),
            render_answer(thought, action, cfg, obs, row["instruction"]),
        )
        for obs, hist, thought, action in episode_states(row)
        if obs or not cfg.skip_without_observation
    ]


def pile_screens(rows: pa.Table) -> list[tuple[str, list[Turn]]]:
    """Every screen of a pile with the turns before it: what grounding rehearsal (SFTConfig.grounding) draws on."""
    return [(obs, hist) for e in rows.to_pylist() for obs, hist, _, _ in episode_states(e) if obs]


def pile_examples(
    rows: pa.Table, cfg: PromptConfig = PromptConfig(), max_per_task: int | None = None, seed: int = 0
) -> list[tuple[str, str]]:
    """Examples from every episode of a pile; at most `max_per_task` episodes per task id (random, seeded)."""
    return [ex for e in capped_episodes(rows, max_per_task, seed) for ex in episode_examples(e, cfg)]


def capped_episodes(rows: pa.Table, max_per_task: int | None = None, seed: int = 0) -> list[dict]:
    """A pile's episode rows, at most `max_per_task` per task id (random, seeded)."""
    episodes = rows.to_pylist()
    if max_per_task:
        rng = random.Random(seed)
        rng.shuffle(episodes)
        seen: dict[str, int] = {}
        kept = []
        for e in episodes:
            if seen.get(e["task_id"], 0) < max_per_task:
                seen[e["task_id"]] = seen.get(e["task_id"], 0) + 1
                kept.append(e)
        episodes = kept
    return episodes


def encode_all(tokenizer, examples: Sequence[tuple[str, str]], cfg: PromptConfig = PromptConfig()) -> list[Encoded]:  # noqa: ANN001
    return encode_examples(tokenizer, examples, cfg)


@dataclass(frozen=True)
class Batch:
    input_ids: torch.Tensor  # (B, T) right-padded
    attention_mask: torch.Tensor  # (B, T)
    loss_mask: torch.Tensor  # (B, T) 1 where the token is a training target
    images: tuple[bytes, ...] | None = None  # a VLM's batch: each row's screenshot (training/vision.py)

    @property
    def n_tokens(self) -> int:
        return int(self.attention_mask.sum())


#: A batch's length is rounded up to a multiple of this many tokens (as transformers' `pad_to_multiple_of`). Why:
#: with every batch a new length, each step's buffers had a new size, the heap fragmented and oneDNN planned every
#: shape afresh. 100 s of round 3's search practice (docs/training.md, "Peak memory"): exact lengths 462 learner
#: steps and 4.4 GiB held at the end; multiples of 16, 32, 64, 128: 494, 523, 443, 329 steps and 3.2, 2.9, 2.7, 2.7 GiB.
PAD_MULTIPLE = 32


def collate(items: Sequence[Encoded], pad_id: int, all_tokens: bool = False, multiple: int = PAD_MULTIPLE) -> Batch:
    """Right-pad to the longest item rounded up to `multiple`; the loss mask is the agent mask, or every real token
    when `all_tokens` (CT). The extra padding changes no loss: the batch is right-padded and attention is causal."""
    T = -(-max(len(e.input_ids) for e in items) // multiple) * multiple
    ids = torch.full((len(items), T), pad_id, dtype=torch.long)
    att = torch.zeros((len(items), T), dtype=torch.long)
    lm = torch.zeros((len(items), T), dtype=torch.float32)
    for i, e in enumerate(items):
        n = len(e.input_ids)
        ids[i, :n] = torch.tensor(e.input_ids)
        att[i, :n] = 1
        lm[i, :n] = 1.0 if all_tokens else torch.tensor(e.mask, dtype=torch.float32)
    images = tuple(e.image for e in items) if getattr(items[0], "image", None) else None  # type: ignore[attr-defined]
    return Batch(ids, att, lm, images)


#: Batches drawn together and sorted by length (`batches`): a window of this many batches' worth of examples.
BUCKET_WINDOW = 8


def batches(
    items: Sequence[Encoded],
    batch_size: int,
    steps: int,
    pad_id: int,
    seed: int = 0,
    all_tokens: bool = False,
) -> Iterator[Batch]:
    """`steps` batches over seeded shuffled epochs, bucketed by length to cut padding.

    Why: a batch is padded to its longest example, and a random batch of 16 from the demo's piles (238 tokens on
    average, 392 at most) was padded to 337, so 30% of every step's work was padding, and attention's share
    grows with the square of it. As HF's group-by-length sampler does, each window of `BUCKET_WINDOW` batches'
    worth of shuffled examples is sorted by length, cut into batches, and those batches come out in a random
    order: every example is still seen once per epoch, and a batch holds examples of about one length."""
    if not items:
        return
    rng = random.Random(seed)
    order: list[int] = []
    ready: list[list[int]] = []
    for _ in range(steps):
        if not ready:
            while len(order) < batch_size * BUCKET_WINDOW:
                fresh = list(range(len(items)))
                rng.shuffle(fresh)
                order += fresh
            window = sorted(order[: batch_size * BUCKET_WINDOW], key=lambda i: len(items[i].input_ids))
            order = order[batch_size * BUCKET_WINDOW :]
            ready = [window[k : k + batch_size] for k in range(0, len(window), batch_size)]
            rng.shuffle(ready)
        yield collate([items[i] for i in ready.pop()], pad_id, all_tokens)


def next_token_logprobs(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, output_hidden: bool = False):  # noqa: ANN001, ANN201
    """log p(x_t | x_<t) for t = 1..T-1 -> (B, T-1); with `output_hidden`, also the last hidden states (B, T, H)."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=output_hidden, use_cache=False)
    logits = out.logits[:, :-1].float()
    lp = -F.cross_entropy(logits.transpose(1, 2), input_ids[:, 1:], reduction="none")
    if output_hidden:
        return lp, out.hidden_states[-1], logits
    return lp


def trunk_hidden(model, ids: torch.Tensor, images: Sequence[bytes] | None = None) -> torch.Tensor:  # noqa: ANN001
    """The last hidden states (B, T, H) of right-padded `ids` before the LM head; a VLM (training/vlm.py) also
    reads each row's screenshot."""
    if images is not None:
        return model.hidden(ids, images)
    with attention(model, TRAIN_ATTENTION):
        return run_decoder(model, input_ids=ids, use_cache=False).last_hidden_state


def masked_nll(model, batch: Batch) -> torch.Tensor:  # noqa: ANN001
    """Mean negative log-likelihood over the tokens the loss mask selects (observation tokens are ignored).

    The vocabulary projection runs only at the selected positions: with ~10% of a step's tokens being the agent's,
    that skips most of the LM head's work (and all of it is wasted on positions the mask zeroes anyway).
    """
    # Batches are right-padded, so under the causal mask no real token ever attends to a pad: the padding mask
    # changes nothing the loss reads, and leaving it out keeps attention causal only (training/attention.py).
    hidden = trunk_hidden(model, batch.input_ids, batch.images)
    head = model.get_output_embeddings()
    m = batch.loss_mask[:, 1:] > 0
    logits = head(hidden[:, :-1][m]).float()
    return F.cross_entropy(logits, batch.input_ids[:, 1:][m]) if logits.shape[0] else hidden.sum() * 0.0
