"""What every built-in job shares: resolve the base policy, time the job, publish the checkpoint, record the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from training.checkpoints import fetch, publish, version_of
from training.model import Policy
from training.runs import JobResult, record_run


@dataclass
class Base:
    """The policy a job starts from, and the checkpoint URI it came from (None for a freshly built model)."""

    policy: Policy
    uri: str | None


def resolve_base(lake, base: str | Policy) -> Base:  # noqa: ANN001
    if isinstance(base, Policy):
        return Base(base, base.uri)
    return Base(fetch(lake, base), base)


def finish(lake, result: JobResult, policy: Policy, t0: float, publish_checkpoint: bool = True) -> JobResult:  # noqa: ANN001
    """Publish the trained policy to the object store and write the training_runs row."""
    if publish_checkpoint:
        uri = publish(lake, policy, {"stage": result.stage, "round": result.round})
        result.output_checkpoint = uri
        policy.version = version_of(uri)
        policy.uri = uri
    result.steps = result.steps or len(result.losses)
    result.wall_s = time.perf_counter() - t0
    record_run(lake, result)
    return result


ProgressFn = Callable[[int, float], None]


def vision_items(lake, policy: Policy, rows, prompt_cfg, max_per_task: int | None, seed: int) -> tuple[list, dict]:  # noqa: ANN001
    """A VLM's examples from pile rows read with their screenshots (training.vision.vision_examples over the lake's
    object store), at most `max_per_task` episodes per task; and their record (steps, without_screenshot, screens)."""
    from training.data import capped_episodes
    from training.vision import vision_examples

    episodes = capped_episodes(rows, max_per_task, seed)
    return vision_examples(policy.tokenizer, policy.model.vision, episodes, lake.objects.get_object, prompt_cfg)


def pile_job(
    lake,  # noqa: ANN001
    round: int,
    stage: str,
    base: str | Policy,
    cfg,  # noqa: ANN001 - CTConfig | SFTConfig (steps, batch_size, optim, seed)
    prompt_cfg,  # noqa: ANN001
    pile_version: int | None,
    on_step: ProgressFn | None,
    train: Callable,  # train(policy, items, cfg, on_step) -> (losses, tokens): train_ct or train_sft
    *,
    agent_only: bool,
    max_per_task: int | None = None,
    grounding: float = 0.0,
) -> tuple[JobResult, Policy]:
    """CT and SFT alike: read the pile (`ct` or `sft`) at a recorded Delta version, train, publish the checkpoint
    and write the training_runs row."""
    from training.config import to_dict
    from training.data import encode_all, pile_examples, pile_screens, read_pile

    t0 = time.perf_counter()
    b = resolve_base(lake, base)
    vision = vision_record = None
    if b.policy.kind == "vlm":  # examples over the steps' screenshots (training/vision.py)
        if grounding:
            raise ValueError(
                "grounding rehearsal clicks on text screens: set grounding = 0 for a vision-language policy"
            )
        pile = read_pile(lake, stage, pile_version, screenshots=True)
        vision = b.policy.model.vision
        items, vision_record = vision_items(lake, b.policy, pile.rows, prompt_cfg, max_per_task, cfg.seed + round)
        n_ground = 0
    else:
        pile = read_pile(lake, stage, pile_version)
        examples = pile_examples(pile.rows, prompt_cfg, max_per_task, cfg.seed + round)
        n_ground = int(grounding * len(examples))  # SFT's grounding rehearsal (SFTConfig.grounding)
        if n_ground:
            from training.base import grounding_examples

            examples += grounding_examples(pile_screens(pile.rows), n_ground, prompt_cfg, cfg.seed + round)
        items = encode_all(b.policy.tokenizer, examples, prompt_cfg) if examples else []
    if not items and vision_record and vision_record["without_screenshot"]:
        raise ValueError(f"the {stage.upper()} pile (version {pile.version}) gives a vision-language policy nothing to "
                         f"train on: its {vision_record['without_screenshot']} steps have no readable screenshot")  # fmt: skip
    if not items:
        raise ValueError(f"the {stage.upper()} pile (version {pile.version}) is empty: nothing to train on")
    from dataclasses import replace

    from training.precision import choose

    precision = choose(cfg.optim.bf16, b.policy.model, cfg.batch_size)  # "auto": measured on this machine, cached
    cfg = replace(cfg, optim=replace(cfg.optim, bf16=precision.bf16))
    losses, tokens = train(b.policy, items, cfg, on_step)
    metrics = {"episodes": pile.rows.num_rows, "grounding_examples": n_ground, "precision": precision.as_dict()}
    if agent_only:
        metrics["agent_tokens"] = sum(e.n_agent for e in items)
    config = {stage: to_dict(cfg), "prompt": to_dict(prompt_cfg)}
    if vision is not None and vision_record is not None:  # the coordinate convention, with the screens it mapped
        config["vision"] = vision.as_dict(vision_record.pop("screens"))
        metrics["vision"] = vision_record
    res = JobResult(stage, round, b.uri, pile_version=pile.version, samples=len(items), tokens=tokens, losses=losses,
                    metrics=metrics, config=config)  # fmt: skip
    return finish(lake, res, b.policy, t0), b.policy
