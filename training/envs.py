"""The sandbox behind training's Environment protocol: text observations in, action strings out, a verdict.

The one place that knows the sandbox's API, so another backend (a browser benchmark) only needs its own adapter.
`EnvBackend` is what the demo's stages take from a backend (tasks, held-out tasks, screenshots, demonstrators,
the app name of its exports); `env_backend("sandbox" | "miniwob")` gives one (training/envs_miniwob.py has the
MiniWoB++ one).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

from training.rollout import Reviewer, TaskInfo

#: Sandbox outcome -> rollout termination (a task that reached its terminal state is a finished episode).
_TERMINATION = {
    "finished": "finished",
    "ended": "finished",
    "step_limit": "step_limit",
    "unreadable_action": "unreadable_action",
}


def _copy(obj: Any) -> Any:
    """An independent deep copy. A pickle round trip copies a sandbox state 3x faster than copy.deepcopy (0.17 against
    0.57 ms), and step groups copy one per candidate and per planned distance."""
    return _copies(obj)()


def _copies(obj: Any) -> Callable[[], Any]:
    """Independent deep copies of `obj` as it is now, any number of them from one snapshot (one pickling)."""
    import pickle

    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return lambda: pickle.loads(blob)  # noqa: S301 - our own object, in-process


class SandboxEnv:
    """training.rollout.Environment over sandbox.env.Env."""

    def __init__(self, task) -> None:  # noqa: ANN001 - sandbox.tasks.Task
        from sandbox.env import Env

        self.env = Env(task)

    def reset(self) -> str:
        return self.env.reset().text

    def step(self, action: str) -> tuple[str, bool, str | None]:
        r = self.env.step(action)
        term = _TERMINATION.get(r.info.get("outcome") or "", "finished") if r.done else None
        return r.observation.text, r.done, term

    def verify(self) -> tuple[bool, str]:
        v = self.env.verify()
        return bool(v.passed), v.reason

    def screenshot(self) -> bytes:
        """The current screen as a PNG (rendered on demand: only a vision-language policy asks)."""
        return self.env.screenshot()

    def clone(self) -> SandboxEnv:
        """An independent copy of this state (training.branch tries actions in copies)."""
        return self.copier()()

    def copier(self) -> Callable[[], SandboxEnv]:
        """Independent copies of this state, as many as asked, from one snapshot: the search tries every action of
        a state in its own copy, and pickling the state once per copy was a quarter of its time."""
        snap = _copies(self.env)

        def make() -> SandboxEnv:
            c = object.__new__(SandboxEnv)
            c.env = snap()
            return c

        return make

    def state_key(self, observation: str) -> tuple:
        """What tells two states apart, `observation` (this state's text) included: the screen does not show what
        was committed (a pressed button looks the same after), so two states with one text can differ in what still
        has to be done, and a search that merged them (training/search.py) lost every ordered-press task of level 4
        and 5. The commits are a multiset: an order that could matter (an ordered goal's) ends the episode when it is
        wrong, so every live state has the right one, and two rows opened either way round are one state. Tab
        switches are left out: they commit nothing, and counting them would make A-B-A a new state."""
        s = self.env.screen
        return observation, tuple(sorted(e for e in s.events if e[0] != "tab")), len(s.pending), len(s.stack)

    def steps_to_go(self, limit: int = 60) -> int | None:
        """How many actions the sandbox's shortest-path expert needs from here to pass, or None when it cannot pass
        any more: the environment's progress signal (training.branch). The step limit does not apply to the plan."""
        from sandbox.demonstrators import Expert
        from schemas.actions import format_action

        if self.env.done:
            return 0 if self.env.verify().passed else None
        e = _copy(self.env)
        e.n_steps = -(10**6)  # the plan may run past the task's step limit: it measures distance, not a budget
        expert = Expert()
        n = 0
        while not e.done and n < limit:
            try:
                e.step(format_action(expert.move(e).action()))
            except (AssertionError, StopIteration):  # the goal's planner has no move from here
                return None
            n += 1
        return n if e.done and e.verify().passed else None


def task_info(task) -> TaskInfo:  # noqa: ANN001 - sandbox.tasks.Task
    return TaskInfo(
        task_id=task.task_id,
        instruction=task.instruction,
        family=task.family,
        level=task.level,
        step_limit=task.max_steps or 50,
        make_env=partial(SandboxEnv, task),  # a partial, not a lambda: it pickles (training.procs.split_episodes)
        reference_answer=task.reference_answer,
        screen_width=task.width,
        screen_height=task.height,
        payload=task,
    )


def render_steps(info: TaskInfo, actions: list[str]) -> list[bytes]:
    """PNG screenshots of the screen before each action, by replaying the actions in a rendering env."""
    from sandbox.env import Env

    env = Env(info.payload, screenshots=True)  # type: ignore[arg-type]
    obs = env.reset()
    out = []
    for a in actions:
        out.append(obs.screenshot or env.screenshot())
        if env.done:
            continue
        obs = env.step(a).observation
    return out


def training_tasks(
    n: int, seed: int, families: Sequence[str] | None = None, levels: Sequence[int] | None = None
) -> list[TaskInfo]:
    """n training tasks cycling over families and levels (never a held-out one: the sandbox guarantees it)."""
    from sandbox.heldout import training_tasks as gen

    return [task_info(t) for t in gen(n, seed, families, levels)]


def heldout_tasks(
    per_cell: int | None = None, families: Sequence[str] | None = None, levels: Sequence[int] | None = None
) -> list[TaskInfo]:
    from sandbox.heldout import heldout_tasks as gen

    return [task_info(t) for t in gen(per_cell, families, levels)]


def known_good(backend: EnvBackend, infos: Sequence[TaskInfo]) -> tuple[TaskInfo, list[str]] | None:
    """The first of `infos` the backend's scripted expert solves, with the expert's actions: RL scores it before it
    trains (training.practice.known_good_reward). None when the expert solved none of them."""
    for info, att in zip(infos, backend.demonstrate([i.payload for i in infos], "expert")):
        if att.verdict.passed and att.steps:
            return info, [s.action for s in att.steps]
    return None


# ------------------------------------------------------------------------------------------ backends
class EnvBackend(Protocol):
    """An environment backend as the flywheel's stages use it (training/demo.py)."""

    name: str
    app: str  # written into exports and rollout files
    platform: str
    focus_by: str  # the held-out breakdown (by_level | by_family) annotation effort is split over (training/demo.py)
    render_threads: int  # trajectories `render_steps` may render at once in threads (1: it is not thread-safe)

    #: n tasks, never held-out; `split` {group: tasks} (groups of `focus_by`) draws that many from each instead.
    def training_tasks(self, n: int, seed: int, split: dict[Any, int] | None = None) -> list[TaskInfo]: ...
    def heldout_tasks(self, per_cell: int | None = None) -> list[TaskInfo]: ...  # per (family, level)
    def render_steps(self, info: TaskInfo, actions: list[str]) -> list[bytes]: ...  # one PNG per action
    def demo_tasks(self, n: int, seed: int) -> list[Any]: ...  # the backend's own tasks, for its demonstrators
    def demonstrate(self, tasks: Sequence[Any], who: str) -> list[Any]: ...  # who: expert | novice | interactive
    def reviewer(self, info: TaskInfo) -> Reviewer: ...  # the annotator of interactive annotation (scripted here)
    def reference(self, per_cell: int | None = None) -> dict[str, dict] | None: ...  # scripted success on held-out
    def stats(self) -> dict[str, Any] | None: ...  # e.g. browser crashes, blocked outside requests
    def close(self) -> None: ...


class SandboxBackend:
    """The built-in sandbox (the module functions above and sandbox.demonstrators)."""

    name, app, platform, focus_by = "sandbox", "flywheel-sandbox", "sandbox", "level"
    #: Every core: a screenshot is Pillow drawing and PNG encoding (two thirds of it), which run outside the GIL. One
    #: annotation stage's 2,368 screenshots took 36 s in one thread and 22.5 s in two (2 cores).
    render_threads = os.cpu_count() or 1

    def training_tasks(self, n: int, seed: int, split: dict[Any, int] | None = None) -> list[TaskInfo]:
        if split:
            return [t for lv, k in split.items() for t in training_tasks(k, seed + lv, levels=(lv,))]
        return training_tasks(n, seed)

    def heldout_tasks(self, per_cell: int | None = None) -> list[TaskInfo]:
        return heldout_tasks(per_cell)

    def subset_tasks(
        self, n: int, seed: int, families: Sequence[str] | None, levels: Sequence[int] | None
    ) -> list[TaskInfo]:
        """n training tasks of these families and levels only (a specialist's world, `World`)."""
        return training_tasks(n, seed, families, levels)

    def check_subset(self, families: Sequence[str] | None, levels: Sequence[int] | None) -> None:
        from sandbox.families import FAMILIES, LEVELS

        bad = [f for f in families or () if f not in FAMILIES] + [str(lv) for lv in levels or () if lv not in LEVELS]
        if bad:
            raise ValueError(f"sandbox has no family or level {', '.join(bad)} (families: {', '.join(FAMILIES)}; "
                             f"levels: {', '.join(map(str, LEVELS))})")  # fmt: skip

    def task_info(self, payload: Any) -> TaskInfo:
        """The TaskInfo of one of the sandbox's own tasks (a rollout worker rebuilds its tasks with it)."""
        return task_info(payload)

    def render_steps(self, info: TaskInfo, actions: list[str]) -> list[bytes]:
        return render_steps(info, actions)

    def demo_tasks(self, n: int, seed: int) -> list[Any]:
        from sandbox.heldout import training_tasks as gen

        return gen(n, seed)

    def demonstrate(self, tasks: Sequence[Any], who: str) -> list[Any]:
        from sandbox import demonstrators as D
        from sandbox.parallel import run_many

        return run_many(
            tasks, {"expert": D.Expert, "novice": D.Novice, "interactive": D.Interactive}[who], screenshots=True
        )

    def reviewer(self, info: TaskInfo) -> Reviewer:
        """The scripted expert as the annotator: a click anywhere on the element it would click is accepted."""
        from sandbox.demonstrators import Expert, same_move
        from training.annotate import ScriptedReviewer

        return ScriptedReviewer(Expert(), lambda env: env.env, lambda raw, a, b: same_move(raw.screen, a, b))

    def reference(self, per_cell: int | None = None) -> dict[str, dict] | None:
        return None  # the sandbox's expert solves every task by construction (docs/sandbox.md)

    def stats(self) -> dict[str, Any] | None:
        return None

    def close(self) -> None:
        return None


# ------------------------------------------------------------------------------------------ worlds
def _even(n: int, groups: Sequence[Any]) -> dict[Any, int]:
    """n split over `groups` as evenly as integers allow (the first groups get the remainder)."""
    return {g: n // len(groups) + (i < n % len(groups)) for i, g in enumerate(groups)}


class World:
    """Some of a backend's tasks: the families (the sandbox's families; MiniWoB++'s task names, which are its
    families) and levels that a specialist practises and is evaluated on (flows/specialists.py). None: all of them.

    Training tasks come from the backend's own subset draw where it has one (the sandbox's, by family and level),
    else from its `split` draw over its `focus_by` groups (MiniWoB++: per task name), so the world never costs a page
    reset of a task outside it; held-out tasks are the backend's held-out set filtered to the world."""

    def __init__(self, name: str, backend: EnvBackend, families: Sequence[str] | None = None,
                 levels: Sequence[int] | None = None) -> None:  # fmt: skip
        self.name, self.backend = name, backend
        self.families = tuple(families) if families else None
        self.levels = tuple(levels) if levels else None
        check = getattr(backend, "check_subset", None)
        if check is not None:
            check(self.families, self.levels)
        if getattr(backend, "subset_tasks", None) is None:
            other = self.levels if backend.focus_by == "family" else self.families
            if other:
                raise ValueError(f"world {name}: {backend.name} draws training tasks by {backend.focus_by}, so a "
                                 f"world of it is a set of {backend.focus_by} values only")  # fmt: skip

    def training_tasks(self, n: int, seed: int) -> list[TaskInfo]:
        """n training tasks of the world (never held-out ones)."""
        sub = getattr(self.backend, "subset_tasks", None)
        if sub is not None:
            return sub(n, seed, self.families, self.levels)
        groups = self.families if self.backend.focus_by == "family" else self.levels
        return self.backend.training_tasks(n, seed, split=_even(n, groups) if groups else None)

    def heldout_tasks(self, per_cell: int | None = None) -> list[TaskInfo]:
        return [t for t in self.backend.heldout_tasks(per_cell) if self.contains(t)]

    def contains(self, t: TaskInfo) -> bool:
        return (self.families is None or t.family in self.families) and (self.levels is None or t.level in self.levels)

    def describe(self) -> dict[str, Any]:
        """What the world is, for records: env, families, levels (None: all)."""
        return {"env": self.backend.name, "families": list(self.families) if self.families else None,
                "levels": list(self.levels) if self.levels else None}  # fmt: skip


def check_world(env: str, env_tasks: Sequence[str] | None, families: Sequence[str] | None,
                levels: Sequence[int] | None) -> None:  # fmt: skip
    """Refuse a world its backend does not have, without starting the backend (no browser): the built-in backends
    check their families and levels; a plug-in's world is checked when the round draws its tasks."""
    if env not in env_names():
        raise ValueError(f"unknown environment {env!r}; expected one of {', '.join(env_names())}")
    if env == "sandbox":
        SandboxBackend().check_subset(families, levels)
    elif env == "miniwob":
        from training.envs_miniwob import MiniwobBackend

        MiniwobBackend(env_tasks).check_subset(families, levels)


def mixed_heldout(
    worlds: Sequence[World], per_cell: int | None, composed_per_cell: int = 2
) -> dict[str, list[TaskInfo]]:
    """The mixed held-out set of some worlds, by part: each world's held-out tasks (`per_cell` per family and level)
    and, when every world is a set of the sandbox's families (disjoint), "composed": tasks that need two worlds'
    skills in one episode (sandbox/mixed.py; `composed_per_cell` per composed family and level, at the levels all
    worlds share). Elsewhere (MiniWoB++, a sandbox world of levels only, a world of two environments) there is no
    composition, and the set is the worlds' held-out sets together."""
    out = {w.name: w.heldout_tasks(per_cell) for w in worlds}
    fams = [w.families for w in worlds]
    sandbox = all(w.backend.name == "sandbox" and f for w, f in zip(worlds, fams))
    if sandbox and composed_per_cell > 0 and len({x for f in fams for x in f}) == sum(len(f) for f in fams):  # type: ignore[arg-type]
        from sandbox.families import LEVELS
        from sandbox.heldout import mixed_tasks

        levels = [lv for lv in LEVELS if all(w.levels is None or lv in w.levels for w in worlds)]
        if levels:
            out["composed"] = [task_info(t) for t in mixed_tasks(fams, composed_per_cell, levels)]  # type: ignore[arg-type]
    return out


_BACKENDS: dict[tuple, EnvBackend] = {}
ENVS = ("sandbox", "miniwob")
#: Another installed package adds an environment backend with an entry point in this group: the name is the
#: `--env` value, the object a callable `(tasks: Sequence[str] | None) -> EnvBackend` (docs/training.md).
ENTRY_POINTS = "flywheel.envs"


def _plugins() -> dict[str, Any]:
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINTS) if ep.name not in ENVS}


def env_names() -> tuple[str, ...]:
    """The built-in backends, then every installed plug-in's."""
    return ENVS + tuple(sorted(_plugins()))


def env_backend(name: str = "sandbox", tasks: Sequence[str] | None = None) -> EnvBackend:
    """The backend `name`, shared within the process (a browser pool starts once); `tasks` picks MiniWoB++ tasks
    (or whatever a plug-in makes of them)."""
    key = (name, tuple(tasks or ()))
    if key not in _BACKENDS:
        if name == "sandbox":
            if tasks:
                raise ValueError("--tasks is for --env miniwob (the sandbox uses every family)")
            _BACKENDS[key] = SandboxBackend()
        elif name == "miniwob":
            from training.envs_miniwob import MiniwobBackend

            _BACKENDS[key] = MiniwobBackend(tasks)
        elif name in (plugins := _plugins()):
            _BACKENDS[key] = plugins[name].load()(list(tasks) if tasks else None)
        else:
            raise ValueError(f"unknown environment {name!r}; expected one of {', '.join(env_names())}")
    return _BACKENDS[key]


def close_backends() -> None:
    """Close every backend this process opened (browsers, proxies)."""
    while _BACKENDS:
        _BACKENDS.popitem()[1].close()
