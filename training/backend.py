"""Training backends: the built-in jobs, or an external command (TRL, verl or your own trainer, on a GPU cluster).

An external backend gets the stage's pile exported at a recorded Delta version in the multimodal format its kind of
trainer reads (training/exports.py, the files `flywheel export` writes), the base checkpoint as a local
save_pretrained folder (exactly the folder stored in the lake, whatever model it holds), and an output folder.
Whatever save_pretrained folder it leaves there is published to the object store and recorded in training_runs like
a built-in job's checkpoint.

    stage  export      {pile} (a data file)          {pile_dir} (a folder `datasets.load_dataset` reads)
    ct     ct-text     data.parquet (text)           the export folder
    sft    sft-trl     data.parquet (messages+images) the export folder (TRL: --dataset_name {pile_dir})
    rl     sft-verl    train.parquet ({val}: validation.parquet; verl: data.train_files={pile} data.val_files={val})

The template is formatted with {pile}, {pile_dir}, {val}, {base}, {out}, {stage}, {round}, {reward} (the path of
training/verl_reward.py, verl's custom_reward_function.path) and {tool_config} (a verl tool config naming
training/verl_tool.py's gui_act), then split like a shell line (no shell is involved). The TRL template is tested
(tests/training/test_external_trainers.py); both are in docs/bring-your-own.md:

    trl sft --model_name_or_path {base} --dataset_name {pile_dir} --output_dir {out} --max_steps 100
    verl (not run here: GPUs, Ray, vLLM/SGLang): data.train_files={pile} data.val_files={val}
        actor_rollout_ref.model.path={base} reward.custom_reward_function.path={reward}
        actor_rollout_ref.rollout.multi_turn.tool_config_path={tool_config} ...
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.prompt import PromptConfig
from training.checkpoints import extract, fetch, publish_folder, version_of
from training.exports import export
from training.model import Policy
from training.runs import JobResult, record_run

#: The export each stage's trainer gets (RL's tasks come from the SFT pile: verl's RL parquet with its verifiers).
STAGE_EXPORT = {"ct": "ct-text", "sft": "sft-trl", "rl": "sft-verl"}
#: How much of a trainer's stderr its training_runs row keeps (a traceback and the log lines before it).
STDERR_TAIL = 16_000
#: verl's tool config for the gui_act tool ({tool_config}).
VERL_TOOL_CONFIG = "tools:\n  - class_name: training.verl_tool.GuiActTool\n    config: {type: native}\n"


def loads_as_policy(folder: Path) -> bool:
    """Whether a checkpoint folder is a causal LM the built-in Policy loads (an external trainer's VLM is not)."""
    import json

    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = json.loads((folder / "config.json").read_text()).get("model_type")
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


@dataclass(frozen=True)
class CommandBackend:
    """Run `template` as a subprocess; its output folder becomes the stage's checkpoint."""

    template: str
    timeout_s: float = 24 * 3600

    @property
    def name(self) -> str:
        argv = shlex.split(self.template)
        return "command:" + (Path(argv[0]).name if argv else "?")

    def run(
        self,
        lake,  # noqa: ANN001
        stage: str,
        round: int,
        base: str | Policy | None,
        prompt_cfg: PromptConfig = PromptConfig(),
    ) -> tuple[JobResult, Policy | None]:
        """Export, run the command, publish and record its checkpoint; the Policy is None when the checkpoint is
        not a causal LM the built-in jobs load (a VLM trained elsewhere: later stages use it by its key)."""
        if stage not in STAGE_EXPORT:
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(STAGE_EXPORT)}")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f"flywheel-{stage}-") as d:
            work = Path(d)
            ex = export(lake, STAGE_EXPORT[stage], work / "pile")
            base_dir, base_uri = work / "base", None
            if isinstance(base, Policy):
                base.save(base_dir)
                base_uri = base.uri
            elif base is not None:
                shutil.copytree(extract(lake, base), base_dir)  # the stored folder as is, whatever model it holds
                base_uri = base
            out = work / "out"
            out.mkdir()
            tool_config = work / "verl_tools.yaml"
            tool_config.write_text(VERL_TOOL_CONFIG)
            fields = {
                "pile": str(ex.data_file),
                "pile_dir": str(ex.out_dir),
                "val": str(ex.files.get("validation", ex.data_file)),
                "base": str(base_dir),
                "out": str(out),
                "stage": stage,
                "round": str(round),
                "reward": str(Path(__file__).with_name("verl_reward.py")),
                "tool_config": str(tool_config),
            }
            argv = [a.format(**fields) for a in shlex.split(self.template)]
            config = {
                "template": self.template,
                "argv": argv,
                "export": ex.kind,
                "files": sorted(p.name for p in ex.files.values()),
            }
            common = dict(backend=self.name, pile_version=ex.table_version, samples=ex.rows, config=config)
            try:
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
            except FileNotFoundError:
                raise ValueError(f"training command not found: {argv[0]!r}") from None
            except subprocess.TimeoutExpired:
                raise ValueError(f"training command timed out after {self.timeout_s:.0f} s: {argv[0]}") from None
            if proc.returncode != 0:  # the whole tail is kept in a training_runs row; the error is one line
                failed = JobResult(stage, round, base_uri, **common,  # type: ignore[arg-type]
                                   metrics={"failed": True, "returncode": proc.returncode, "stderr_tail": proc.stderr[-STDERR_TAIL:],
                                            "stdout_tail": proc.stdout[-2000:]})  # fmt: skip
                failed.wall_s = time.perf_counter() - t0
                run_id = record_run(lake, failed)
                last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
                raise ValueError(f"training command exited with {proc.returncode}: {last[0][:300]} (the stderr tail is in "
                                 f"training_runs, run {run_id})")  # fmt: skip
            uri = publish_folder(lake, out)  # refuses a folder without config.json
            res = JobResult(stage, round, base_uri, output_checkpoint=uri, **common,  # type: ignore[arg-type]
                            metrics={"stdout_tail": proc.stdout[-2000:], "stderr_tail": proc.stderr[-STDERR_TAIL:]})  # fmt: skip
            res.wall_s = time.perf_counter() - t0
            record_run(lake, res)
            return res, fetch(lake, uri) if loads_as_policy(out) else None


def backend_name(spec: str | None) -> str:
    return "builtin" if not spec or spec == "builtin" else CommandBackend(spec).name


__all__ = ["CommandBackend", "STAGE_EXPORT", "backend_name", "loads_as_policy", "version_of"]
