"""An outcome reward model / LLM judge behind one interface, as in UI-TARS-2: it reads the task, the text history
(thoughts and actions) and the last 5 screenshots, and gives P(success); the validator passes at >= threshold.

Backends:
- `LocalJudge`: a local Hugging Face causal LM folder (transformers); the score is P("yes") / (P("yes") + P("no"))
  for the next token. A text-only model cannot see pixels, so it reads each of the last 5 steps' `observation`
  text (the compact screen description) where the screenshots would be.
- `OpenAIJudge`: any OpenAI-compatible /chat/completions endpoint (vLLM, TGI, llama.cpp server, ...); the last 5
  screenshots go in as image parts (data URLs), and the score comes from the top log-probabilities of the first
  answer token (or the answer text when the server gives none).
Choose with the `model` parameter in the routing policy: a folder, or an http(s) URL (+ `endpoint_model`).
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from validators.base import EpisodeBatch, Outcome, Validator
from validators.structural import default_reader

QUESTION = "Did the agent complete the task? Answer yes or no."


@dataclass(frozen=True)
class JudgePrompt:
    text: str
    screenshot_uris: tuple[str, ...] = ()
    observations: tuple[str, ...] = field(default=())


class JudgeError(RuntimeError):
    """The judge could not answer (endpoint down, bad response): routing stops and retries, nothing is misrouted."""


class JudgeBackend(Protocol):
    def score(self, prompts: list[JudgePrompt], images: list[list[bytes]]) -> list[float]:
        """P(success) in [0, 1] per prompt."""


def build_prompts(b: EpisodeBatch, last: int = 5) -> list[JudgePrompt]:
    """The judge's view of each episode: instruction, every step's thought and action, the final answer, and the
    last `last` screenshots (URIs) and observations."""
    rows = b.table.select(
        [c for c in ("instruction", "steps", "final_answer") if c in b.table.column_names]
    ).to_pylist()
    out = []
    for r in rows:
        steps = r.get("steps") or []
        lines = [f"Task: {r.get('instruction') or ''}"]
        for s in steps:
            thought = (s.get("thought") or "").strip()
            lines.append(
                f"Step {s.get('index')}: " + (f"Thought: {thought} " if thought else "") + f"Action: {s.get('action')}"
            )
        tail = steps[-last:]
        obs = tuple(s.get("observation") or "" for s in tail)
        for s, o in zip(tail, obs):
            if o:
                lines.append(f"Screen at step {s.get('index')}: {o}")
        if r.get("final_answer"):
            lines.append(f"Final answer: {r['final_answer']}")
        lines.append(QUESTION)
        lines.append("Answer:")
        uris = tuple(s.get("screenshot_uri") for s in tail if s.get("screenshot_uri"))
        out.append(JudgePrompt("\n".join(lines), uris, obs))
    return out


class LocalJudge:
    """A local causal LM (a folder loadable by transformers) scoring yes/no for the next token."""

    def __init__(self, path: str, max_length: int = 2048) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path).eval()
        self.max_length = max_length
        self.yes, self.no = self._token("yes"), self._token("no")

    def _token(self, word: str) -> int:
        for variant in (" " + word, word, " " + word.capitalize(), word.capitalize()):
            ids = self.tok.encode(variant, add_special_tokens=False)
            if ids:
                return ids[0]
        raise JudgeError(f"the judge's tokenizer cannot encode {word!r}")

    def score(self, prompts: list[JudgePrompt], images: list[list[bytes]]) -> list[float]:
        out = []
        with self.torch.no_grad():
            for p in prompts:
                ids = self.tok.encode(p.text, add_special_tokens=True)[-self.max_length :]
                logits = self.model(input_ids=self.torch.tensor([ids])).logits[0, -1]
                pair = self.torch.stack([logits[self.yes], logits[self.no]]).float()
                out.append(float(self.torch.softmax(pair, dim=0)[0]))
        return out


class OpenAIJudge:
    """An OpenAI-compatible chat endpoint: text history plus the last screenshots as image parts."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout_s: float = 60.0) -> None:
        self.url = base_url.rstrip("/") + (
            "" if base_url.rstrip("/").endswith("/chat/completions") else "/chat/completions"
        )
        self.model, self.api_key, self.timeout_s = model, api_key, timeout_s

    def request(self, prompt: JudgePrompt, images: list[bytes]) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"type": "text", "text": prompt.text}]
        for img in images:
            parts.append(
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(img).decode()}}
            )
        return {
            "model": self.model,
            "messages": [{"role": "user", "content": parts}],
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 10,
        }

    @staticmethod
    def parse(response: dict[str, Any]) -> float:
        try:
            choice = response["choices"][0]
        except (KeyError, IndexError, TypeError):
            raise JudgeError(f"unexpected judge response: {json.dumps(response)[:200]}") from None
        top = (((choice.get("logprobs") or {}).get("content") or [{}])[0] or {}).get("top_logprobs") or []
        p = {"yes": 0.0, "no": 0.0}
        for t in top:
            word = str(t.get("token", "")).strip().lower()
            if word in p:
                p[word] += math.exp(float(t.get("logprob", -math.inf)))
        if p["yes"] + p["no"] > 0:
            return p["yes"] / (p["yes"] + p["no"])
        text = str((choice.get("message") or {}).get("content") or "").strip().lower()
        return 1.0 if text.startswith("yes") else 0.0

    def score(self, prompts: list[JudgePrompt], images: list[list[bytes]]) -> list[float]:
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        out = []
        with httpx.Client(timeout=self.timeout_s) as client:
            for p, imgs in zip(prompts, images):
                try:
                    r = client.post(self.url, json=self.request(p, imgs), headers=headers)
                    r.raise_for_status()
                except httpx.HTTPError as e:
                    raise JudgeError(f"judge endpoint {self.url}: {e}") from e
                out.append(self.parse(r.json()))
        return out


def open_backend(model: str, endpoint_model: str | None = None, api_key: str | None = None) -> JudgeBackend:
    if model.startswith(("http://", "https://")):
        return OpenAIJudge(model, endpoint_model or "default", api_key)
    return LocalJudge(model)


class Judge(Validator):
    """P(success) from an outcome reward model or LLM judge; fails below `threshold`."""

    name = "judge"
    kind = "outcome"
    codes = ("judge_rejected",)
    defaults: dict[str, Any] = {"model": None, "endpoint_model": None, "threshold": 0.5, "last_screenshots": 5}

    def __init__(self, backend: JudgeBackend | None = None, **params: Any) -> None:
        super().__init__(**params)
        self._backend = backend
        if backend is None and not self.params["model"]:
            raise ValueError("validator judge needs a `model` (a local model folder or an OpenAI-compatible URL)")

    @property
    def backend(self) -> JudgeBackend:
        if self._backend is None:
            import os

            self._backend = open_backend(
                self.params["model"], self.params["endpoint_model"], os.environ.get("FLYWHEEL_JUDGE_API_KEY")
            )
        return self._backend

    def _check(self, b: EpisodeBatch) -> Outcome:
        prompts = build_prompts(b, self.params["last_screenshots"])
        images: list[list[bytes]] = [[] for _ in prompts]
        if isinstance(self.backend, OpenAIJudge):
            read = default_reader(self.context)
            images = [[read(u) for u in p.screenshot_uris] for p in prompts]
        scores = np.asarray(self.backend.score(prompts, images), dtype=float) if prompts else np.zeros(0)
        failed = scores < self.params["threshold"]
        details = pa.array([json.dumps({"p_success": round(float(s), 4)}) for s in scores], type=pa.string())
        return Outcome(failed, "judge_rejected", score=scores, details=details)
