"""Training through torch.compile (training/compiled.py): the same loss and gradients as eager, weights that change,
sampling left eager, and a compile that fails falls back to eager with one warning instead of stopping the job."""

from __future__ import annotations

import copy
import logging
from dataclasses import replace

import pytest
import torch

from tests.training.fakes import expert_episode
from training import compiled as compiled_mod
from training.compiled import compiled
from training.config import OptimConfig
from training.data import collate, encode_all, episode_examples, masked_nll


@pytest.fixture(autouse=True)
def _compile_on(monkeypatch: pytest.MonkeyPatch):
    """tests/conftest.py turns the compile off for every other test; these are about it."""
    from core.settings import reset_settings_cache

    monkeypatch.setenv("FLYWHEEL_COMPILE", "1")
    reset_settings_cache()
    yield
    monkeypatch.undo()
    reset_settings_cache()


def _batch(policy, n: int = 4):
    tok = policy.tokenizer
    items = encode_all(tok, [x for s in range(n) for x in episode_examples(expert_episode(s, 2).to_row())])
    return collate(items, tok.pad_token_id)


def _loss_and_grads(model, batch) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = masked_nll(model, batch)
    loss.backward()
    return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_the_compiled_forward_gives_eager_s_loss_and_gradients_and_only_inside_the_block(tiny_policy) -> None:
    model, batch = tiny_policy.model, _batch(tiny_policy)
    model.train()
    eager_loss, eager_grads = _loss_and_grads(model, batch)
    dec = model.get_decoder()
    floats = torch._dynamo.config.specialize_float
    with compiled(model):
        assert dec in compiled_mod._ACTIVE
        assert torch._dynamo.config.specialize_float  # traced once, not restarted on a float
        loss, grads = _loss_and_grads(model, batch)
        loss2, _ = _loss_and_grads(model, _batch(tiny_policy, 6))  # another length: the dynamic-shape graph
    assert dec not in compiled_mod._ACTIVE  # sampling after the job runs the module itself
    assert torch._dynamo.config.specialize_float == floats
    assert compiled_mod.failure() is None
    assert loss == pytest.approx(eager_loss, rel=1e-4)
    assert loss2 > 0
    assert grads.keys() == eager_grads.keys()
    for n, g in grads.items():
        torch.testing.assert_close(g, eager_grads[n], rtol=1e-3, atol=1e-5, msg=n)


def test_a_compiled_sft_job_changes_the_weights_and_lowers_the_loss_and_saves_plain_weights(
    tiny_policy, tmp_path
) -> None:
    from training.loop import train_lm
    from training.model import Policy

    model, batch = tiny_policy.model, _batch(tiny_policy)
    keys = set(model.state_dict())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = OptimConfig(lr=3e-3, warmup_steps=1, compile=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the gradient's sums are split over threads: they must still add up the same way
    losses, _ = train_lm(model, iter([batch] * 12), 12, cfg)
    assert losses[-1] < losses[0]
    twin = copy.deepcopy(model)
    twin.load_state_dict(before)
    train_lm(twin, iter([batch] * 12), 12, cfg)  # the same job again: the same weights, bit for bit
    for k, v in model.state_dict().items():
        assert torch.equal(v, twin.state_dict()[k]), k
    torch.set_num_threads(threads)  # the rest of this worker's tests keep theirs
    assert not torch.are_deterministic_algorithms_enabled()  # the setting is the job's only
    assert set(model.state_dict()) == keys  # no wrapper's prefix in the checkpoint
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    tiny_policy.save(tmp_path)
    again = Policy.load(tmp_path)
    with torch.no_grad():
        assert float(masked_nll(again.model, batch)) == pytest.approx(float(masked_nll(model, batch)), rel=1e-5)


def test_a_compile_that_fails_trains_eagerly_with_one_warning(
    tiny_policy, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import torch._dynamo
    import torch._inductor.config as inductor

    # A real failure: inductor cannot build its C++ kernels (no compiler), nothing cached to fall back on.
    torch._dynamo.reset()
    monkeypatch.setattr(inductor.cpp, "cxx", (None, "/nonexistent/bin/g++"))
    monkeypatch.setattr(inductor, "fx_graph_cache", False)
    monkeypatch.setattr(compiled_mod, "_failed", None)
    model, batch = tiny_policy.model, _batch(tiny_policy)
    with torch.no_grad():
        eager = float(masked_nll(model, batch))
    with caplog.at_level(logging.WARNING, logger="training.compiled"), compiled(model), torch.no_grad():
        got = float(masked_nll(model, batch))
    assert got == pytest.approx(eager, rel=1e-6)
    assert compiled_mod.failure() is not None
    assert [r.getMessage() for r in caplog.records if "torch.compile failed" in r.getMessage()]
    with compiled(model):  # after a failure nothing is compiled again in this process
        assert model.get_decoder() not in compiled_mod._ACTIVE
    torch._dynamo.reset()


def test_the_tuned_jobs_compile_and_smoke_sizes_do_not() -> None:
    from flows.config import quick, round_config, tuned_flywheel

    f = tuned_flywheel()
    assert all(getattr(f, k).optim.compile for k in ("cold_sft", "sft", "ct", "search"))
    q = quick(round_config()).flywheel
    assert not any(getattr(q, k).optim.compile for k in ("cold_sft", "sft", "ct", "rl", "search"))
    assert replace(OptimConfig(), compile=True) != OptimConfig()  # recorded with the job's config


def test_the_compile_setting_turns_it_off_for_every_job(tiny_policy, monkeypatch: pytest.MonkeyPatch) -> None:
    from core.settings import reset_settings_cache

    monkeypatch.setenv("FLYWHEEL_COMPILE", "0")
    reset_settings_cache()
    with compiled(tiny_policy.model, True):
        assert tiny_policy.model.get_decoder() not in compiled_mod._ACTIVE
    assert not compiled_mod.active(True)


def test_the_kernels_are_kept_in_the_machine_cache_unless_a_cache_is_named(tmp_path) -> None:
    """Inductor fixes its cache folder when torch's compiler is first imported, so importing `training` sets it."""
    import os
    import subprocess
    import sys

    code = "import os, training, torch._dynamo; print(os.environ['TORCHINDUCTOR_CACHE_DIR'])"
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"} | {
        "FLYWHEEL_CACHE_DIR": str(tmp_path)
    }

    def folder(env: dict[str, str]) -> str:
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout

    assert folder(env).strip() == str(tmp_path / "inductor")
    assert folder(env | {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "mine")}).strip() == str(tmp_path / "mine")


def test_demo_prepare_measures_this_machine_and_runs_nothing_else(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make setup`'s step: the precision measured into the machine cache (the compile is off here, as in every
    test but these; with it on, the same call builds the kernels), no lake, no round."""
    import json

    from typer.testing import CliRunner

    from core.settings import reset_settings_cache
    from flywheel.cli import app
    from training import precision

    monkeypatch.setenv("FLYWHEEL_COMPILE", "0")
    reset_settings_cache()
    monkeypatch.setenv("FLYWHEEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(precision, "_MEMO", {})
    monkeypatch.setattr(precision, "_quiet_machine", lambda: True)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["demo", "--prepare", "--lake", str(tmp_path / "lake")])
    assert r.exit_code == 0, r.output
    assert "prepared in" in r.output and "compiled: False" in r.output
    assert json.loads((tmp_path / "cache" / "precision.json").read_text())  # measured, kept for the jobs
    assert not (tmp_path / "lake").exists() and not (tmp_path / "landing").exists()
