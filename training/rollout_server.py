"""RL's rollouts through a policy server while the learner trains here (training/rl.py).

Why: a team generates its rollouts with vLLM or SGLang on inference GPUs and trains elsewhere. Here the learner
updates the weights in its own process; every `sync_every` iterations it publishes them as a checkpoint of the lake
and asks the server (`flywheel policy serve --lake`, training/policy_server.py) to load that checkpoint (POST
/flywheel/load), then acts through it (training/served.py). Each trajectory records the checkpoint that wrote it
(`policy_version`) and the learner's update count at that checkpoint (`policy_step`), so RL's staleness check
(training.practice.drop_stale, RLConfig.max_lag) drops episodes that are too old, as it would for replayed ones.
With sync_every = 1 every iteration acts with the weights it updates (on-policy); larger values let the server run
behind the learner, and the episodes' age says by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from training.model import Policy


@dataclass(frozen=True)
class RolloutServer:
    """Where RL's rollouts are generated: a flywheel policy server started on the job's lake."""

    url: str
    sync_every: int = 1  # publish the learner's weights and load them there every this many iterations
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.sync_every < 1:
            raise ValueError(f"sync_every must be at least 1, not {self.sync_every}")

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "sync_every": self.sync_every}  # no key: it is a secret


@dataclass
class ServedActor:
    """The served policy RL acts with, re-synced to the learner's weights every `server.sync_every` iterations."""

    lake: Any  # storage.lake.Lake
    server: RolloutServer
    round: int = 0
    published: list[str] = field(default_factory=list)  # the checkpoint of every policy version served
    _actor: Policy | None = None
    _step: int = 0

    @property
    def version(self) -> str | None:
        """The checkpoint id the server acts with now (None before the first sync)."""
        return self._actor.version if self._actor is not None else None

    def at(self, policy: Policy, it: int) -> tuple[Policy, int]:
        """(the served policy to roll out with at iteration `it`, the iteration its weights are from)."""
        from training.checkpoints import publish, version_of
        from training.served import served

        if self._actor is None or it - self._step >= self.server.sync_every:
            uri = publish(self.lake, policy, {"stage": "rl-rollout", "round": self.round, "iteration": it})
            local = replace(policy, version=version_of(uri), uri=uri)
            self._actor = served(self.server.url, local, uri, str(self.lake.uri), self.server.api_key)
            self._step = it
            self.published.append(uri)
        return self._actor, self._step
