"""The policy's prior over a screen's actions: how likely the policy finds each action the screen offers.

Breadth-first search with the outcome alone cannot reach tasks whose shortest solution is long and whose screens
offer many actions (a level-4 form: 10 actions from about 16 per state, and typing appends, so every typed value is
a new state). The learner's own policy already puts most of its probability on a few sensible actions, so a search
that expands the states the policy finds likely first reaches much deeper for the same work: the apprentice guides
the expert's search, as in expert iteration (Anthony et al. 2017) and AlphaZero. The prior is the policy's
probability of each candidate's whole answer (the thought the prompt format writes for it, the action, EOS),
renormalised over the candidates; the prompt is run once and its cache shared by every candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from schemas.prompt import PromptConfig, Turn, render_answer, render_prompt
from training.prompt import encode_examples


class ActionPrior:
    """log p(action | state) under a text policy, renormalised over the given actions (one forward of the prompt,
    one batched forward of the answers on its cache)."""

    def __init__(self, model, tokenizer, prompt_cfg: PromptConfig = PromptConfig()) -> None:  # noqa: ANN001
        self.model, self.tokenizer, self.cfg = model, tokenizer, prompt_cfg
        self.calls = 0

    @torch.no_grad()
    def __call__(
        self, instruction: str, history: Sequence[Turn], observation: str, actions: Sequence[str]
    ) -> list[float]:
        if not actions:
            return []
        self.calls += 1
        prompt = render_prompt(instruction, history, observation, self.cfg)
        answers = [render_answer("", a, self.cfg, observation, instruction) for a in actions]
        enc = encode_examples(self.tokenizer, [(prompt, a) for a in answers], self.cfg)
        n = enc[0].mask.index(1)
        sufs = [e.input_ids[n:] for e in enc]
        self.model.eval()
        out = self.model(input_ids=torch.tensor([enc[0].input_ids[:n]]), use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(len(sufs))
        T = max(map(len, sufs))
        ids = torch.full((len(sufs), T), self.tokenizer.pad_token_id, dtype=torch.long)
        for i, s in enumerate(sufs):
            ids[i, : len(s)] = torch.tensor(s)
        # right-padded answers after a shared prompt: under the causal mask no real token attends to a pad
        logits = self.model(input_ids=ids, cache=cache, use_cache=False).logits.float()
        first = torch.log_softmax(out.logits[0, -1].float(), -1)[ids[:, 0]]
        rest = torch.log_softmax(logits[:, :-1], -1).gather(2, ids[:, 1:, None])[..., 0]
        keep = torch.arange(T - 1)[None, :] < torch.tensor([len(s) - 1 for s in sufs])[:, None]
        scores = first + (rest * keep).sum(1)
        return torch.log_softmax(scores, 0).tolist()
