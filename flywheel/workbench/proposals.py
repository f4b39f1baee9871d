"""The newest checkpoint's top proposals for one step: what the model would do, for the person to accept or fix.

The policy is the round's recorded checkpoint (`training.checkpoints.newest`, the output of the latest training
run in the lake), or the shipped base model when the lake has trained none yet. Proposals are the greedy answer
plus `samples` answers at temperature 1, through the same prompt and sampler as rollouts (training.prompt,
training.generate), so what the person judges is what the policy does. Distinct actions are kept, best first by
the sum of their tokens' log-probabilities.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from schemas.actions import ActionError, parse_action
from schemas.prompt import PromptConfig, Turn, parse_answer, render_prompt

BASE_MODEL = Path(__file__).resolve().parents[2] / "models" / "sandbox-base"


@dataclass(frozen=True)
class Proposed:
    """One proposal as the page draws it (the click point, the drag's end) and the session file stores it."""

    thought: str
    action: str
    model_version: str
    score: float  # sum of the answer's token log-probabilities
    x: int | None = None
    y: int | None = None
    x2: int | None = None
    y2: int | None = None


class Proposer:
    """Loads the policy once (on first use) and proposes for any state."""

    def __init__(self, lake, model: str | None = None, k: int = 3, samples: int = 4, seed: int = 0) -> None:  # noqa: ANN001
        self.lake, self.model_path, self.k, self.samples, self.seed = lake, model, k, samples, seed
        self._policy = None
        self._lock = threading.Lock()
        self.cfg = PromptConfig()

    def policy(self):  # noqa: ANN201 - training.model.Policy
        with self._lock:
            if self._policy is None:
                from training import checkpoints
                from training.model import Policy

                if self.model_path:
                    self._policy = Policy.load(self.model_path)
                else:
                    uri = checkpoints.newest(self.lake)
                    self._policy = (
                        checkpoints.fetch(self.lake, uri) if uri else Policy.load(BASE_MODEL, version="sandbox-base")
                    )
            return self._policy

    @property
    def version(self) -> str:
        return self.policy().version

    def propose(self, instruction: str, history: list[Turn], observation: str) -> list[Proposed]:
        import torch

        from training.generate import sample
        from training.prompt import encode_prompt

        p = self.policy()
        ids = encode_prompt(p.tokenizer, render_prompt(instruction, history, observation, self.cfg), self.cfg)
        gen = torch.Generator().manual_seed(self.seed + len(history))
        with self._lock:  # one forward pass at a time: the model is shared by every page
            outs = sample(p.model, p.tokenizer, [ids], 64, 0.0) + sample(
                p.model, p.tokenizer, [ids] * self.samples, 64, 1.0, gen
            )
        best: dict[str, Proposed] = {}
        for s in outs:
            parsed = parse_answer(s.text) if s.finished else None
            if parsed is None:
                continue
            thought, action = parsed
            try:
                a = parse_action(action)
            except ActionError:
                continue
            prop = Proposed(thought, action, p.version, round(sum(s.logprobs), 4), a.x, a.y, a.x2, a.y2)
            if action not in best or prop.score > best[action].score:
                best[action] = prop
        if not best:  # nothing readable: show the greedy answer as it is (a proposal not chosen need not parse)
            g = outs[0]
            return [Proposed("", g.text.strip() or "(no answer)", p.version, round(sum(g.logprobs), 4))]
        return sorted(best.values(), key=lambda q: -q.score)[: self.k]
