"""The base model: grounding examples point at the element they name, a base build trains and saves a loadable
policy, and the shipped base (models/sandbox-base) really grounds on screens it never saw."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import torch

from schemas.actions import parse_action
from training.base import BASE_MODEL, Bank, BaseConfig, answer_accuracy, build_base, grounding_examples, screens
from training.config import OptimConfig
from training.data import encode_all
from training.model import Policy
from training.prompt import parse_answer

TINY_BASE = BaseConfig(
    model=replace(BaseConfig().model, vocab_size=700, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2),
    tasks=40, examples=600, test_tasks=10, test_examples=32, vocab_tasks=100, steps=60, batch_size=16, optim=OptimConfig(lr=3e-3, warmup_steps=5),
)  # fmt: skip


def test_a_grounding_example_clicks_the_centre_of_the_element_its_instruction_names() -> None:
    pool = screens(20, seed=5)
    assert len(pool) > 40 and any(hist for _, hist in pool)  # later steps keep their earlier actions
    for prompt, answer in grounding_examples(pool, 200, BaseConfig().prompt, seed=1):
        role, name = re.match(r'Instruction: Click the (\w+) "([^"]*)"\.', prompt).groups()
        thought, action = parse_answer(answer)
        a = parse_action(action)
        assert thought.startswith(f'{role} "{name}"') and thought.endswith(f"({a.x},{a.y})")
        assert thought in prompt.split("Observation:\n", 1)[1].splitlines()  # the screen's own line, copied


def test_a_bank_draws_batches_of_whole_examples_with_their_masks() -> None:
    tok = Policy.create(["abc def 12 34"] * 20, replace(TINY_BASE.model, vocab_size=300, max_number=50)).tokenizer
    items = encode_all(
        tok, [("Instruction: a\n", "Thought: b\nAction: wait()"), ("Instruction: a b c d e f\n", "Thought: x")]
    )
    bank = Bank(items, tok.pad_token_id, "cpu")
    b = bank.sample(32, torch.Generator().manual_seed(0))
    assert b.input_ids.shape[0] == 32 and b.input_ids.shape[1] == max(len(e.input_ids) for e in items)
    for row, att, m in zip(b.input_ids, b.attention_mask, b.loss_mask):
        e = next(
            e for e in items if row[: len(e.input_ids)].tolist() == e.input_ids and int(att.sum()) == len(e.input_ids)
        )
        assert m[: len(e.mask)].tolist() == [float(x) for x in e.mask] and not m[len(e.mask) :].any()


def test_build_base_trains_lowers_the_loss_and_saves_a_policy_that_loads(tmp_path) -> None:
    policy, meta = build_base(TINY_BASE, tmp_path / "base", log=lambda s: None)
    assert meta["kind"] == "base" and meta["steps"] == 60 and meta["loss_last"] < meta["loss_first"]
    loaded = Policy.load(tmp_path / "base")
    for a, b in zip(policy.model.state_dict().values(), loaded.model.state_dict().values()):
        assert torch.equal(a, b)
    assert json.loads((tmp_path / "base" / "flywheel_policy.json").read_text())["config"]["examples"] == 600
    again, _ = build_base(replace(TINY_BASE, steps=20), tmp_path / "more", log=lambda s: None, init=tmp_path / "base")
    assert again.tokenizer.get_vocab() == loaded.tokenizer.get_vocab()  # continuing keeps the tokenizer
    assert any(
        not torch.equal(a, b) for a, b in zip(again.model.state_dict().values(), loaded.model.state_dict().values())
    )


def test_the_shipped_base_grounds_on_screens_it_never_saw() -> None:
    """The artifact the demo starts from: every answer token right (line and click) on >= 90% of fresh screens."""
    policy = Policy.load(BASE_MODEL)
    meta = json.loads((BASE_MODEL / "flywheel_policy.json").read_text())
    assert meta["kind"] == "base" and meta["grounding_exact"] >= 0.9
    cfg = BaseConfig()
    test = grounding_examples(screens(60, seed=424_242), 160, cfg.prompt, seed=3)
    acc = answer_accuracy(policy.model, encode_all(policy.tokenizer, test, cfg.prompt), policy.tokenizer.pad_token_id)
    assert acc >= 0.9, acc
