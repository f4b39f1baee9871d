"""The prompt, the agent mask, and that masked losses ignore observation tokens."""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.prompt import PromptConfig
from tests.training.fakes import expert_episode
from training.data import BUCKET_WINDOW, PAD_MULTIPLE, batches, collate, encode_all, episode_examples, masked_nll
from training.prompt import Encoded, Turn, encode_example, parse_answer, render_answer, render_prompt


def test_prompt_shows_instruction_last_n_steps_in_full_and_observation() -> None:
    cfg = PromptConfig(history_full=1, history_thought_words=3)
    hist = [
        Turn("screen one", "I look first at things", "wait()"),
        Turn("screen two", "then I click", "click(point='<point>1 2</point>')"),
    ]
    p = render_prompt("Do it", hist, "screen three", cfg)
    assert p.startswith("Instruction: Do it\n")
    assert "screen one" not in p  # older step: thought and action only
    assert "Step 1: Thought: I look first Action: wait()" in p
    assert "Step 2 observation:\nscreen two" in p  # the last N=1 step in full
    assert p.endswith("Observation:\nscreen three\n")


def test_answer_round_trip() -> None:
    a = render_answer("I press OK.", "click(point='<point>3 4</point>')")
    assert a == "Thought: I press OK.\nAction: click(point='<point>3 4</point>')"
    assert parse_answer(a) == ("I press OK.", "click(point='<point>3 4</point>')")
    assert parse_answer("click(point='<point>3 4</point>')") is None


def test_mask_marks_exactly_the_agent_tokens(tiny_policy) -> None:
    tok = tiny_policy.tokenizer
    ex = episode_examples(expert_episode(3).to_row())[0]
    enc = encode_example(tok, *ex)
    agent = [t for t, m in zip(enc.input_ids, enc.mask) if m]
    assert tok.decode(agent[:-1]) == ex[1] and agent[-1] == tok.eos_token_id
    assert tok.decode([t for t, m in zip(enc.input_ids, enc.mask) if not m]) == ex[0]


def test_prompt_truncation_keeps_the_instruction(tiny_policy) -> None:
    tok = tiny_policy.tokenizer
    cfg = PromptConfig(max_prompt_tokens=40)
    long_obs = "\n".join(f'button "B{i}" at ({i}, {i})' for i in range(60))
    enc = encode_example(tok, render_prompt("Click B7", [], long_obs, cfg), "Thought: x\nAction: wait()", cfg)
    prompt_ids = [t for t, m in zip(enc.input_ids, enc.mask) if not m]
    assert len(prompt_ids) <= 40 and tok.decode(prompt_ids).startswith("Instruction: Click B7\n")


def test_masked_loss_is_the_mean_over_agent_tokens_only(tiny_policy) -> None:
    tok, model = tiny_policy.tokenizer, tiny_policy.model
    items = encode_all(tok, [x for s in range(4) for x in episode_examples(expert_episode(s, 2).to_row())])
    batch = collate(items, tok.pad_token_id)
    with torch.no_grad():
        loss = masked_nll(model, batch)
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
        nll = F.cross_entropy(logits.transpose(1, 2), batch.input_ids[:, 1:], reduction="none")
    agent = batch.loss_mask[:, 1:] > 0
    real = batch.attention_mask[:, 1:] > 0
    assert torch.allclose(loss, nll[agent].mean(), atol=1e-5)
    assert (real & ~agent).sum() > 3 * agent.sum()  # observation tokens are most of the sequence
    # CT's mask (every real token) gives the all-token mean instead
    ct = collate(items, tok.pad_token_id, all_tokens=True)
    with torch.no_grad():
        assert torch.allclose(masked_nll(model, ct), nll[real].mean(), atol=1e-5)


def test_gradient_ignores_observation_targets(tiny_policy) -> None:
    """Changing the observation tokens' *targets* (not their context) leaves the SFT loss unchanged."""
    tok, model = tiny_policy.tokenizer, tiny_policy.model
    items = encode_all(tok, episode_examples(expert_episode(5).to_row()))
    b = collate(items, tok.pad_token_id)
    with torch.no_grad():
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits[:, :-1]
    targets = b.input_ids[:, 1:].clone()
    agent = b.loss_mask[:, 1:] > 0
    scrambled = torch.where(agent, targets, (targets + 7) % len(tok))
    m = b.loss_mask[:, 1:]
    a = (F.cross_entropy(out.transpose(1, 2), targets, reduction="none") * m).sum() / m.sum()
    c = (F.cross_entropy(out.transpose(1, 2), scrambled, reduction="none") * m).sum() / m.sum()
    assert torch.allclose(a, c) and torch.allclose(a, masked_nll(model, b).detach(), atol=1e-5)


def test_target_thought_names_the_element_the_action_points_at() -> None:
    from training.prompt import target_thought

    obs = 'window "W" 640x400\nbutton "Save log" (56,84)\ncheckbox "GPS" checked (350,48)\nstatus "Ready"'
    assert target_thought("click(point='<point>350 48</point>')", obs) == 'checkbox "GPS"'
    assert target_thought("click(point='<point>1 1</point>')", obs) is None  # nothing listed there
    assert target_thought("type(content='x')", obs) is None
    cfg = PromptConfig(thought_style="target")
    assert render_answer("I press it", "click(point='<point>56 84</point>')", cfg, obs).startswith(
        'Thought: button "Save log"\n'
    )
    assert render_answer("Typing x.", "type(content='x')", cfg, obs).startswith("Thought: Typing x.\n")  # falls back
    line = PromptConfig(thought_style="line", max_thought_words=2)  # the line is never clipped: it ends with the centre
    assert render_answer("I tick it", "click(point='<point>350 48</point>')", line, obs) == (
        "Thought: checkbox \"GPS\" checked (350,48)\nAction: click(point='<point>350 48</point>')"
    )
    assert (
        render_answer("Typing x now.", "type(content='x')", line, obs) == "Thought: Typing x\nAction: type(content='x')"
    )


def test_line_style_quotes_the_instruction_span_a_typed_text_comes_from() -> None:
    from training.prompt import typed_span

    obs = 'window "W" 640x400\ntextbox "Email" value="" focused (216,48)\ntextbox "City" value="" (528,48)'
    ins = "Fill in the form with City 'Quito' and Email 'omar.moreau@example.com', then click 'Send'."
    typed = "type(content='omar.moreau@example.com')"
    assert typed_span(typed, obs, ins) == "Email 'omar.moreau@example.com'"  # the focused field's pair, not the first
    assert typed_span("type(content='Quito')", obs, ins) is None  # not what the focused field asks for
    assert typed_span(typed, obs.replace(" focused", ""), ins) is None  # no focused field
    line = PromptConfig(thought_style="line")
    assert (
        render_answer("I type it.", typed, line, obs, ins)
        == f"Thought: Email 'omar.moreau@example.com'\nAction: {typed}"
    )
    assert render_answer("I type it.", typed, PromptConfig(), obs, ins).startswith(
        "Thought: I type it."
    )  # expert style


def test_line_style_names_the_focused_field_for_miniwob_texts() -> None:
    """MiniWoB++ quotes a text in double quotes or not at all; the thought takes the sandbox's one shape."""
    from training.prompt import typed_span

    obs = 'window "login-user" 160x210\ntextbox "username" value="olin" (71,88)\ntextbox "password" focused (61,140)'
    ins = 'Enter the username "olin" and the password "2Uw" into the text fields and press login.'
    assert typed_span("type(content='2Uw')", obs, ins) == "password '2Uw'"
    assert typed_span("type(content='zz9')", obs, ins) is None  # a text the instruction does not ask for
    drop = 'window "choose-list" 160x210\ndropdown "options" value="Marjory" focused (77,66)'
    assert typed_span(
        "type(content='American Samoa')", drop, "Select American Samoa from the list and click Submit."
    ) == ("options 'American Samoa'")


def test_line_style_quotes_the_screen_line_an_answer_is_read_from() -> None:
    from training.prompt import answer_line

    obs = 'window "Billing" 640x400\ntext "Customer" value="Alice Kowalski" (102,72)\ntext "Total" value="$17.20" (368,72)'
    done = "finished(content='$17.20')"
    assert answer_line(done, obs) == 'text "Total" value="$17.20" (368,72)'
    assert answer_line("finished(content='Alice')", obs) is None  # only a whole quoted value counts
    assert answer_line("click(point='<point>368 72</point>')", obs) is None
    line = PromptConfig(thought_style="line", max_thought_words=2)
    assert (
        render_answer("The total reads $17.20.", done, line, obs)
        == f'Thought: text "Total" value="$17.20" (368,72)\nAction: {done}'
    )
    assert (
        render_answer("The total reads $17.20.", done, PromptConfig(max_thought_words=3), obs)
        == f"Thought: The total reads\nAction: {done}"
    )


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 60), min_size=1, max_size=300),
    batch_size=st.integers(1, 16),
    seed=st.integers(0, 10),
)
def test_batches_visit_every_example_once_per_window_and_bucket_by_length(lengths, batch_size, seed) -> None:
    """Bucketing must not drop or repeat examples: over whole windows every example is drawn equally often, and a
    batch pads far less than a random one would."""
    items = [Encoded(list(range(1, n + 1)), [1] * n) for n in lengths]
    windows = 3
    steps = windows * BUCKET_WINDOW
    drawn = Counter()
    for b in batches(items, batch_size, steps, pad_id=0, seed=seed):
        assert b.input_ids.shape[0] == batch_size
        for row, n in zip(b.input_ids.tolist(), b.attention_mask.sum(1).tolist(), strict=True):
            drawn[tuple(row[:n])] += 1
    total = steps * batch_size
    assert sum(drawn.values()) == total
    per_length = Counter(lengths)
    if total % len(items) == 0:  # whole epochs: each example exactly total / len(items) times
        assert all(drawn[tuple(range(1, n + 1))] == per_length[n] * total // len(items) for n in per_length)


def test_bucketed_batches_pad_less_than_random_ones() -> None:
    import random

    rng = random.Random(0)
    items = [Encoded([1] * n, [1] * n) for n in (rng.randint(100, 400) for _ in range(2000))]
    real = padded = 0
    for b in batches(items, 16, 100, pad_id=0, seed=1):
        real += int(b.attention_mask.sum())
        padded += b.input_ids.shape[0] * int(b.attention_mask.sum(1).max())  # before rounding to PAD_MULTIPLE
        assert b.input_ids.shape[1] % PAD_MULTIPLE == 0
    assert real / padded > 0.9  # random batches of 16 from 100..400 fill about 0.66


def test_rounding_the_length_up_changes_no_loss(tiny_policy) -> None:
    """Padding a batch to a multiple of PAD_MULTIPLE (steady buffer sizes) must leave the SFT and CT losses as they
    are with the exact length: right-padding under causal attention is never read by a real token."""
    tok, model = tiny_policy.tokenizer, tiny_policy.model
    items = encode_all(tok, [x for s in range(3) for x in episode_examples(expert_episode(s, 2).to_row())])
    longest = max(len(e.input_ids) for e in items)
    for all_tokens in (False, True):
        exact = collate(items, tok.pad_token_id, all_tokens, multiple=1)
        rounded = collate(items, tok.pad_token_id, all_tokens, multiple=64)
        assert exact.input_ids.shape[1] == longest and rounded.input_ids.shape[1] == -(-longest // 64) * 64
        assert rounded.input_ids.shape[1] > longest  # the test pads for real (this longest is not a multiple)
        with torch.no_grad():
            assert torch.allclose(masked_nll(model, exact), masked_nll(model, rounded), atol=1e-5)
