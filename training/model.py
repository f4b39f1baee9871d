"""The policy: a Hugging Face causal LM plus a value head (the PPO critic), and its locally trained tokenizer.

The default model is a small Llama built from a config (no downloaded weights), small enough to train on a CPU;
`ModelConfig.pretrained` (any local save_pretrained folder) replaces it. The tokenizer is a byte-level BPE trained
with the `tokenizers` library on the sandbox's own text, saved as a PreTrainedTokenizerFast, so everything works
offline.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from training.config import ModelConfig, VLMConfig, to_dict

EOS = "<|end|>"
PAD = "<|pad|>"
BOS = "<|bos|>"
VALUE_HEAD = "value_head.pt"
POLICY_META = "flywheel_policy.json"


def _quiet() -> None:
    """No per-shard progress bars or advisory warnings from transformers inside our own progress display."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


def train_tokenizer(texts: Iterable[str], cfg: ModelConfig = ModelConfig()):  # noqa: ANN201
    """Train a byte-level BPE on `texts` and return a PreTrainedTokenizerFast.

    Digit runs are split off before byte-level splitting, so a number is always its own pre-token (never glued
    to a preceding space); every number up to `cfg.max_number` is added to the corpus often enough to become one
    token. Byte-level means any unicode text encodes without unknown tokens.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d+"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    numbers = " ".join(str(i) for i in range(cfg.max_number + 1))

    def corpus() -> Iterable[str]:
        for _ in range(40):  # frequent enough that every number gets merged before rarer word pieces
            yield numbers
        yield from texts

    tok.train_from_iterator(corpus(), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, bos_token=BOS)


def build_model(tokenizer, cfg: ModelConfig = ModelConfig()):  # noqa: ANN001, ANN201
    """A fresh LlamaForCausalLM from `cfg`, sized to the tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(cfg.seed)
    mc = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_attention_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    return LlamaForCausalLM(mc)


def value_head(hidden: int, seed: int = 0) -> nn.Module:
    """The critic: a small MLP on the LM's (detached) last hidden state, so critic updates never move the policy.

    The output layer starts at zero: an untrained critic predicts 0, and value pretraining fits it first.
    """
    torch.manual_seed(seed + 1)
    head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))
    nn.init.zeros_(head[2].weight)
    nn.init.zeros_(head[2].bias)
    return head


@dataclass
class Policy:
    """A causal LM, its tokenizer and a value head on the last hidden state (the critic)."""

    model: nn.Module
    tokenizer: object
    value_head: nn.Module
    version: str = "init"  # the checkpoint id this policy was loaded from ("init" for a fresh one)
    uri: str | None = None  # the object-store URI of that checkpoint

    @classmethod
    def create(cls, texts: Iterable[str], cfg: ModelConfig | VLMConfig = ModelConfig()) -> Policy:
        """A fresh policy: tokenizer trained on `texts`, model from the config (or `cfg.pretrained`); a VLMConfig
        builds the vision-language policy (training/vlm.py) with the image tokens added to that tokenizer."""
        if isinstance(cfg, VLMConfig):
            from training.vlm import add_image_tokens, build_vlm

            tok = add_image_tokens(train_tokenizer(texts, cfg.text))
            return cls(build_vlm(tok, cfg), tok, value_head(cfg.text.hidden_size, cfg.text.seed), "init")
        if cfg.pretrained:
            return cls.load(cfg.pretrained)
        tok = train_tokenizer(texts, cfg)
        model = build_model(tok, cfg)
        return cls(model, tok, value_head(model.config.hidden_size, cfg.seed), "init")

    @property
    def kind(self) -> str:
        """The kind of policy: "vlm" (a vision-language model, training/vlm.py: it acts on screenshots) or "text"."""
        return "vlm" if getattr(self.model, "vision", None) is not None else "text"

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def parameters(self) -> list[nn.Parameter]:
        return list(self.model.parameters()) + list(self.value_head.parameters())

    def save(self, path: str | Path, meta: dict | None = None) -> Path:
        """save_pretrained for the model and tokenizer, plus the value head and a small metadata file."""
        _quiet()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        torch.save(self.value_head.state_dict(), path / VALUE_HEAD)
        kind = {"kind": "vlm", "vision": self.model.vision.as_dict()} if self.kind == "vlm" else {}
        (path / POLICY_META).write_text(json.dumps({"parent": self.version, **kind, **(meta or {})}, sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | Path, version: str | None = None) -> Policy:
        """Load any save_pretrained folder; a missing value head (an external model) starts at zero. A folder whose
        flywheel_policy.json says kind "vlm" loads as the vision-language policy (training/vlm.py)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        _quiet()
        path = Path(path)
        if not (path / "config.json").is_file():
            raise ValueError(f"{path} is not a model folder (no config.json)")
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        meta = json.loads((path / POLICY_META).read_text()) if (path / POLICY_META).is_file() else {}
        if meta.get("kind") == "vlm":
            from training.vlm import load_vlm

            model = load_vlm(path, meta)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=torch.float32)
        vh = value_head(model.config.hidden_size)
        if (path / VALUE_HEAD).is_file():
            vh.load_state_dict(torch.load(path / VALUE_HEAD, weights_only=True))
        return cls(model, tok, vh, version or path.name)


def model_summary(policy: Policy) -> dict:
    c = policy.model.config
    return {
        "arch": type(policy.model).__name__,
        "params": policy.n_params,
        "vocab": len(policy.tokenizer),
        "hidden": c.hidden_size,
        "layers": c.num_hidden_layers,
    }


__all__ = ["Policy", "train_tokenizer", "build_model", "model_summary", "EOS", "PAD", "to_dict"]
