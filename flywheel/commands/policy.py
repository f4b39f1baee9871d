"""`flywheel policy serve`: a checkpoint behind the OpenAI completions API (training/policy_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.console import console, esc, fail
from flywheel.commands.common import LakeOpt, open_lake
from storage.lake import Lake

policy_app = typer.Typer(help="Serve a policy over HTTP for the acting stages (sample, annotate, evaluate) and RL's "
                              "rollouts; build a vision-language policy.", no_args_is_help=True)  # fmt: skip


def serve(
    checkpoint: Annotated[
        str | None,
        typer.Argument(help="A model folder, or a checkpoint URI of --lake (default: the lake's newest checkpoint)."),
    ] = None,
    lake: LakeOpt = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; 127.0.0.1 keeps it on this machine.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.", min=1, max=65535)] = 8000,
) -> None:
    """Serve CHECKPOINT (text or VLM) at http://HOST:PORT/v1 (GET /v1/models, POST /v1/completions, POST
    /v1/chat/completions with screenshots as image_url parts for a VLM), the APIs vLLM serves.

    Started on a lake, the server can also be asked to load another checkpoint of it (POST /flywheel/load), which a
    round acting through it (`policy_url` in the round config) does when a stage needs a newer checkpoint, and RL
    does for each policy version when its rollouts go through the server (`rl_through_server`).

    Example: flywheel policy serve --lake ./lake-demo --port 8000
    """
    import uvicorn

    from training.checkpoints import fetch
    from training.model import Policy
    from training.policy_server import Served, create_app

    lk = None
    try:
        if checkpoint and Path(checkpoint).is_dir():
            policy = Policy.load(checkpoint)
            if lake:
                lk = open_lake(lake)
        else:
            lk = open_lake(lake)
            uri = checkpoint or _newest(lk)
            policy = fetch(lk, uri)
    except (ValueError, OSError) as e:
        fail(str(e))
    console.print(f"serving {esc(policy.version)} on http://{host}:{port}/v1"
                  + (f" (loads checkpoints of {esc(str(lk.uri))})" if lk is not None else ""))  # fmt: skip
    uvicorn.run(create_app(Served(policy, lk)), host=host, port=port, log_level="warning")


def init_vlm(
    out: Annotated[Path, typer.Argument(help="The model folder to write (save_pretrained + flywheel_policy.json).")],
    image: Annotated[
        str, typer.Option("--image", help="The model's image, WxH, multiples of 28: every screenshot is resized to it.")
    ] = "224x140",
    coords: Annotated[
        str,
        typer.Option("--coords", help="Where actions' pixel coordinates live: image (the resized image) or screen."),
    ] = "image",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random initialisation.")] = 0,
) -> None:
    """Build a small vision-language policy from a config: a Qwen2-VL with random weights (about 0.2M parameters) and
    a tokenizer trained on the sandbox's text, nothing downloaded. It acts on screenshots, trains through the same
    SFT and RL jobs, and records its coordinate convention. Start rounds from it with `"model": {"pretrained":
    "OUT"}` in the round config, or serve it with `flywheel policy serve OUT`.

    Example: flywheel policy init-vlm ./tiny-vlm --image 224x140 --coords image
    """
    from dataclasses import replace

    from training.base import sandbox_texts
    from training.config import VLMConfig
    from training.model import Policy
    from training.vision import View

    w, sep, h = image.partition("x")
    if not (sep and w.isdigit() and h.isdigit()):
        fail(f"--image must be WxH, e.g. 224x140, not {image!r}")
    try:
        View(int(w), int(h), coords)  # refused before anything is built
        base = VLMConfig()
        cfg = replace(base, image_width=int(w), image_height=int(h), coords=coords, text=replace(base.text, seed=seed))
        policy = Policy.create(sandbox_texts(), cfg)
    except ValueError as e:
        fail(str(e))
    policy.save(out, {"built_by": "flywheel policy init-vlm"})
    v = policy.model.vision
    console.print(f"wrote a vision-language policy to {esc(str(out))}: {policy.n_params:,} parameters, "
                  f"{v.width}x{v.height} images ({v.tokens} image tokens), coordinates in the {v.coords}")  # fmt: skip


def _newest(lake) -> str:  # noqa: ANN001
    from flows.stages import final_checkpoint
    from validators.rounds import read_rounds

    rounds = [r.round for r in read_rounds(lake)]
    uri = final_checkpoint(lake, max(rounds)) if rounds else None
    if uri is None:
        raise ValueError(f"{lake.uri} has no checkpoint yet: name a model folder to serve")
    return uri


def _pairs(values: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        name, sep, rest = v.partition("=")
        if not sep or not name or not rest:
            raise typer.BadParameter(f"{what} must be NAME=VALUE, not {v!r}")
        if name in out:
            raise typer.BadParameter(f"{what} {name} given twice")
        out[name] = rest
    return out


def merge(
    base: Annotated[str, typer.Option("--base", help="The checkpoint URI every specialist grew from.")],
    specialist: Annotated[list[str], typer.Option("--specialist", help="NAME=CHECKPOINT_URI, once per specialist.")],
    alpha: Annotated[
        list[str] | None,
        typer.Option("--alpha", help="NAME=WEIGHT, once per specialist; >= 0, summing to 1 (default: equal)."),
    ] = None,
    lake: LakeOpt = None,
    round: Annotated[int, typer.Option("--round", help="Round the merge is recorded under.", min=0)] = 0,
    sweep: Annotated[
        bool,
        typer.Option(
            "--sweep",
            help="Two specialists: evaluate alpha in 0, .25, .5, .75, 1 on every --world, keep the best worst-world score.",
        ),
    ] = False,
    world: Annotated[
        list[str] | None,
        typer.Option("--world", help="NAME=FAMILY,FAMILY...: a world of --sweep, held-out tasks of those families."),
    ] = None,
    env: Annotated[str, typer.Option("--env", help="Environment backend the worlds' tasks come from.")] = "sandbox",
    per_cell: Annotated[
        int | None,
        typer.Option("--per-cell", help="Held-out tasks per (family, level) in each world (default: all).", min=1),
    ] = None,
) -> None:
    """Merge specialists by parameter interpolation, theta = sum_k alpha_k theta_k, into a new checkpoint.

    Refused (one line) unless every specialist grew from --base by the recorded training runs and all share
    parameter names, shapes and tokenizer. The merged checkpoint is published and recorded in training_runs
    (stage merge), and can be evaluated or trained like any other.

    Example: flywheel merge --lake ./lake --base objects/ab.tar --specialist forms=objects/cd.tar
    --specialist menus=objects/ef.tar --alpha forms=0.5 --alpha menus=0.5
    """
    from training.merge import MergeError, Specialist, merge_job

    try:
        ckpts = _pairs(specialist, "--specialist")
        weights = {k: float(v) for k, v in _pairs(alpha or [], "--alpha").items()}
    except ValueError as e:
        fail(str(e))
    if not weights:
        weights = {k: 1.0 / len(ckpts) for k in ckpts}
    if set(weights) != set(ckpts):
        fail(f"--alpha names {sorted(weights)} do not match --specialist names {sorted(ckpts)}")
    if sweep:
        _sweep(open_lake(lake), base, ckpts, _pairs(world or [], "--world"), env, per_cell, round)
        return
    try:
        res, _ = merge_job(open_lake(lake), base, [Specialist(k, ckpts[k], weights[k]) for k in ckpts], round)
    except (MergeError, ValueError, OSError) as e:
        fail(str(e))
    console.print(f"merged {', '.join(f'{k}={weights[k]:g}' for k in ckpts)} into {esc(res.output_checkpoint)} "
                  f"(run {res.run_id})")  # fmt: skip


def _sweep(lake: Lake, base: str, ckpts: dict[str, str], worlds: dict[str, str], env: str, per_cell: int | None,
           round: int) -> None:  # fmt: skip
    from core.console import data_table
    from flows.config import resolve_config
    from training.envs import World, env_backend
    from training.merge import MergeError, sweep

    if len(ckpts) != 2:
        fail(f"--sweep merges two specialists, not {len(ckpts)}")
    if not worlds:
        fail("--sweep needs at least one --world NAME=FAMILY,...")
    picked = {}
    for name, fams in worlds.items():
        want = [f.strip() for f in fams.split(",") if f.strip()]
        try:
            picked[name] = World(name, env_backend(env), want).heldout_tasks(per_cell)
        except ValueError as e:
            fail(f"world {name}: {e}")
        if not picked[name]:
            fail(f"world {name}: no held-out task of {', '.join(sorted(want))} in {env}")
    cfg = resolve_config(lake)[0].flywheel
    (na, ca), (nb, cb) = list(ckpts.items())
    try:
        with console.status("sweeping alpha"):
            points, base_rates, res = sweep(lake, base, (na, ca), (nb, cb), picked, cfg.eval, cfg.prompt, round=round)
    except (MergeError, ValueError, OSError) as e:
        fail(str(e))

    def cell(r) -> str:  # noqa: ANN001
        return f"{100 * r.rate:.1f} [{100 * r.lo:.1f}, {100 * r.hi:.1f}]"

    rows = [["base", *(cell(base_rates[w]) for w in picked)]]
    rows += [[f"{na}={p.alpha:g} {nb}={1 - p.alpha:g}", *(cell(p.rates[w]) for w in picked)] for p in points]
    console.print(data_table(["merge", *(f"{w} % [95% CI] (n={len(picked[w])})" for w in picked)], rows))
    kept = res.metrics["sweep"]["kept_alpha"]
    console.print(f"kept {na}={kept:g} {nb}={1 - kept:g} (best worst-world score) as {esc(res.output_checkpoint)}")


def register(app: typer.Typer) -> None:
    app.command("merge")(merge)
    policy_app.command("serve")(serve)
    policy_app.command("init-vlm")(init_vlm)
    app.add_typer(policy_app, name="policy")
