"""`flywheel policy serve`: any project checkpoint (text or VLM) behind the OpenAI completions and chat completions
APIs, the APIs vLLM and SGLang serve.

Why: the round's acting stages can run against a URL (`RoundConfig.policy_url`, training/served.py). Serving our
own checkpoints behind the same API means the served path is exercised end to end here, on CPUs, with the same
client a team would point at its vLLM server, and that a round can act through a server and still get exactly the
in-process figures: a request's prompts are generated as one batch by the same sampler the rounds use.

Endpoints: GET /v1/models; POST /v1/completions (text models; prompt: a string, a list of strings, a list of token
ids or a list of such lists; max_tokens, temperature, seed, logprobs, return_tokens_as_token_ids; n = 1); POST
/v1/chat/completions (messages whose content is a string or text and image_url parts, the image a base64 PNG data
URL; a VLM takes exactly one screenshot per request, a text model none; the prompt is the messages' parts in order,
training.vision.CHAT_TEMPLATE; logprobs: true returns each generated token's log-probability; n = 1); POST
/flywheel/load {"checkpoint": URI} swaps in another checkpoint of the server's lake (only when started with one).
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from training.model import Policy
from training.served import FLYWHEEL_OWNER


class CompletionRequest(BaseModel):
    model: str
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int = Field(16, ge=1, le=4096)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = 1.0
    n: int = 1
    seed: int | None = None
    logprobs: int | None = None
    return_tokens_as_token_ids: bool = False
    skip_special_tokens: bool = True


class ChatRequest(BaseModel):
    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1, le=4096)
    max_completion_tokens: int | None = Field(None, ge=1, le=4096)
    temperature: float = Field(1.0, ge=0.0, le=10.0)
    top_p: float = 1.0
    n: int = 1
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=0)  # alternatives are not returned
    return_tokens_as_token_ids: bool = False
    skip_special_tokens: bool = True


class LoadRequest(BaseModel):
    checkpoint: str
    lake: str | None = None


@dataclass
class Served:
    """What the server holds: the policy, and the lake its checkpoints may be loaded from."""

    policy: Policy
    lake: Any = None  # storage.lake.Lake | None


def create_app(served: Served, max_batch: int = 256) -> FastAPI:
    import torch

    from training.generate import sample

    app = FastAPI(title="flywheel policy server", docs_url=None, redoc_url=None)
    lock = threading.Lock()  # one generation at a time: the model is shared

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": served.policy.version, "object": "model", "owned_by": FLYWHEEL_OWNER}],
        }

    def check(model: str, n: int, top_p: float) -> Policy:
        p = served.policy
        if model != p.version:
            raise HTTPException(404, f"the model {model!r} is not served here (this server serves {p.version})")
        if n != 1 or top_p != 1.0:
            raise HTTPException(400, "only n = 1 and top_p = 1 are supported")
        return p

    @app.post("/v1/completions")
    def completions(req: CompletionRequest) -> dict[str, Any]:
        p = check(req.model, req.n, req.top_p)
        if p.kind == "vlm":
            raise HTTPException(
                400, f"{p.version} is a vision-language model: send its screenshots to /v1/chat/completions"
            )
        prompts = _token_prompts(req.prompt, p.tokenizer)
        if not prompts or any(not ids for ids in prompts):
            raise HTTPException(400, "every prompt needs at least one token")
        if len(prompts) > max_batch:
            raise HTTPException(400, f"at most {max_batch} prompts per request")
        gen = torch.Generator().manual_seed(req.seed) if req.seed is not None else None
        with lock:
            outs = sample(p.model, p.tokenizer, prompts, req.max_tokens, req.temperature, gen, len(prompts))
        choices = []
        for i, s in enumerate(outs):
            lp = None
            if req.logprobs is not None:
                toks = ([f"token_id:{t}" for t in s.token_ids] if req.return_tokens_as_token_ids
                        else p.tokenizer.convert_ids_to_tokens(s.token_ids))  # fmt: skip
                lp = {"tokens": toks, "token_logprobs": s.logprobs, "top_logprobs": None, "text_offset": None}
            choices.append(
                {"index": i, "text": s.text, "logprobs": lp, "finish_reason": "stop" if s.finished else "length"}
            )
        n_prompt, n_out = sum(map(len, prompts)), sum(len(s.token_ids) for s in outs)
        return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": p.version, "choices": choices,
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}}  # fmt: skip

    @app.post("/v1/chat/completions")
    def chat(req: ChatRequest) -> dict[str, Any]:
        p = check(req.model, req.n, req.top_p)
        try:
            prompt = _chat_prompt(p, req.messages)
        except ValueError as e:
            raise HTTPException(400, str(e)) from None
        gen = torch.Generator().manual_seed(req.seed) if req.seed is not None else None
        with lock:
            s = sample(p.model, p.tokenizer, [prompt], req.max_completion_tokens or req.max_tokens or 16,
                       req.temperature, gen, 1)[0]  # fmt: skip
        lp = None
        if req.logprobs:
            toks = ([f"token_id:{t}" for t in s.token_ids] if req.return_tokens_as_token_ids
                    else p.tokenizer.convert_ids_to_tokens(s.token_ids))  # fmt: skip
            lp = {"content": [{"token": t, "logprob": x, "bytes": list(t.encode()), "top_logprobs": []}
                              for t, x in zip(toks, s.logprobs)]}  # fmt: skip
        text = s.text if not req.skip_special_tokens else p.tokenizer.decode(s.token_ids, skip_special_tokens=True)
        n_prompt, n_out = len(prompt), len(s.token_ids)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": p.version, "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                 "logprobs": lp, "finish_reason": "stop" if s.finished else "length"}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}}  # fmt: skip

    @app.post("/flywheel/load")
    def load(req: LoadRequest) -> dict[str, Any]:
        from training.checkpoints import fetch

        if served.lake is None:
            raise HTTPException(409, "this server was started on a model folder, not a lake: it cannot load others")
        if req.lake is not None and not _same_lake(req.lake, served.lake):
            raise HTTPException(409, f"this server loads checkpoints of {served.lake.uri}, not of {req.lake}")
        try:
            policy = fetch(served.lake, req.checkpoint)
        except Exception as e:
            raise HTTPException(400, f"cannot load {req.checkpoint}: {type(e).__name__}: {e}") from e
        with lock:
            served.policy = policy
        return {"id": policy.version}

    return app


def _chat_prompt(policy: Policy, messages: list[dict[str, Any]]) -> Any:
    """The messages as the policy's prompt (training.vision.CHAT_TEMPLATE): token ids for a text model, a
    VisionPrompt over the one screenshot for a VLM."""
    from training.vision import IMAGE_PAD, VisionPrompt, chat_prompt, data_url_bytes, encode_vision_text

    text, urls = chat_prompt(messages)
    if policy.kind != "vlm":
        if urls:
            raise ValueError(f"{policy.version} reads text only: send no image_url parts")
        ids = policy.tokenizer.encode(text, add_special_tokens=False)
        if not ids:
            raise ValueError("the messages hold no text")
        return ids
    if len(urls) != 1:
        raise ValueError(f"{policy.version} acts on one screenshot per request, not {len(urls)}")
    view = policy.model.vision
    try:
        image, screen = view.fit(data_url_bytes(urls[0]))
    except OSError as e:  # PIL: not an image it can read
        raise ValueError(f"the image_url is not a readable image ({type(e).__name__})") from None
    ids = encode_vision_text(policy.tokenizer, view, text)
    if ids.count(policy.tokenizer.convert_tokens_to_ids(IMAGE_PAD)) != view.tokens:
        raise ValueError(f"the text parts hold image tokens ({IMAGE_PAD}): only image_url parts may")
    return VisionPrompt(tuple(ids), image, text, screen)


def _token_prompts(prompt: Any, tokenizer: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        return [tokenizer.encode(prompt, add_special_tokens=False)]
    if prompt and all(isinstance(x, int) for x in prompt):
        return [list(prompt)]
    return [tokenizer.encode(x, add_special_tokens=False) if isinstance(x, str) else list(x) for x in prompt]


def _same_lake(uri: str, lake: Any) -> bool:
    from storage.lake import Lake

    try:
        return str(Lake.open(uri).uri) == str(lake.uri)
    except Exception:  # noqa: BLE001 - not a lake at all: not the same one
        return False
