"""An environment backend from another installed package (entry point group `flywheel.envs`) runs a round."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.rounds.helpers import round_cmd, run_cmd, setup_round, write_config

PLUGIN = '''
from training.envs import SandboxBackend, heldout_tasks


class ToyBackend(SandboxBackend):
    """The sandbox, held out on one family only: a round that evaluates on it proves the plug-in ran."""

    name, app = "toy", "toy-app"

    def heldout_tasks(self, per_cell=None):
        return [t for t in heldout_tasks(per_cell) if t.family == "click_button"]


def make(tasks):
    return ToyBackend()
'''


def install_plugin(root: Path) -> Path:
    """A real distribution on a path entry: the module and its dist-info with the entry point."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "flywheel_toyenv.py").write_text(PLUGIN)
    info = root / "flywheel_toyenv-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: flywheel-toyenv\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[flywheel.envs]\ntoy = flywheel_toyenv:make\n")
    return root


def test_an_installed_plugin_is_an_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from training.envs import env_backend, env_names

    monkeypatch.syspath_prepend(str(install_plugin(tmp_path / "site")))
    assert env_names()[:2] == ("sandbox", "miniwob") and "toy" in env_names()
    b = env_backend("toy")
    assert b.name == "toy" and {t.family for t in b.heldout_tasks(1)} == {"click_button"}
    with pytest.raises(ValueError, match="expected one of sandbox, miniwob, toy"):
        env_backend("nope")


@pytest.mark.slow
@pytest.mark.xdist_group("rounds")
def test_a_round_runs_in_a_plugin_environment(tmp_path: Path, flywheel_env: dict[str, str]) -> None:
    from storage import Lake
    from validators.rounds import read_rounds

    site = install_plugin(tmp_path / "site")
    env = {**flywheel_env, "PYTHONPATH": os.pathsep.join([str(site), flywheel_env.get("PYTHONPATH", "")])}
    lake, landing, cfg = setup_round(tmp_path, "toy")
    write_config(cfg, {"env": "toy"})
    r = run_cmd(env, round_cmd(lake, landing, cfg, "run"))
    assert r.returncode == 0, r.stderr[-3000:]
    row = read_rounds(Lake.open(lake))[0]
    assert row.eval_n == 5  # one per level of the toy's one held-out family (the sandbox has 7 families)
