"""Training configurations: frozen dataclasses (TRL style), recorded as JSON on every training_runs row.

Defaults are sized for the built-in sandbox on a 2-core CPU: a ~1-2M parameter Llama, short prompts, a few
hundred optimizer steps per round. Every field can be overridden with `dataclasses.replace` or `from_dict`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

T = TypeVar("T")


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def to_json(cfg: Any) -> str:
    return json.dumps(to_dict(cfg), sort_keys=True, default=str)


def from_dict(cls: type[T], data: dict[str, Any] | None) -> T:
    """Build a config from a dict, refusing unknown keys (a typo must not silently fall back to a default)."""
    data = dict(data or {})
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown option(s) {', '.join(sorted(unknown))}")
    return cls(**data)


@dataclass(frozen=True)
class ModelConfig:
    """The default policy: a small Llama built from a config, with a BPE tokenizer trained on the sandbox's text."""

    vocab_size: int = 4096
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    max_position_embeddings: int = 1024
    #: Numbers 0..max_number are forced into the vocabulary as single tokens, so a coordinate in an action is the
    #: same token as in the observation it was read from (copying is then one attention hop).
    max_number: int = 2048
    seed: int = 0
    #: A local model folder (save_pretrained output) to start from instead of building one from this config.
    pretrained: str | None = None


@dataclass(frozen=True)
class VLMConfig:
    """A small vision-language policy built from a config (training/vlm.py): a Qwen2-VL (vision tower + merger +
    text decoder, random init) with a BPE tokenizer trained on the sandbox's text. It sees the current screenshot
    resized to `image_width` x `image_height` (multiples of patch_size * merge_size) instead of the text screen.

    `coords` is where the action's pixel coordinates live: "image" (the resized image the model sees, as Qwen2.5-VL
    and UI-TARS-1.5 write them) or "screen" (the original screen's pixels; the image is still resized). The sizes
    here are for 2 CPU cores: about 0.2M parameters, 40 image tokens per screenshot."""

    #: The text decoder and its tokenizer (`pretrained` is not used): numbers up to 640, the sandbox's screen
    #: coordinates, are single tokens.
    text: ModelConfig = field(default_factory=lambda: ModelConfig(
        vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
        max_position_embeddings=2048, max_number=640))  # fmt: skip
    vision_depth: int = 1
    vision_embed_dim: int = 32
    vision_heads: int = 2
    patch_size: int = 14
    merge_size: int = 2  # merge_size x merge_size patches become one image token
    temporal_patch_size: int = 2
    image_width: int = 224  # the sandbox's 640x400 screen at 0.35 (8 x 5 image tokens)
    image_height: int = 140
    coords: str = "image"  # image | screen


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 3e-3
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 10
    grad_clip: float = 1.0
    #: bfloat16 autocast for the forward pass (weights stay float32): about 2x on CPUs with AVX512-BF16 or AMX, slower
    #: on others. "auto": whichever this machine runs faster, measured once and cached (training/precision.py).
    bf16: bool | str = False
    #: Train through `torch.compile` (training/compiled.py): about 1.5x a step on 2 cores for this small model, after
    #: a compile paid once per process (20-60 s; about 13 s from inductor's on-disk cache). Worth it for jobs of
    #: minutes, not for smoke runs and tests.
    compile: bool = False
    #: A wall-clock end (`time.time()`): the loop stops at it, after at least `warmup_steps` steps, and the learning
    #: rate follows the clock as well as the steps, so a loop cut by the clock still ends its decay. The demo's budget
    #: sets it for its last round's SFT (flows/budget.py `sft_stop_at`): projected step times missed by up to 24%.
    stop_at: float | None = None


@dataclass(frozen=True)
class CTConfig:
    """Continual training: next-token loss on every token of the CT pile's text (failures included)."""

    steps: int = 40
    batch_size: int = 16
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3))
    seed: int = 0


@dataclass(frozen=True)
class WarmupConfig:
    """Copy warm-up of a fresh model (training/warmup.py): repeated spans of the policy's own text, loss on the repeat.

    Off (0 steps) unless asked for; a pretrained model (`ModelConfig.pretrained`) never gets one."""

    steps: int = 0
    batch_size: int = 64
    min_span: int = 4
    max_span: int = 16
    max_gap: int = 120  # tokens between a span and its repeat (the distances an observation spans)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-3, warmup_steps=30))
    seed: int = 0


@dataclass(frozen=True)
class SFTConfig:
    """Supervised fine-tuning: loss only on the agent's thought and action tokens."""

    steps: int = 200
    batch_size: int = 32
    optim: OptimConfig = field(default_factory=OptimConfig)
    #: Episodes per task family and level are capped so easy tasks do not crowd out the rest.
    max_episodes_per_task: int = 8
    seed: int = 0
    #: Size the training to the pile: `epochs` passes over its examples (at most `max_steps` steps) instead of a
    #: fixed `steps`. A growing pile then gets the same number of passes every round, where a fixed count over-trains
    #: the first small pile and under-trains the later ones.
    epochs: float | None = None
    max_steps: int = 2000
    #: Grounding rehearsal: this many extra examples per pile example, each "Click the <role> "<name>"." on one of
    #: the pile's own screens (training.base.grounding_examples: the base's pretraining task, label-free). Narrow SFT
    #: on a new domain erodes the base's pointing and copying (MiniWoB++'s random names, docs/miniwob.md); 0: off.
    grounding: float = 0.0

    def steps_for(self, n_examples: int) -> int:
        if self.epochs is None:
            return self.steps
        return max(1, min(self.max_steps, math.ceil(self.epochs * n_examples / self.batch_size)))


@dataclass(frozen=True)
class RLConfig:
    """Practice in the environment with the verifier's reward (training/rl.py, training/practice.py): PPO with the
    report's changes (section 2.5) or GRPO, a curriculum that follows the policy, all-equal groups dropped or
    rescued from a replay buffer (ARPO), stale episodes dropped."""

    algo: str = "grpo"  # grpo | ppo (the report's PPO: value pretraining, decoupled and length-adaptive GAE)
    #: What a group is: "episode" (G whole attempts at a task, scored by the outcome) or "step" (G actions at each
    #: state of the policy's greedy attempt, scored by the environment's progress; training/branch.py; GRPO only).
    groups: str = "episode"
    max_states: int = 12  # step groups: at most this many states of one attempt are branched
    branch_at: str = "all"  # step groups: branch every state, or only "mistakes" (the greedy step did not earn +1)
    with_greedy: bool = False  # step groups: the greedy step joins its state's group (a wrong one is pushed down)
    #: Step groups: also try every action the state's screen offers (training/explore.py) in a copy of the state;
    #: the ones that make progress become corrections, learnt by self-imitation (`self_imitation` > 0): search at the
    #: policy's own mistakes with the environment's reward (expert iteration). `group_size` may then be 0 (no samples).
    explore: bool = False
    #: Where several searched actions make progress at one state: keep the one the policy finds most likely ("best")
    #: or "all" of them.
    explore_keep: str = "best"
    #: Step groups' reward: "shaped" (clip(d(s) - d(s'), -1, 1): a no-op 0 beats a detour -1) or "progress" (1 when
    #: the action moved the task along and its thought says what it does, else 0): a group whose candidates all fail
    #: to make progress is then all-equal and dropped, instead of teaching the policy to prefer actions that change
    #: nothing, and a lucky click under a thought naming another element is not reinforced.
    step_reward: str = "shaped"
    #: Which of a response's tokens get its advantage: "response" (all) or "action" (from `\nAction:` on; the
    #: thought is then context, as the observation is).
    credit: str = "response"
    iterations: int = 2  # roll out -> update rounds (each one policy version)
    tasks_per_iter: int = 16
    group_size: int = 8  # attempts per task (GRPO's group; the all-equal filter and the curriculum use it for PPO too)
    temperature: float = 1.0
    ppo_epochs: int = 1
    minibatch_size: int = 32  # steps (prompt+response sequences) per gradient step
    #: Sequences that share a prompt (a state's candidates, the first step of a task's attempts) are trained in one
    #: row, the prompt encoded once (training/packing.py); minibatches then keep such groups together.
    pack_prompts: bool = True
    gamma: float = 1.0
    lambda_critic: float = 1.0  # decoupled GAE: the critic sees Monte Carlo returns
    length_adaptive: bool = True  # lambda_policy = 1 - 1/(alpha * l)
    #: The report's alpha (0.05) is for chains of thought thousands of tokens long; a sandbox trajectory has 20-100
    #: agent tokens, where 0.05 gives lambda ~ 0.2 and the advantages are the untrained critic's noise (PPO fell from
    #: 11% to 0% on tests/training/test_practice.py's two-button task; alpha 1.0: lambda ~ 0.96, 11% -> 92%).
    alpha: float = 1.0
    lambda_policy: float = 0.95  # used when length_adaptive is off
    eps_low: float = 0.2  # clip-higher: asymmetric clip range
    eps_high: float = 0.28
    grpo_eps: float = 1e-6  # GRPO: the epsilon added to the group's spread
    value_coef: float = 0.5
    value_pretrain_steps: int = 20  # critic-only updates on the first rollouts, policy frozen
    entropy_coef: float = 0.0
    format_reward: float = 0.0  # added when every action of the episode parses
    length_penalty: float = 0.0  # subtracted per step
    unreadable_reward: float = -1.0  # the report's reward for an action that does not parse
    max_steps: int | None = None  # None: the task's own step limit
    #: Groups whose attempts all scored the same: keep | drop | replay (an all-failed group gets the task's latest
    #: success from the replay buffer; other all-equal groups are dropped).
    all_equal: str = "drop"
    #: Pick each iteration's tasks from a pool by their latest pass rate (0 < p < 1 first); off: fresh tasks each time.
    curriculum: bool = True
    pool_size: int = 0  # the curriculum's pool (0: 4 x tasks_per_iter)
    curriculum_by: str | None = "level"  # spread the curriculum's picks over this TaskInfo field (None: no spread)
    #: A task leaves the curriculum's pool after this many groups (None: when mastered). 1: fresh tasks every time,
    #: picked by level; revisiting a small pool raised the training pass rate and lowered the held-out one.
    max_visits: int | None = 1
    #: How the policy loss averages: "token" (every agent token alike) or "trajectory" (each trajectory's tokens
    #: weigh 1/its length, so every attempt counts the same). Per token, a failure that ran to the step limit
    #: outweighs a short success, and the tokens they share (the format, the right first steps) are pushed down.
    loss_norm: str = "trajectory"
    #: The weight of negative advantages (1: plain policy gradient; 0: only what beat the baseline is reinforced).
    negative_weight: float = 0.0
    rehearsal_coef: float = 1.0  # PPO-ptx: this x the SFT loss on the pile's examples, added to every policy step
    #: The weight of RL's own loss (policy gradient + value). 0 keeps everything else (acting, rehearsal steps): the
    #: control arm that says how much of a practice run's gain is the policy gradient's.
    pg_coef: float = 1.0
    #: Self-imitation (step groups): this share of every rehearsal batch replays the verified good actions practice
    #: found at the policy's mistakes (training.practice.Corrections, the newest `corrections_max`).
    self_imitation: float = 0.0
    #: Rehearsal steps (copying data and self-imitation, as above) after every iteration's update, beside the one
    #: that rides on each policy minibatch: the imitation half of expert iteration when acting runs in-process.
    rehearsal_steps: int = 0
    corrections_max: int = 4096
    max_lag: int = 2  # episodes written more than this many policy versions ago are dropped (replayed ones)
    time_budget_s: float | None = None  # stop starting iterations after this many seconds (None: all iterations)
    #: Acting beside learning (training/workers.py): this many worker processes act a batch ahead of the learner with
    #: the weights of the step each batch was submitted at (0: act in-process, then learn). `worker_address`: a Dask
    #: scheduler (tcp://HOST:PORT) instead of local processes. Thread counts: torch threads per worker and for the
    #: learner (None: torch's default).
    workers: int = 0
    worker_address: str | None = None
    worker_threads: int = 1
    learner_threads: int | None = None
    #: While the workers' batch is not back, the learner takes rehearsal steps (when there is a rehearsal loss).
    rehearse_while_waiting: bool = True
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=3e-4, warmup_steps=0))
    seed: int = 0


@dataclass(frozen=True)
class SearchPracticeConfig:
    """Practice by search and imitation (training/search_practice.py): fresh tasks are solved by breadth-first search
    with the verifier's outcome (training/search.py) in worker processes, and the learner imitates what was found,
    each example about `passes` times, beside a `rehearsal_share` of the copying data in every batch."""

    time_budget_s: float = 300.0
    #: Stop after this many optimiser steps on found examples as well (None: the clock alone); the copying steps
    #: taken while the first search is out are not counted.
    max_steps: int | None = None
    tasks_per_batch: int = 32  # tasks per search job
    #: Actions tried per task before the search gives up on it: 5,000 solves the sandbox's level-4 answer tasks
    #: (about 4,900 nodes); the cells no budget up to 15,000 solved are dropped after their probe (below).
    max_nodes: int = 5000
    #: A cell (family and level) whose tasks the search solved less often than this after `probe` tries is no longer
    #: searched: its node budget is spent where the search finds something. Cells, not levels: a level's families
    #: differ (level-3 forms were never solved, level-3 menus always).
    min_solve_rate: float = 0.3
    probe: int = 3
    #: States expanded per task when a task of a given-up cell is searched best-first under the learner's own policy
    #: (training/search.py `guided_solve`; 0: those cells are not searched at), `guided_per_batch` such tasks a batch.
    guide_states: int = 0
    guided_per_batch: int = 2
    reprobe_batches: int = 25  # a cell the prior could not solve either is probed again this many batches later
    passes: float = 2.0  # how often each found example is trained on, on average
    rehearsal_share: float = 0.125  # of every batch: the copying data (none given: 0)
    batch_size: int = 16
    workers: int = 1  # search processes beside the learner (0: search in-process between training steps)
    learner_threads: int | None = 1  # torch threads of the learner while workers search (None: torch's default)
    #: With workers: the next search is sent out only when fewer than this many learner steps' worth of found
    #: examples wait unseen (None: search non-stop), and while none is out the learner takes `alone_threads` (None:
    #: torch's default, every core). Why: non-stop, the search found about 1.8x what the learner could train on
    #: once, while the learner stepped on one core at 0.30 s against 0.13 s on two (docs/training.md).
    backlog_steps: float | None = 8.0
    alone_threads: int | None = None
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-3, warmup_steps=5, bf16="auto"))
    #: The learning rate of round r's practice: lr_by_round[r - 1], the last entry for every later round (empty:
    #: `optim.lr` in every round). Why: from a stronger base, smaller steps keep what SFT taught; round 3's practice
    #: replayed on five demo lakes read 67.0% at 3e-4 against 62.8% at 1e-3, round 2's was the same at both
    #: (docs/training.md, "Measured", the replays after the demo runs).
    lr_by_round: tuple[float, ...] = ()
    seed: int = 0

    def for_round(self, round: int) -> SearchPracticeConfig:
        """This configuration as round `round` practises: its learning rate from `lr_by_round`."""
        if not self.lr_by_round or round < 1:
            return self
        lr = self.lr_by_round[min(round, len(self.lr_by_round)) - 1]
        return replace(self, optim=replace(self.optim, lr=lr))


@dataclass(frozen=True)
class SamplingConfig:
    """Rejection sampling: K attempts per task with the newest checkpoint, at temperature 1.0."""

    tasks: int = 96
    attempts: int = 4
    temperature: float = 1.0
    max_new_tokens: int = 64
    seed: int = 0
    #: Processes of one thread each that act (training.procs.split_episodes); 1: this process, on every core.
    processes: int = 1


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation: greedy decoding on the sandbox's held-out seeds."""

    episodes_per_cell: int = 40  # per (family, level)
    temperature: float = 0.0
    max_new_tokens: int = 64
    seed: int = 0
    #: Processes of one thread each that act (training.procs.split_episodes); 1: this process, on every core. The
    #: round's annotation proposals (greedy too) use the same number.
    processes: int = 1
