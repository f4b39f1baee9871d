"""The multimodal policy: a small Qwen2-VL built from a config (random init, nothing downloaded), trained by the same
SFT and RL jobs as the text policy, on the environment's screenshots.

`VLM` wraps the Hugging Face model in what those jobs use from a model: `hidden` (last hidden states for token ids
with their screenshots), `get_output_embeddings` (the LM head), `sample` (batched generation with each token's
log-probability) and `vision` (its `training.vision.View`: the image size and coordinate convention). The jobs
ask for `vision` to tell a VLM from a text model, so the text policy's code paths are unchanged.

Images go through transformers' PIL image processor for Qwen2-VL (torchvision is not needed) with resizing off:
`View.fit` has already resized each screenshot to the model's size, the one resize the convention records.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from training.config import VLMConfig
from training.generate import Sample
from training.vision import CHAT_TEMPLATE, IMAGE_END, IMAGE_PAD, IMAGE_START, View, VisionPrompt

KIND = "vlm"


def image_processor(view: View, temporal_patch_size: int = 2) -> Any:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    n = view.width * view.height  # min = max = the model's image: a processor that resizes leaves it as it is
    return Qwen2VLImageProcessorPil(do_resize=False, patch_size=view.patch, merge_size=view.merge,
                                    temporal_patch_size=temporal_patch_size, min_pixels=n, max_pixels=n)  # fmt: skip


class VLM(nn.Module):
    """A Qwen2-VL conditional-generation model as the trainers and the rollout loop use a policy's model."""

    def __init__(self, hf: nn.Module, view: View) -> None:
        super().__init__()
        self.hf = hf
        self.vision = view
        self.processor = image_processor(view, hf.config.vision_config.temporal_patch_size)

    @property
    def config(self) -> Any:
        """The text decoder's config (hidden_size, num_hidden_layers, vocab_size), as a text model's config."""
        return self.hf.config.text_config

    def get_output_embeddings(self) -> nn.Module:
        return self.hf.lm_head

    def get_decoder(self) -> nn.Module:
        """The text decoder alone (a batch without screenshots)."""
        return self.hf.model.language_model

    def forward(self, input_ids: torch.Tensor, **kw: Any) -> Any:
        """Text only (no screenshot): what a precision measurement times."""
        return self.hf(input_ids=input_ids, **kw)

    def pixels(self, images: Sequence[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
        """Model-sized PNGs -> (pixel_values of all their patches, image_grid_thw per image)."""
        from PIL import Image

        ims = [Image.open(io.BytesIO(b)).convert("RGB") for b in images]
        for im in ims:
            if im.size != (self.vision.width, self.vision.height):
                raise ValueError(f"a {im.size[0]}x{im.size[1]} image given to a model that sees "
                                 f"{self.vision.width}x{self.vision.height} (View.fit resizes it)")  # fmt: skip
        out = self.processor(images=ims, return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    def _inputs(self, ids: torch.Tensor, images: Sequence[bytes]) -> dict[str, Any]:
        pv, grid = self.pixels(images)
        mm = (ids == self.hf.config.image_token_id).int()
        return {"input_ids": ids, "pixel_values": pv.to(ids.device), "image_grid_thw": grid.to(ids.device),
                "mm_token_type_ids": mm}  # fmt: skip

    def hidden(self, ids: torch.Tensor, images: Sequence[bytes]) -> torch.Tensor:
        """Last hidden states (B, T, H) of right-padded ids, one screenshot per row. No padding mask is needed: under
        the causal mask no real token attends to a pad, as in the text trainers."""
        return self.hf.model(**self._inputs(ids, images), use_cache=False).last_hidden_state

    @torch.no_grad()
    def sample(self, tokenizer: Any, prompts: Sequence[VisionPrompt], max_new_tokens: int, temperature: float,
               generator: torch.Generator | None) -> list[Sample]:  # fmt: skip
        """Continue every prompt (left-padded into one batch) with transformers' generate, sampling the model's own
        distribution at `temperature` (no top-k or top-p; 0 is greedy), and return each token's log-probability
        under that distribution, as the text sampler (training/generate.py) does. A seeded run draws its seed from
        `generator`, so it samples the same tokens again."""
        from transformers import GenerationConfig

        pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
        B, L = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((B, L), pad, dtype=torch.long)
        att = torch.zeros((B, L), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, L - len(p) :] = torch.tensor(p.ids, dtype=torch.long)
            att[i, L - len(p) :] = 1
        greedy = temperature <= 0
        gc = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=not greedy, temperature=None if greedy else temperature,
                              top_k=None, top_p=None, pad_token_id=pad, eos_token_id=eos, output_logits=True,
                              return_dict_in_generate=True)  # fmt: skip
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) if generator is not None else None
        was_training = self.training
        self.eval()
        try:
            with torch.random.fork_rng(devices=[]):
                if seed is not None:
                    torch.manual_seed(seed)
                out = self.hf.generate(**self._inputs(ids, [p.image for p in prompts]), attention_mask=att,
                                       generation_config=gc)  # fmt: skip
        finally:
            self.train(was_training)
        toks = out.sequences[:, L:]
        logits = torch.stack(out.logits, 1).float()
        logp = F.log_softmax(logits if greedy else logits / temperature, -1)
        lps = logp.gather(2, toks[:, :, None]).squeeze(2)
        samples = []
        for i in range(B):
            row = toks[i].tolist()
            k = row.index(eos) + 1 if eos in row else len(row)
            text = tokenizer.decode(row[: k - 1] if eos in row else row, skip_special_tokens=False)
            samples.append(Sample(row[:k], lps[i, :k].tolist(), text, eos in row))
        return samples

    def save_pretrained(self, path: str | Path) -> None:
        self.hf.save_pretrained(path)
        self.processor.save_pretrained(path)  # preprocessor_config.json, for servers and trainers outside


def add_image_tokens(tokenizer: Any) -> Any:
    """The image tokens and the chat template a VLM's tokenizer needs, added to a trained BPE (training.model)."""
    tokenizer.add_tokens([IMAGE_START, IMAGE_PAD, IMAGE_END], special_tokens=True)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_vlm(tokenizer: Any, cfg: VLMConfig = VLMConfig()) -> VLM:
    """A fresh Qwen2-VL from `cfg` (random init), sized to the tokenizer."""
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    view = View(cfg.image_width, cfg.image_height, cfg.coords, cfg.patch_size, cfg.merge_size)
    t = cfg.text
    half = (
        t.hidden_size // t.num_attention_heads // 2
    )  # M-RoPE splits the rotary frequencies over (time, height, width)
    section = [half - 2 * (half // 3), half // 3, half // 3]
    ids = tokenizer.convert_tokens_to_ids([IMAGE_START, IMAGE_PAD, IMAGE_END])
    mc = Qwen2VLConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=t.hidden_size, intermediate_size=t.intermediate_size,
                         num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
                         num_key_value_heads=t.num_attention_heads, max_position_embeddings=t.max_position_embeddings,
                         rope_parameters={"rope_type": "default", "mrope_section": section, "rope_theta": 10000.0},
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id),
        vision_config=dict(depth=cfg.vision_depth, embed_dim=cfg.vision_embed_dim, hidden_size=t.hidden_size,
                           num_heads=cfg.vision_heads, mlp_ratio=2, patch_size=cfg.patch_size,
                           spatial_merge_size=cfg.merge_size, temporal_patch_size=cfg.temporal_patch_size),
        image_token_id=ids[1], video_token_id=ids[1], vision_start_token_id=ids[0], vision_end_token_id=ids[2],
        tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(t.seed)
    return VLM(Qwen2VLForConditionalGeneration(mc), view)


def load_vlm(path: Path, meta: dict[str, Any]) -> VLM:
    """The VLM of a checkpoint folder whose flywheel_policy.json says kind "vlm" (its `vision` is the View)."""
    from transformers import Qwen2VLForConditionalGeneration

    if "vision" not in meta:
        raise ValueError(f"{path}: a VLM checkpoint without its coordinate convention (flywheel_policy.json 'vision')")
    hf = Qwen2VLForConditionalGeneration.from_pretrained(path, local_files_only=True, dtype=torch.float32)
    return VLM(hf, View.from_dict(meta["vision"]))
