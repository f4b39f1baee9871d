"""Merging specialists by parameter interpolation: theta = sum_k alpha_k theta_k (UI-TARS-2, section 2.6).

Why: specialists practised apart (one world or task group each), all grown from one checkpoint, can be combined
without more training. Interpolation is only meaningful between models that share that origin and every parameter's
name and shape, so both are checked and refused in one line; the alphas are a convex combination. With alphas
(1, 0, ...) the result is the first specialist bit for bit (1*x + 0*y is exactly x in IEEE arithmetic for finite
values), which the tests hold it to.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from training.model import Policy

ALPHA_TOL = 1e-6


class MergeError(ValueError):
    """Specialists that cannot be merged, or alphas that are not a convex combination."""


@dataclass(frozen=True)
class Specialist:
    name: str
    checkpoint: str  # the checkpoint's URI in the lake
    alpha: float


def check_alphas(alphas: Mapping[str, float]) -> None:
    if not alphas:
        raise MergeError("no specialists to merge")
    bad = {k: a for k, a in alphas.items() if not (a >= 0.0) or a != a}
    if bad:
        raise MergeError(f"alphas must be >= 0: {', '.join(f'{k}={a}' for k, a in bad.items())}")
    total = sum(alphas.values())
    if abs(total - 1.0) > ALPHA_TOL:
        raise MergeError(f"alphas must sum to 1, not {total:g} ({', '.join(f'{k}={a:g}' for k, a in alphas.items())})")


def _state(policy: Policy) -> dict[str, torch.Tensor]:
    s = {f"model.{k}": v for k, v in policy.model.state_dict().items()}
    s |= {f"value_head.{k}": v for k, v in policy.value_head.state_dict().items()}
    return s


def merge_policies(policies: Mapping[str, Policy], alphas: Mapping[str, float]) -> Policy:
    """The interpolated policy (a new object; the inputs are not changed). Names, shapes and vocabularies must match."""
    check_alphas(alphas)
    if set(policies) != set(alphas):
        raise MergeError(f"alphas given for {sorted(alphas)} but specialists are {sorted(policies)}")
    names = list(policies)
    states = {n: _state(policies[n]) for n in names}
    first = names[0]
    vocab = policies[first].tokenizer.get_vocab()
    for n in names[1:]:
        a, b = states[first], states[n]
        if a.keys() != b.keys():
            diff = sorted(set(a) ^ set(b))[:3]
            raise MergeError(
                f"{n} and {first} have different parameters ({', '.join(diff)}, ...): not one architecture"
            )
        shape = next((k for k in a if a[k].shape != b[k].shape), None)
        if shape is not None:
            raise MergeError(
                f"{n} and {first} differ in the shape of {shape}: {tuple(b[shape].shape)} vs {tuple(a[shape].shape)}"
            )
        if policies[n].tokenizer.get_vocab() != vocab:
            raise MergeError(f"{n} and {first} have different tokenizers")
    merged: dict[str, torch.Tensor] = {}
    for k, v in states[first].items():
        if not torch.is_floating_point(v):  # integer buffers (none in a Llama; kept from the first if any)
            merged[k] = v.clone()
            continue
        acc = torch.zeros_like(v, dtype=torch.float32)
        for n in names:
            acc += float(alphas[n]) * states[n][k].to(torch.float32)
        merged[k] = acc.to(v.dtype)
    import copy

    out = copy.deepcopy(policies[first])
    out.model.load_state_dict({k[len("model.") :]: t for k, t in merged.items() if k.startswith("model.")})
    out.value_head.load_state_dict(
        {k[len("value_head.") :]: t for k, t in merged.items() if k.startswith("value_head.")}
    )
    return replace(out, version="merged", uri=None)


def lineage(lake: Any, checkpoint: str) -> list[str]:
    """The checkpoints `checkpoint` grew from, nearest first, by the training_runs rows that produced them."""
    from training.checkpoints import checkpoint_key as key

    runs = lake.read("training_runs", ["output_checkpoint", "base_checkpoint"]).to_pylist()
    parent = {key(r["output_checkpoint"]): key(r["base_checkpoint"]) for r in runs if r["output_checkpoint"]}
    chain, seen = [], {key(checkpoint)}
    at = parent.get(key(checkpoint))
    while at and at not in seen:
        chain.append(at)
        seen.add(at)
        at = parent.get(at)
    return chain


def merge_job(
    lake: Any, base: str, specialists: list[Specialist], round: int = 0, metrics: dict[str, Any] | None = None
) -> Any:
    """Merge checkpoints of `lake` that all grew from `base` (by their recorded lineage), publish the result and
    record it in training_runs (stage `merge`, base = `base`, the specialists and alphas in its config)."""
    from training.checkpoints import checkpoint_key, fetch
    from training.jobs import finish
    from training.runs import JobResult

    t0 = time.perf_counter()
    base = checkpoint_key(base)  # a key, or an old row's / the user's absolute URI of the lake: compared as keys
    specialists = [replace(s, checkpoint=checkpoint_key(s.checkpoint)) for s in specialists]
    alphas = {s.name: s.alpha for s in specialists}
    if len(alphas) != len(specialists):
        raise MergeError("each specialist needs its own name")
    check_alphas(alphas)
    for s in specialists:
        if s.checkpoint != base and base not in lineage(lake, s.checkpoint):
            raise MergeError(f"specialist {s.name} ({s.checkpoint}) did not grow from {base} by the recorded "
                             "training runs: only specialists of one common checkpoint can be merged")  # fmt: skip
    merged = merge_policies({s.name: fetch(lake, s.checkpoint) for s in specialists}, alphas)
    res = JobResult("merge", round, base, metrics=dict(metrics or {}), config={"merge": {"specialists": {s.name: s.checkpoint for s in specialists},
                                                            "alphas": alphas}})  # fmt: skip
    return finish(lake, res, merged, t0), merged


#: The sweep's grid of the first specialist's weight (the second gets 1 - alpha).
GRID = (0.0, 0.25, 0.5, 0.75, 1.0)
#: What the sweep keeps: the alpha whose worst world scores highest, or whose mean over the worlds does.
OBJECTIVES = {"worst": "worst world", "mean": "mean over worlds"}


@dataclass(frozen=True)
class SweepPoint:
    alpha: float  # the first specialist's weight
    rates: dict[str, Any]  # world -> training.evaluate.Rate on that world's held-out tasks

    def worst(self) -> float:
        return min(r.rate for r in self.rates.values())

    def mean(self) -> float:
        return sum(r.rate for r in self.rates.values()) / len(self.rates)


def sweep(
    lake: Any,
    base: str,
    first: tuple[str, str],
    second: tuple[str, str],
    worlds: Mapping[str, Any],
    eval_cfg: Any,
    prompt_cfg: Any,
    grid: tuple[float, ...] = GRID,
    round: int = 0,
    on_point: Any = None,
    objective: str = "worst",
) -> tuple[list[SweepPoint], dict[str, Any], Any]:
    """Evaluate theta(alpha) = alpha theta_first + (1 - alpha) theta_second on each world's held-out tasks
    (`worlds`: name -> TaskInfo list) for every alpha of `grid`, and the base beside them; keep the alpha that scores
    highest by `objective` (OBJECTIVES: the worst world's score, by default, or the mean; ties: the other one, then
    the alpha nearer 0.5), publish that merge and record it with the whole curve in its training_runs row
    (metrics.sweep). Returns (points, the base's rates, the job result)."""
    from training.checkpoints import fetch
    from training.evaluate import evaluate

    if objective not in OBJECTIVES:
        raise MergeError(f"objective must be one of {', '.join(OBJECTIVES)}, not {objective!r}")

    (na, ca), (nb, cb) = first, second
    pa, pb = fetch(lake, ca), fetch(lake, cb)

    def rates(policy: Policy) -> dict[str, Any]:
        return {w: evaluate(policy, tasks, eval_cfg, prompt_cfg).overall for w, tasks in worlds.items()}

    base_rates = rates(fetch(lake, base))
    points = []
    for a in grid:
        p = SweepPoint(a, rates(merge_policies({na: pa, nb: pb}, {na: a, nb: 1.0 - a})))
        points.append(p)
        if on_point:
            on_point(p)

    def score(p: SweepPoint) -> tuple[float, float, float]:
        a, b = (p.worst(), p.mean()) if objective == "worst" else (p.mean(), p.worst())
        return a, b, -abs(p.alpha - 0.5)

    best = max(points, key=score)
    from dataclasses import asdict

    curve = {"objective": OBJECTIVES[objective], "first": na, "second": nb, "kept_alpha": best.alpha,
             "base": {w: asdict(r) for w, r in base_rates.items()},
             "points": [{"alpha": p.alpha, "rates": {w: asdict(r) for w, r in p.rates.items()}} for p in points]}  # fmt: skip
    res, _ = merge_job(lake, base, [Specialist(na, ca, best.alpha), Specialist(nb, cb, 1.0 - best.alpha)], round,
                       metrics={"sweep": curve})  # fmt: skip
    return points, base_rates, res
