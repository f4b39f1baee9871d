"""A tiny vision-language model for external-trainer tests: LLaVA's architecture (a CLIP vision tower, a projector
and a Llama), random init from transformers configs, a BPE tokenizer trained here and CLIP's PIL image processor.

Why LLaVA and not Qwen2-VL: transformers' Qwen2VLProcessor requires a video processor, and video processors need
torchvision, whose PyPI wheels do not load with the CPU torch here ("operator torchvision::nms does not exist").
LlavaProcessor has only an image processor and a tokenizer, so `AutoProcessor` and TRL load the folder offline,
exactly as they load a real VLM checkpoint. The image is resized to `side` x `side` (aspect not kept).
"""

from __future__ import annotations

from pathlib import Path

SPECIAL = ["<|pad|>", "<|im_start|>", "<|im_end|>", "<image>"]
#: Chat template: the messages' text and image items in order (an image item becomes the processor's <image>).
TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<image>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tiny_vlm(out: Path, texts: list[str], vocab: int = 500, side: int = 56, seed: int = 0) -> Path:
    """Save a tiny LLaVA (model, tokenizer, processor, chat template) to `out`; ~0.2M parameters."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        PreTrainedTokenizerFast,
    )
    from transformers.models.clip.image_processing_pil_clip import CLIPImageProcessorPil

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(texts, trainer=trainer)
    t = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>")
    t.chat_template = TEMPLATE
    images = CLIPImageProcessorPil(size={"height": side, "width": side}, crop_size={"height": side, "width": side},
                                   do_center_crop=False)  # fmt: skip
    proc = LlavaProcessor(image_processor=images, tokenizer=t, patch_size=14, vision_feature_select_strategy="default",
                          chat_template=TEMPLATE, image_token="<image>", num_additional_image_tokens=1)  # fmt: skip
    torch.manual_seed(seed)
    cfg = LlavaConfig(
        vision_config=CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=side,
            patch_size=14,
        ),  # fmt: skip
        text_config=LlamaConfig(
            vocab_size=len(t),
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            eos_token_id=t.eos_token_id,
            pad_token_id=t.pad_token_id,
            bos_token_id=None,
        ),  # fmt: skip
        image_token_index=t.convert_tokens_to_ids("<image>"),
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    LlavaForConditionalGeneration(cfg).save_pretrained(out)
    proc.save_pretrained(out)
    return out
