"""The round configuration: what one flywheel round does and how large each part is, a frozen dataclass (TRL style)
recorded with every round, loadable from JSON or TOML.

`round_config(env, tasks, quick, people)` builds the configurations the project ships: the sandbox or MiniWoB++
(`env`), full or smoke-test sizes (`quick`), and who annotates (`people`): "humans" publishes the round's tasks for
people to annotate on the newest model's proposals (their sessions land through a later intake), "scripted" lets the
environment backend's scripted annotator play them within the round, as the demo does. `flywheel demo` is exactly
`round_config(..., people="scripted")` after a cold start, so the round shown to learn is the round that is scheduled.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from training.base import BASE_ARCH, BASE_MODEL, BASE_PROMPT
from training.config import CTConfig, EvalConfig, OptimConfig, RLConfig, SamplingConfig, SearchPracticeConfig, SFTConfig
from training.pipeline import FlywheelConfig

PEOPLE = ("humans", "scripted")
#: How a round's RL ends: one RL job on all of the round's tasks, or specialists (one RL job per world from the
#: same SFT checkpoint) merged by parameter interpolation (flows/specialists.py).
RL_MODES = ("joint", "specialists", "search")


def tuned_flywheel() -> FlywheelConfig:
    """The training sizes measured to learn on 2 CPU cores from the shipped base (docs/training.md)."""
    return FlywheelConfig(
        # The shipped base (training/base.py, models/sandbox-base): this architecture, pretrained on grounding and
        # copying only. From scratch the cold start reached 8.6% held-out and the rounds did not move it; the model
        # wrote the right element and then coordinates it memorised (docs/training.md).
        model=replace(BASE_ARCH, pretrained=str(BASE_MODEL)),
        # The current screen plus the last eight actions (the base was pretrained on the last two): the sandbox's
        # screens show the state (focus, values, ticks, open menus), so older screens only cost tokens, but not which
        # of three tabs' buttons were pressed (level 5), which only the earlier actions tell. From the same cold
        # start, 300 s of search practice reached 53.2% with eight and 47.9% with two (docs/training.md). The
        # thought is the target's screen line (the format the base was pretrained to write), the instruction's
        # `Field 'value'` span for typing, or the screen line an answer is read from.
        prompt=replace(BASE_PROMPT, history_max=8),
        # The cold start, SFT, CT and practice by search train through torch.compile (training/compiled.py): about 1.3-1.5x
        # a step here, the compile paid once a process; sampling stays eager (and the PPO stage below: not measured).
        cold_sft=SFTConfig(steps=400, batch_size=16, optim=OptimConfig(lr=1e-3, warmup_steps=10, bf16="auto", compile=True)),
        sft=SFTConfig(epochs=2.5, max_steps=1600, batch_size=16,
                      optim=OptimConfig(lr=1e-3, warmup_steps=5, bf16="auto", compile=True)),
        ct=CTConfig(steps=10, batch_size=8, optim=OptimConfig(lr=3e-4, warmup_steps=2, bf16="auto", compile=True)),
        # Practice at 1e-3 in round 1 (and from round 0 in `make bench`), 3e-4 from round 2 on: round 3's practice,
        # replayed on five demo lakes, added +4.1 points over its SFT base at 3e-4 and -0.1 at 1e-3 (docs/training.md).
        search=SearchPracticeConfig(optim=OptimConfig(lr=1e-3, warmup_steps=5, bf16="auto", compile=True),
                                    lr_by_round=(1e-3, 3e-4)),
        # The RL stage as measured before practice was reworked: one small PPO iteration on fresh tasks. The
        # practice settings (RLConfig's defaults) did not beat copying on this machine (docs/training.md,
        # "Practice"), so the demo keeps that stage, at lr 1e-4: at 5e-4 it cost held-out points in every round
        # (rl_effect: -6.8, -1.1, -3.9; round 1's base: -6.8 at 5e-4, -1.4 at 1e-4, same tasks, docs/training.md).
        rl=RLConfig(algo="ppo", iterations=1, tasks_per_iter=16, group_size=4, value_pretrain_steps=5, minibatch_size=32,
                    ppo_epochs=1, curriculum=False, all_equal="keep", alpha=0.05, loss_norm="token", negative_weight=1.0,
                    rehearsal_coef=0.0, optim=OptimConfig(lr=1e-4, warmup_steps=0)),
        # Acting (sampling, annotation proposals, evaluation) in two processes of one thread each: 1.18x one process on
        # two threads over 16 interleaved held-out evaluations (docs/training.md, "Rejection sampling and evaluation")
        sampling=SamplingConfig(tasks=96, attempts=2, max_new_tokens=40, processes=2),
        eval=EvalConfig(max_new_tokens=40, processes=2),
        max_new_tokens=40,
        ct_every=2,
    )  # fmt: skip


@dataclass(frozen=True)
class SpecialistConfig:
    """One specialist: a named RL run from the round's SFT checkpoint on one world, a subset of the tasks (UI-TARS-2,
    section 2.6). `families`: the sandbox's families, or MiniWoB++ task names; `levels`: the sandbox's levels; None:
    all of them. `env`: the world's environment backend (None: the round's). `alpha`: its weight in the merge (None
    for every specialist: equal weights, or the sweep's choice)."""

    name: str = ""
    families: tuple[str, ...] | None = None
    levels: tuple[int, ...] | None = None
    env: str | None = None
    alpha: float | None = None


@dataclass(frozen=True)
class MergeConfig:
    """How the specialists of a round are merged (training/merge.py)."""

    #: Choose alpha on the worlds' held-out tasks from `grid` (two specialists), keeping the best by `objective`:
    #: "worst" (the worst world's score) or "mean". Note: the kept alpha's held-out score is then a maximum over
    #: the grid, slightly optimistic.
    sweep: bool = False
    objective: str = "worst"
    grid: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
    #: The mixed held-out set's composed tasks per composed family and level (sandbox family groups only; 0: none).
    mixed_per_cell: int = 2
    #: Also evaluate the common checkpoint and each specialist on the mixed held-out set (the merge's comparison;
    #: costs one more evaluation per model).
    eval_members: bool = False


@dataclass(frozen=True)
class RoundConfig:
    """One flywheel round (flows/stages.py): sample -> annotate -> intake -> route -> CT -> SFT -> RL -> evaluate
    -> summary, in the environment backend `env`."""

    seed: int = 0
    env: str = "sandbox"  # the environment backend: sandbox | miniwob (training/envs.py)
    env_tasks: tuple[str, ...] | None = None  # MiniWoB++ task names (None: every task with a demonstrator)
    people: str = "humans"  # humans: publish the annotation tasks; scripted: the backend's annotator plays them
    #: Tasks annotated on the newest checkpoint's proposals each round r >= 1 (0: no annotation stage).
    annotate_tasks: int = 480
    #: Annotation effort follows the model's failures: the round's tasks are split over the backend's groups (the
    #: sandbox's levels, MiniWoB++'s tasks) in proportion to the previous round's held-out failure rate in each (at
    #: least `focus_floor` of the even share each).
    annotate_focus: bool = True
    focus_floor: float = 0.25
    eval_per_cell: int | None = None  # held-out tasks per (family, level); None: all of them
    #: An OpenAI-compatible endpoint (vLLM, SGLang, `flywheel policy serve`) that the acting stages (sample,
    #: annotate, evaluate) generate through instead of in-process; it must serve the checkpoint the stage acts with
    #: (training/served.py; a VLM's prompts go to its chat endpoint with their screenshots). None: in-process.
    policy_url: str | None = None
    #: RL's rollouts also go through `policy_url` (a `flywheel policy serve --lake` on this lake): the learner
    #: publishes its weights every `rl_sync_every` iterations and the server loads them (training/rollout_server.py).
    rl_through_server: bool = False
    rl_sync_every: int = 1
    flywheel: FlywheelConfig = field(default_factory=tuned_flywheel)
    #: "joint": the round's RL stage is one RL job on all its tasks; "specialists": one RL job per `specialists`
    #: entry from the SFT checkpoint, then their merge (`merge`), which is the RL stage's checkpoint; "search":
    #: practice by search and imitation (training/search_practice.py, `flywheel.search`) on an environment that can
    #: copy a state (the sandbox).
    rl_mode: str = "joint"
    #: The evaluate stage also evaluates the RL stage's base (the round's SFT checkpoint) on the same held-out tasks,
    #: so every round shows RL's own share of its gain (held-out before and after RL, paired McNemar test). Costs one
    #: more held-out evaluation in each round that runs RL.
    rl_effect: bool = True
    specialists: tuple[SpecialistConfig, ...] = ()
    merge: MergeConfig = field(default_factory=MergeConfig)

    def __post_init__(self) -> None:
        if self.people not in PEOPLE:
            raise ValueError(f"people must be one of {', '.join(PEOPLE)}, not {self.people!r}")
        if self.rl_mode not in RL_MODES:
            raise ValueError(f"rl_mode must be one of {', '.join(RL_MODES)}, not {self.rl_mode!r}")
        if self.rl_mode == "specialists":
            check_specialists(self)
        if self.rl_mode == "search" and (self.env != "sandbox" or self.flywheel.backend != "builtin"):
            raise ValueError(
                "rl_mode 'search' needs the sandbox (an environment that can copy a state) and the builtin "
                "training backend"
            )
        if self.rl_through_server and not self.policy_url:
            raise ValueError("rl_through_server needs policy_url: the server RL's rollouts go through")
        if self.rl_sync_every < 1:
            raise ValueError(f"rl_sync_every must be at least 1, not {self.rl_sync_every}")

    @property
    def backend(self):  # noqa: ANN201 - training.envs.EnvBackend, shared within the process
        from training.envs import env_backend

        return env_backend(self.env, self.env_tasks)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_specialists(cfg: RoundConfig) -> None:
    """Refuse, in one line, a specialists round that could not run to its merge: fewer than two specialists, names
    missing or repeated, a world its backend does not have, alphas that are not a convex combination, a sweep that
    is not over two specialists, an external training backend (it has no task subsets)."""
    from training.envs import check_world
    from training.merge import OBJECTIVES, MergeError, check_alphas

    sp, m = cfg.specialists, cfg.merge
    if len(sp) < 2:
        raise ValueError(f"rl_mode 'specialists' needs at least two [[specialists]], not {len(sp)}")
    names = [s.name for s in sp]
    if not all(names) or len(set(names)) != len(names) or {"composed", "overall"} & set(names):
        raise ValueError(f"each specialist needs a name of its own (not composed or overall): {names}")
    for s in sp:
        env = s.env or cfg.env
        try:
            check_world(env, cfg.env_tasks if env == cfg.env else None, s.families, s.levels)
        except ValueError as e:
            raise ValueError(f"specialist {s.name}: {e}") from None
    given = [s.alpha for s in sp if s.alpha is not None]
    if m.sweep:
        if len(sp) != 2 or given:
            raise ValueError("merge.sweep chooses the alpha of two specialists: give two, without an alpha")
        if m.objective not in OBJECTIVES:
            raise ValueError(f"merge.objective must be one of {', '.join(OBJECTIVES)}, not {m.objective!r}")
        if not m.grid or any(not 0.0 <= a <= 1.0 for a in m.grid):
            raise ValueError(f"merge.grid must be weights in [0, 1], not {list(m.grid)}")
    elif given:
        if len(given) != len(sp):
            raise ValueError("give every specialist an alpha, or none (equal weights)")
        try:
            check_alphas({s.name: float(s.alpha) for s in sp})  # type: ignore[arg-type]
        except MergeError as e:
            raise ValueError(f"specialists' {e}") from None
    if cfg.flywheel.backend != "builtin":
        raise ValueError(
            "rl_mode 'specialists' needs the builtin training backend (an external one has no task subsets)"
        )


def quick(cfg: RoundConfig) -> RoundConfig:
    """Smoke-test sizes (a minute or two a round): every stage runs, nothing is expected to learn."""
    f = without_compile(cfg.flywheel)  # a compile costs more than a smoke run's few steps
    return replace(
        cfg, eval_per_cell=1, annotate_tasks=4,
        flywheel=replace(
            f, model=replace(f.model, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2, pretrained=None),
            # The smoke run's model is fresh and tiny (not the base): it needs the higher learning rate to write
            # readable actions within a short cold start (the MiniWoB++ smoke test needs it to act in the browser).
            cold_sft=replace(f.cold_sft, steps=8, batch_size=8, optim=replace(f.cold_sft.optim, lr=3e-3, warmup_steps=20)),
            sft=replace(f.sft, steps=4, epochs=None, batch_size=8),
            ct=replace(f.ct, steps=2, batch_size=4), rl=replace(f.rl, tasks_per_iter=4, group_size=2, value_pretrain_steps=2),
            sampling=replace(f.sampling, tasks=7, attempts=2, max_new_tokens=40), eval=replace(f.eval, max_new_tokens=40),
            search=replace(f.search, max_steps=6, tasks_per_batch=8, max_nodes=300, batch_size=8),
            max_new_tokens=40,
        ),
    )  # fmt: skip


def without_compile(f: FlywheelConfig) -> FlywheelConfig:
    """`f` with every training job's forward eager (training/compiled.py): for runs of a few steps, where the
    compile would cost more than it saves."""
    jobs = {k: replace(getattr(f, k), optim=replace(getattr(f, k).optim, compile=False))
            for k in ("cold_sft", "sft", "ct", "rl", "search")}  # fmt: skip
    return replace(f, **jobs)


def round_config(
    env: str = "sandbox",
    tasks: typing.Sequence[str] | None = None,
    quick_sizes: bool = False,
    people: str = "humans",
    annotate: int | None = None,
    precision: str = "auto",
) -> RoundConfig:
    """The shipped configuration for `env` (MiniWoB++: its own token budget, grounding rehearsal and annotation
    size, training/envs_miniwob.py), optionally at smoke-test sizes, with `people` annotating, training in
    `precision` (auto: whichever this machine runs faster, training/precision.py; bf16; fp32)."""
    from training.envs import env_names

    if env not in env_names():
        raise ValueError(f"unknown environment {env!r}; expected one of {', '.join(env_names())}")
    if tasks and env == "sandbox":
        raise ValueError("--tasks is for --env miniwob (the sandbox uses every family)")
    cfg = RoundConfig(people=people)
    if quick_sizes:
        cfg = quick(cfg)
    if env == "miniwob":
        from training.envs_miniwob import miniwob_config

        cfg = miniwob_config(cfg, tasks, eval_per_task=2 if quick_sizes else None, quick=quick_sizes)
    if annotate is not None:
        cfg = replace(cfg, annotate_tasks=annotate)
    return with_precision(cfg, precision)


PRECISIONS = {"auto": "auto", "bf16": True, "fp32": False}


def with_precision(cfg: RoundConfig, precision: str) -> RoundConfig:
    """`cfg` with its CT and SFT jobs training in `precision` (auto | bf16 | fp32)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    v, f = PRECISIONS[precision], cfg.flywheel
    jobs = {k: replace(getattr(f, k), optim=replace(getattr(f, k).optim, bf16=v)) for k in ("cold_sft", "sft", "ct")}
    return replace(cfg, flywheel=replace(f, **jobs))


def config_from_dict(cls: type, data: dict[str, Any] | None, base: Any = None) -> Any:
    """A (nested, frozen) config dataclass from a dict such as a parsed JSON/TOML file, laid over `base` (default:
    `cls()`), so a file that sets `[flywheel.sft] steps = 3` keeps every other tuned value. Unknown keys are refused
    by name, since a typo must not silently fall back to a default."""
    base = cls() if base is None else base
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown option(s) {', '.join(sorted(unknown))}")
    kw: dict[str, Any] = {}
    for k, v in data.items():
        t, now = hints[k], getattr(base, k)
        item = _item_dataclass(t)
        if isinstance(v, dict) and dataclasses.is_dataclass(t):
            kw[k] = config_from_dict(t, v, now if dataclasses.is_dataclass(now) else None)
        elif isinstance(v, list) and item is not None:  # e.g. [[specialists]] tables: each over the item's defaults
            kw[k] = tuple(config_from_dict(item, x) if isinstance(x, dict) else x for x in v)
        elif isinstance(v, list):
            kw[k] = tuple(v)
        else:
            kw[k] = v
    return replace(base, **kw)


def _item_dataclass(t: Any) -> type | None:
    """X when `t` is tuple[X, ...] with X a dataclass (a list of config sections), else None."""
    args = typing.get_args(t)
    if typing.get_origin(t) is tuple and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return args[0]
    return None


def load_round_config(path: str | Path | None) -> RoundConfig:
    """The round configuration: defaults, overridden by a JSON or TOML file (nested sections per config)."""
    if path is None:
        return RoundConfig()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"config file {p} does not exist")
    if p.suffix == ".toml":
        import tomllib

        data = tomllib.loads(p.read_text())
    else:
        data = json.loads(p.read_text())
    return config_from_dict(RoundConfig, data)


def recorded_config(lake: Any) -> RoundConfig | None:
    """The configuration the lake's last round recorded (so `flywheel round run` continues a lake as it was run,
    a demo lake included), or None when no round recorded one."""
    from validators.rounds import read_rounds

    for rec in reversed(read_rounds(lake)):
        if rec.config:
            return config_from_dict(RoundConfig, rec.config)
    return None


def resolve_landing(lake: Any, landing: str | None = None) -> str:
    """The landing area: the one given; else the settings' when set explicitly (flywheel.toml or FLYWHEEL_LANDING);
    else the one the lake's last round recorded (a demo lake's own); else the settings' default."""
    from core.settings import get_settings
    from validators.rounds import read_rounds

    if landing:
        return landing
    s = get_settings()
    if "landing" not in s.model_fields_set:
        for rec in reversed(read_rounds(lake)):
            if rec.landing:
                return rec.landing
    return s.landing


def resolve_config(
    lake: Any,
    path: str | Path | None = None,
    env: str | None = None,
    tasks: typing.Sequence[str] | None = None,
    people: str | None = None,
) -> tuple[RoundConfig, str]:
    """(config, where it came from): a file when given (with `env`/`people` applied on top); else the shipped
    configuration for `env`/`people` when either is given; else the lake's recorded one; else the defaults."""
    if path is not None:
        cfg = load_round_config(path)
        if env is not None or tasks:
            cfg = replace(cfg, env=env or cfg.env, env_tasks=tuple(tasks) if tasks else cfg.env_tasks)
        return (replace(cfg, people=people) if people else cfg), f"file {path}"
    if env is not None or people is not None or tasks:
        return round_config(env or "sandbox", tasks, people=people or "humans"), "the shipped configuration"
    rec = recorded_config(lake)
    if rec is not None:
        return rec, "the lake's last round"
    return RoundConfig(), "the defaults"
