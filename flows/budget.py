"""Fitting the demo into a wall-time budget on the machine it runs on.

The shipped sizes were measured in a reference run (`REF_*`, docs/training.md). Two steps:
- At the start, `calibrate` times a few real SFT steps of the configured model (in the precision training will
  use) and `project` prints what the full-size run would take here. Nothing is scaled yet: round 0 runs at full
  size, so that it is itself a measurement of this machine.
- After round 0, `refit` compares round 0's recorded stage seconds with the reference's (SFT apart from the rest:
  the first is matrix work, the second generation and environments, and machines differ in each), projects the
  later rounds from the reference's, and if they would not fit what is left of the budget, scales what can be
  scaled without touching what is measured: the later rounds' SFT passes and step cap. The held-out set, the
  annotation and sampling sizes stay, so rounds remain comparable across machines. Every example's passes are cut
  alike: taking the time from the replay of earlier rounds' examples first cost more (docs/training.md). The decision is printed and
  recorded in round 1's breakdown (`budget`); a re-run of the demo reuses it.
- After each later round but the last, `correct` sizes the rounds still to come from that round's own measured
  seconds (its SFT seconds per step, everything else as it was) and the SFT pile's growth, at the same SFT scale
  for all of them. Why: round 0's SFT time varies by up to 17% between runs of one machine, and the later rounds'
  SFT was sized from it alone (a run whose round 0 was fast got scale 0.35, a projection of 19.5 min and took 20.6).
- With practice by search (`rl_mode="search"`), when the SFT floor does not fit either, the rest is given in the
  order of what each part added per second in the demo runs (`give_back`): the last round's search first (down to
  `SEARCH_FLOOR` of its seconds), then the later rounds' SFT below its floor (down to `SFT_FLOOR`), then the earlier
  rounds' searches, the latest first. Why: on slower spells of the host the stages other than SFT alone took 4.8-5.1
  min a round, and three demos in a row at the SFT floor ran 6-41 s over 20 minutes with nothing left to give.
Why not decide from the calibration alone: a 10-step timing on a shared 2-core machine varies by 5-10%, and a
decision taken on it alone missed a 20-minute budget by a minute; round 0 is 2-3 minutes of the real work.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

from flows.config import RoundConfig

#: The reference run of the shipped sizes (`make demo`, 2 idle cores, AMD EPYC, fp32 picked by auto, 2026-12-01):
#: `calibrate`'s seconds per SFT step there; round 0's seconds (the cold start's SFT; intake + route + evaluate);
#: the minutes from round 0's end to the end of the 3-round demo, and the later rounds' SFT minutes within them.
REF_STEP_S = 0.22
REF_R0_SFT_S = 88.4
REF_R0_OTHER_S = 46.9
REF_START_MIN = 0.4  # process start, calibration and the cold start's files, before round 0's first stage
REF_LATER_MINUTES = 21.1
REF_LATER_SFT_MINUTES = 13.2
REF_ROUNDS = 3
REF_MINUTES = REF_START_MIN + (REF_R0_SFT_S + REF_R0_OTHER_S) / 60 + REF_LATER_MINUTES  # 23.7
MIN_SCALE = 0.25  # below this the rounds would not learn enough to show anything
#: The share of a round's search seconds that is never cut, and the SFT scale that the searches' rounds go down to
#: before an earlier round's search is cut. What each part added to held-out in the demo runs of 2026-12-05/06:
#: round 1's search (150 s) +9.6 to +15.0 points; round 2's +6.1 to +14.6 at 150 s and +0.0 at 95 s (run a);
#: round 3's +2.1, -1.8, +3.9, +2.9, -1.1 (150 s) and +3.6 (78 s); the later rounds' SFT at the 25% floor (50-90 s)
#: -1.4 to +1.5 in round 2 and 0.0 to +4.3 in round 3.
SEARCH_FLOOR = 0.5
SFT_FLOOR = 0.1
#: The later rounds are fitted to this share of the budget: run-to-run noise of a few percent must not tip it over.
MARGIN = 0.975


def project(step_s: float, rounds: int) -> float:
    """Minutes the full-size demo of `rounds` rounds would take on a machine whose calibrated SFT step is `step_s`
    (everything scaled by the one ratio: a first estimate, printed; `refit` decides)."""
    later = rounds / REF_ROUNDS
    return (REF_MINUTES - REF_LATER_MINUTES * (1 - later)) * step_s / REF_STEP_S


@dataclass(frozen=True)
class Refit:
    sft_ratio: float  # round 0's SFT seconds here / the reference's
    other_ratio: float  # round 0's other stages here / the reference's
    elapsed_min: float
    budget_min: float
    estimate_min: float  # the whole run at full size
    scale: float  # applied to the later rounds' SFT passes and step cap (1: unchanged)
    fitted_min: float
    search_s: float | None = None  # the next round's search seconds (None: not practice by search)
    search_full_s: float | None = None  # the configured ones
    search_cut_s: float = 0.0  # taken from the searches of all the rounds to come (the last round's first)

    def why(self) -> str:
        base = (f"round 0 took {self.sft_ratio:.2f}x the reference's SFT time and {self.other_ratio:.2f}x its other "
                f"stages; at full size the run would take about {self.estimate_min:.1f} min for a "
                f"{self.budget_min:g}-minute budget")  # fmt: skip
        if self.scale >= 1:
            return base + ": full sizes"
        return (
            base
            + f": the later rounds' SFT passes and step cap scaled to {100 * self.scale:.0f}%"
            + _search_why(self.search_s, self.search_full_s, self.search_cut_s)
            + f" (about {self.fitted_min:.1f} min)"
        )

    def as_dict(self) -> dict[str, Any]:
        return _as_dict(self)


def _as_dict(d: Any) -> dict[str, Any]:
    """A decision's fields for the round's breakdown: the scale and the search seconds exact (a re-run reuses them)."""
    exact = ("scale", "search_s", "search_full_s", "search_cut_s")
    return {
        k: v if k in exact or v is None else list(v) if isinstance(v, tuple) else round(v, 3)
        for k, v in d.__dict__.items()
    }


def _search_why(search_s: float | None, full_s: float | None, cut_s: float) -> str:
    if search_s is None or full_s is None or cut_s <= 0:
        return ""
    return (f", and the searches to come {cut_s:.0f} s shorter in all, the last round's first "
            f"(the next round's: {search_s:.0f} of {full_s:.0f} s)")  # fmt: skip


def rl_rounds(cfg: RoundConfig, first: int, count: int) -> int:
    """How many of the rounds `first`..`first + count - 1` have an RL stage."""
    from training.pipeline import train_steps

    return sum(any(s.stage == "rl" for s in train_steps(r, cfg.flywheel)) for r in range(first, first + count))


def give_back(
    excess_s: float, scale: float, sft_full_s: float, full_s: float, searches: int
) -> tuple[float, float, float]:
    """(the SFT scale, the next round's search seconds, the seconds cut from the searches in all) when the rounds to
    come are `excess_s` seconds over with their SFT at `scale` (`sft_full_s`: its seconds at full size) and `searches`
    searches of `full_s` seconds to come. In this order: the last round's search, down to SEARCH_FLOOR of its
    seconds; the SFT scale, down to SFT_FLOOR; the earlier rounds' searches, the latest first (the next round's last)."""
    if excess_s <= 0 or searches <= 0:
        return scale, full_s, 0.0
    room = full_s * (1 - SEARCH_FLOOR)
    last = min(excess_s, room)
    left = excess_s - last
    new_scale = max(min(scale, SFT_FLOOR), scale - left / sft_full_s) if sft_full_s > 0 else scale
    left -= (scale - new_scale) * sft_full_s
    earlier = min(max(0.0, left), (searches - 1) * room)
    nxt = last if searches == 1 else max(0.0, earlier - (searches - 2) * room)
    return new_scale, round(full_s - nxt, 1), round(last + earlier, 1)


def _beyond_the_floor(
    over_s: float, scale: float, sft_full_s: float, full_s: float, searches: int
) -> tuple[float, float | None, float | None, float]:
    """`give_back` when the SFT scale is at its floor and the rounds to come are `over_s` over, as the decision
    records it: (scale, the next round's search seconds, the configured ones, the cut), the search's None without
    searches to come."""
    if not searches:
        return scale, None, None, 0.0
    scale, nxt, cut = give_back(over_s if scale < 1 else 0.0, scale, sft_full_s, full_s, searches)
    return scale, nxt, full_s, cut


def calibrate(cfg: RoundConfig, steps: int = 5, seq: int = 256, agent: int = 30) -> tuple[float, dict[str, Any]]:
    """Seconds per SFT step of the configured model on this machine, and the precision it ran in: full optimizer
    steps on a throwaway copy, with the loss the demo's SFT uses (`masked_nll`) on a random batch of the demo's
    shape (length-bucketed examples of about `seq` tokens, the last `agent` of each the agent's)."""
    import copy

    import torch

    from training.compiled import active, compiled
    from training.config import OptimConfig
    from training.data import Batch, masked_nll
    from training.loop import make_optimizer
    from training.model import Policy
    from training.precision import choose

    m = cfg.flywheel.model
    if m.pretrained:
        model = copy.deepcopy(Policy.load(m.pretrained).model)
    else:
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(vocab_size=m.vocab_size, hidden_size=m.hidden_size,
                                             intermediate_size=m.intermediate_size, num_hidden_layers=m.num_hidden_layers,
                                             num_attention_heads=m.num_attention_heads))  # fmt: skip
    sft = cfg.flywheel.sft
    precision = choose(sft.optim.bf16, model, sft.batch_size)
    opt = make_optimizer(model.parameters(), OptimConfig())
    gen = torch.Generator().manual_seed(1)

    def batch_of(length: int) -> Batch:
        ids = torch.randint(0, int(model.config.vocab_size), (sft.batch_size, length), generator=gen)
        mask = torch.zeros(ids.shape)
        mask[:, -agent:] = 1.0
        return Batch(ids, torch.ones_like(ids), mask)

    model.train()

    def step(batch: Batch) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision.bf16):
            loss = masked_nll(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    batch = batch_of(seq)
    with compiled(model, sft.optim.compile):  # as the SFT jobs train
        # The warm-up steps pay this process's compile, for both graphs the jobs' batches need: inductor's kernels
        # for batches of up to 4,096 tokens do not serve longer ones (a second compile, 17 s on 2 cores when nothing
        # is cached), and the demo's batches are 96-512 tokens long.
        step(batch_of(2 * seq))
        step(batch)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(batch)
    step_s = (time.perf_counter() - t0) / steps
    return step_s, precision.as_dict() | {"compiled": active(sft.optim.compile)}


def scaled(cfg: RoundConfig, scale: float, search_s: float | None = None) -> RoundConfig:
    """`cfg` with the rounds' SFT passes and step caps times `scale` (the cold start's SFT is left as it is: round 0
    has run at full size, it was the measurement), and the search's seconds `search_s` when given."""
    f = cfg.flywheel
    if search_s is not None and search_s != f.search.time_budget_s:
        f = replace(f, search=replace(f.search, time_budget_s=search_s))
        cfg = replace(cfg, flywheel=f)
    if scale >= 1:
        return cfg
    sft = replace(f.sft, epochs=f.sft.epochs * scale if f.sft.epochs else None,
                  max_steps=max(1, math.ceil(f.sft.max_steps * scale)), steps=max(1, math.ceil(f.sft.steps * scale)))  # fmt: skip
    return replace(cfg, flywheel=replace(f, sft=sft))


def refit(
    cfg: RoundConfig, budget_min: float, elapsed_min: float, r0_stages: dict[str, dict[str, Any]], rounds_left: int
) -> tuple[RoundConfig, Refit]:
    """The configuration of the later rounds that fits what is left of `budget_min`, from round 0's recorded stage
    seconds (`r0_stages`, at full size) and the minutes already spent."""
    sec = {k: float(v.get("seconds") or 0.0) for k, v in r0_stages.items()}
    sft_ratio = sec.get("sft", 0.0) / REF_R0_SFT_S or 1.0
    other_ratio = sum(v for k, v in sec.items() if k != "sft") / REF_R0_OTHER_S or 1.0
    later = rounds_left / REF_ROUNDS
    sft_min = REF_LATER_SFT_MINUTES * later * sft_ratio
    other_min = (REF_LATER_MINUTES - REF_LATER_SFT_MINUTES) * later * other_ratio
    rl = rl_rounds(cfg, 1, rounds_left)
    if cfg.rl_effect:  # the reference run had no second evaluation (of the RL stage's base) in its RL rounds
        other_min += rl * sec.get("evaluate", 0.0) / 60
    full_s = cfg.flywheel.search.time_budget_s
    searches = rl if cfg.rl_mode == "search" else 0
    other_min += searches * full_s / 60  # the reference's RL stage was one PPO iteration (~15 s); search is a clock
    estimate = elapsed_min + sft_min + other_min
    left = budget_min * MARGIN - elapsed_min
    scale = (
        1.0 if estimate <= budget_min else min(1.0, max(MIN_SCALE, (left - other_min) / sft_min if sft_min else 1.0))
    )
    over_s = (elapsed_min + other_min + sft_min * scale - budget_min * MARGIN) * 60
    scale, *search = _beyond_the_floor(over_s, scale, sft_min * 60, full_s, searches)
    fitted = elapsed_min + other_min + sft_min * scale - search[2] / 60
    return scaled(cfg, scale, search[0]), Refit(
        sft_ratio, other_ratio, elapsed_min, budget_min, estimate, scale, fitted, *search
    )


#: A later round's stages other than SFT took 3-5% longer than the round before (annotation and evaluation of a
#: better model run longer episodes; demo runs p and q, docs/training.md).
OTHER_GROWTH = 1.05
#: A later round's SFT step took 7% longer than the round before's, on average over ten pairs of rounds (demo runs y,
#: z, z2, a and b, 2026-12-06: 0.95-1.21x; the pile's newer episodes are longer). Run b's last round, sized from
#: the round before's step, took 18 s more SFT than projected and the run 20.0 minutes where 19.5 were fitted.
SFT_GROWTH = 1.07


@dataclass(frozen=True)
class Correction:
    after_round: int
    elapsed_min: float
    budget_min: float
    sft_s_per_step: float  # the round's SFT seconds (the whole stage) per step
    other_s: float  # the round's other stages, seconds
    piles: tuple[int, ...]  # SFT pile examples of the rounds so far
    scale: float  # the SFT scale of the rounds still to come
    fitted_min: float
    search_s: float | None = None  # the next round's search seconds (None: not practice by search)
    search_full_s: float | None = None  # the configured ones
    search_cut_s: float = 0.0  # taken from the searches of all the rounds to come (the last round's first)

    def why(self) -> str:
        return (f"round {self.after_round} took {self.other_s / 60:.1f} min besides its SFT and {self.sft_s_per_step:.3f} s "
                f"an SFT step; {self.elapsed_min:.1f} of {self.budget_min:g} min spent: the later rounds' SFT at "
                f"{100 * self.scale:.0f}%{_search_why(self.search_s, self.search_full_s, self.search_cut_s)} "
                f"(about {self.fitted_min:.1f} min in all)")  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return _as_dict(self)


def correct(
    cfg: RoundConfig,
    budget_min: float,
    elapsed_min: float,
    after_round: int,
    stages: dict[str, dict[str, Any]],
    sft_steps: int,
    piles: list[int],
    rounds_left: int,
    searched_s: float | None = None,
) -> tuple[RoundConfig, Correction]:
    """The configuration of the `rounds_left` rounds after `after_round`, fitted to what is left of `budget_min` from
    that round's measured stage seconds, its SFT steps and the SFT piles so far (examples, oldest first). `cfg` is the
    unscaled configuration; the piles are projected to grow by their last growth each round, and an SFT step by
    SFT_GROWTH. `searched_s`: the search seconds that round ran with, when its search was cut (the rounds to come
    are projected at full seconds)."""
    sec = {k: float(v.get("seconds") or 0.0) for k, v in stages.items()}
    per_step = sec.get("sft", 0.0) / max(1, sft_steps)
    measured = sum(v for k, v in sec.items() if k != "sft")
    other = measured * OTHER_GROWTH
    full_s = cfg.flywheel.search.time_budget_s
    searches = rl_rounds(cfg, after_round + 1, rounds_left) if cfg.rl_mode == "search" else 0
    if searches and "rl" in sec:  # the search runs on its clock: it does not grow, and a cut one is projected uncut
        other = (measured - sec["rl"]) * OTHER_GROWTH + sec["rl"] + full_s - (searched_s or full_s)
    grow = piles[-1] - piles[-2] if len(piles) > 1 else 0
    sft = cfg.flywheel.sft
    # the rounds to come's SFT seconds at full size
    sft_s = per_step * sum(sft.steps_for(piles[-1] + k * grow) * SFT_GROWTH**k for k in range(1, rounds_left + 1))
    left = (budget_min * MARGIN - elapsed_min) * 60 - rounds_left * other
    scale = min(1.0, max(MIN_SCALE, left / sft_s)) if sft_s > 0 else 1.0
    over_s = (elapsed_min - budget_min * MARGIN) * 60 + rounds_left * other + scale * sft_s
    scale, *search = _beyond_the_floor(over_s, scale, sft_s, full_s, searches)
    fitted = elapsed_min + (rounds_left * other + scale * sft_s - search[2]) / 60
    return scaled(cfg, scale, search[0]), Correction(
        after_round, elapsed_min, budget_min, per_step, measured, tuple(piles), scale, fitted, *search
    )


def sft_stop_at(end_by: float, cfg: RoundConfig, after: list[str], prev: dict[str, dict[str, Any]],
                prev_search_s: float | None = None) -> tuple[float, float]:  # fmt: skip
    """(the time.time() by which a round's SFT stops, the seconds kept for what follows it) for the round to end by
    `end_by`: each stage `after` the SFT is given what it took in the round before (`prev`: its recorded stages),
    OTHER_GROWTH more, and a search its own clock (`cfg`'s seconds, where the round before ran `prev_search_s`).
    Why: the SFT's step-capped size is projected from the round before's steps, which a last round missed by up to
    24% (demo run l: 0.214 s a step where 0.185 were projected, 20.1 minutes in all), while what follows the SFT is
    a clock and two held-out evaluations, which repeat within seconds."""
    sec = {k: float(v.get("seconds") or 0.0) for k, v in prev.items() if k in after}
    clock = 0.0
    if "rl" in sec and cfg.rl_mode == "search":  # the search's own seconds do not grow; its set-up does
        was = prev_search_s or cfg.flywheel.search.time_budget_s
        sec["rl"] = max(0.0, sec["rl"] - was)
        clock = cfg.flywheel.search.time_budget_s
    keep = sum(sec.values()) * OTHER_GROWTH + clock
    return end_by - keep, keep
