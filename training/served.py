"""A policy served behind an OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp, TGI, or `flywheel policy serve`),
usable wherever the round's acting stages and RL's rollouts use a local model.

Why: a team serving its model with vLLM on GPUs must be able to run the flywheel's sampling, annotation proposals
and evaluation against that server instead of loading the weights into the round's process. The client sends the
prompts as token ids (`prompt` may be a list of id lists in the completions API), so the server sees exactly the
tokens the local policy would, and asks for each generated token's log-probability (stored for RL) and its id
(vLLM's `return_tokens_as_token_ids`: ids come back as `token_id:N`; other servers' token strings are re-encoded).

A vision-language policy (training/vlm.py) goes through `/v1/chat/completions` instead, one request per prompt (a
chat request holds one conversation; the requests go out together and the server batches them): the prompt's text
and its screenshot, resized to the model's image as the policy sees it (training/vision.py), as the parts of one
user message, `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}`, with `logprobs: true,
top_logprobs: 0` for each generated token's log-probability. The checkpoint's chat template puts the parts together
in order and adds nothing, so the server sees the tokens the policy was trained on.

`ServedModel` stands where a torch model stands in `training.generate.sample`: `sample(model, ...)` hands the call to
`ServedModel.complete` when given one, so the rollout loop, rejection sampling, annotation and evaluation need no
second code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from training.generate import Sample
from training.vision import View, chat_content

#: Our own server (`flywheel policy serve`) says so in /v1/models, and can then be asked to load a checkpoint.
FLYWHEEL_OWNER = "flywheel"


class ServedModelError(RuntimeError):
    """The endpoint did not answer, answered an error, or serves another model than the stage needs."""


@dataclass
class ServedModel:
    """Client of one model at an OpenAI-compatible endpoint (`url` up to, not including, `/v1`)."""

    url: str
    model: str
    tokenizer: Any
    timeout_s: float = 300.0
    api_key: str | None = None
    vision: View | None = None  # a VLM's view: prompts carry screenshots and go to the chat endpoint
    max_concurrent: int = 16  # chat requests in flight at once
    _client: httpx.Client | None = field(default=None, repr=False)

    def client(self) -> httpx.Client:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._client = httpx.Client(base_url=self.url.rstrip("/"), timeout=self.timeout_s, headers=headers)
        return self._client

    def complete(
        self, prompts: Sequence[Sequence[int]], max_new_tokens: int, temperature: float, seed: int | None
    ) -> list[Sample]:
        """One completions request for every prompt (the server batches them), or for a VLM one chat request per
        prompt (training.vision.VisionPrompt); EOS ends a completion."""
        if self.vision is not None:
            return self._chat(prompts, max_new_tokens, temperature, seed)  # type: ignore[arg-type]
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [list(map(int, p)) for p in prompts],
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "logprobs": 0,  # the chosen token's log-probability, no alternatives
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "top_p": 1.0,
        }
        if seed is not None:
            body["seed"] = seed
        data = _post(self.client(), "/v1/completions", body)
        choices = sorted(data.get("choices") or [], key=lambda c: c.get("index", 0))
        if len(choices) != len(prompts):
            raise ServedModelError(f"{self.url}: {len(choices)} completions for {len(prompts)} prompts")
        return [self._sample(c) for c in choices]

    def _chat(self, prompts: Sequence[Any], max_new_tokens: int, temperature: float, seed: int | None) -> list[Sample]:
        """One chat request per prompt, sent together; prompt k is seeded with seed + k."""

        def body(k: int, p: Any) -> dict[str, Any]:
            b: dict[str, Any] = {
                "model": self.model,
                "messages": [{"role": "user", "content": chat_content(p)}],
                "max_tokens": max_new_tokens,
                "temperature": temperature,
                "logprobs": True,  # the chosen token's log-probability, no alternatives
                "top_logprobs": 0,
                "return_tokens_as_token_ids": True,
                "skip_special_tokens": False,
                "top_p": 1.0,
            }
            return b | ({"seed": seed + k} if seed is not None else {})

        bodies = [body(k, p) for k, p in enumerate(prompts)]
        client = self.client()
        with ThreadPoolExecutor(max(1, min(self.max_concurrent, len(bodies)))) as ex:
            answers = list(ex.map(lambda b: _post(client, "/v1/chat/completions", b), bodies))
        out = []
        for data in answers:
            choices = data.get("choices") or []
            if len(choices) != 1:
                raise ServedModelError(f"{self.url}: {len(choices)} chat choices for one conversation")
            c = choices[0]
            content = (c.get("logprobs") or {}).get("content") or []
            out.append(self._sample({"text": (c.get("message") or {}).get("content") or "",
                                     "finish_reason": c.get("finish_reason"),
                                     "logprobs": {"tokens": [t.get("token") for t in content],
                                                  "token_logprobs": [t.get("logprob") for t in content]}}))  # fmt: skip
        return out

    def _sample(self, choice: dict[str, Any]) -> Sample:
        """A completions choice (or a chat choice in its shape) as the local sampler's Sample."""
        eos = self.tokenizer.eos_token_id
        lp = choice.get("logprobs") or {}
        tokens, logprobs = lp.get("tokens") or [], [float(x) for x in lp.get("token_logprobs") or []]
        ids = [_token_id(t, self.tokenizer) for t in tokens]
        text = choice.get("text") or ""
        finished = choice.get("finish_reason") == "stop"
        if ids and ids[-1] == eos:
            text = self.tokenizer.decode(ids[:-1], skip_special_tokens=False)
        elif finished:  # a server that strips the stop token: put EOS back, as the local sampler records it
            ids, logprobs = ids + [eos], logprobs + [0.0]
        return Sample(ids, logprobs, text, finished)

    def models(self) -> list[dict[str, Any]]:
        return list(_get(self.client(), "/v1/models").get("data") or [])


def _token_id(token: str, tokenizer: Any) -> int:
    if token.startswith("token_id:"):
        return int(token.split(":", 1)[1])
    ids = tokenizer.convert_tokens_to_ids(token)
    return int(ids if isinstance(ids, int) else ids[0])


def _post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    return _answer(client, "POST", path, body)


def _get(client: httpx.Client, path: str) -> dict[str, Any]:
    return _answer(client, "GET", path, None)


def _answer(client: httpx.Client, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
    url = f"{client.base_url}{path}"
    try:
        r = client.request(method, path, json=body)
    except httpx.HTTPError as e:
        raise ServedModelError(f"the policy server at {url} did not answer ({type(e).__name__}: {e})") from e
    if r.status_code >= 400:
        raise ServedModelError(f"the policy server at {url} answered {r.status_code}: {r.text[:300]}")
    try:
        return r.json()
    except ValueError as e:
        raise ServedModelError(f"the policy server at {url} answered something that is not JSON") from e


def served(url: str, policy: Any, checkpoint: str | None = None, lake_uri: str | None = None,
           api_key: str | None = None) -> Any:  # fmt: skip
    """`policy` (a local Policy: its tokenizer and version are used, never its weights) acting through the server
    at `url`, which must serve that checkpoint: the model id in /v1/models must be the policy's version. A flywheel
    server serving another checkpoint is asked to load this one (`checkpoint`, a URI of the lake at `lake_uri`);
    any other server that does not list it is an error naming what it serves."""
    from dataclasses import replace

    m = ServedModel(
        url, policy.version, policy.tokenizer, api_key=api_key, vision=getattr(policy.model, "vision", None)
    )
    listed = m.models()
    if not any(d.get("id") == policy.version for d in listed):
        ours = any(d.get("owned_by") == FLYWHEEL_OWNER for d in listed)
        if not (ours and checkpoint and lake_uri):
            have = ", ".join(str(d.get("id")) for d in listed) or "nothing"
            raise ServedModelError(
                f"the policy server at {url} serves {have}, not {policy.version}, the checkpoint this stage acts "
                "with: serve that checkpoint there (or unset policy_url to act in-process)"
            )
        _post(m.client(), "/flywheel/load", {"lake": lake_uri, "checkpoint": checkpoint})
    return replace(policy, model=m)
