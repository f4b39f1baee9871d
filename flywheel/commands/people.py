"""Commands for people: `upload` and `sessions` (annotation leads), `audit sample|record|report` (auditors),
`export sft-trl|sft-verl|ct-text|preferences` (ML engineers). The logic lives in flywheel/people/."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table

from core.console import console, data_table, err_console, esc, fail
from flywheel.commands.common import LakeOpt, open_lake

audit_app = typer.Typer(
    help="Audit the SFT pile: sample passed episodes, record hand verdicts, report precision.", no_args_is_help=True
)
export_app = typer.Typer(
    help="Export the piles for training elsewhere (Parquet that Hugging Face datasets loads).", no_args_is_help=True
)

FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table | csv | json | parquet.")]
OutOpt = Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file instead of the terminal.")]


def _fmt(v: object) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "—"
    return str(v)


def _show(frame, format: str, out: Path | None, title: str | None = None) -> None:  # noqa: ANN001 - polars/arrow
    """Print a table, or write it as csv/json/parquet (the same writer as `flywheel sql`)."""
    from flywheel.commands.lake import OutFormat, _write

    try:
        fmt = OutFormat(format)
    except ValueError:
        fail(f"unknown --format {format!r}; choose table, csv, json or parquet")
    arrow = frame.to_arrow() if hasattr(frame, "to_arrow") else frame
    if fmt is OutFormat.table and out is None:
        console.print(data_table(arrow.column_names, (r.values() for r in arrow.to_pylist()), title=title, cell=_fmt))
        return
    _write(arrow, OutFormat.csv if fmt is OutFormat.table else fmt, out)


# ------------------------------------------------------------------------------------------------- upload
def upload(
    paths: Annotated[list[Path], typer.Argument(help="Bundles: folders, .zip or .tar.gz files.", show_default=False)],
    lake: LakeOpt = None,
    landing: Annotated[
        str | None,
        typer.Option("--landing", help="Landing area: a folder or s3://bucket/prefix (default: settings.landing)."),
    ] = None,
    ingest: Annotated[
        bool, typer.Option("--ingest", help="Ingest the uploaded bundles into the lake right away.")
    ] = False,
    round: Annotated[int, typer.Option("--round", help="Round to ingest into (with --ingest).", min=0)] = 0,
    check_only: Annotated[
        bool, typer.Option("--check-only", help="Run the checks and print the report; upload nothing.")
    ] = False,
    max_gb: Annotated[
        float | None,
        typer.Option(
            "--max-gb",
            help="Largest bundle accepted (uncompressed GB; default: the bundle_max_bytes setting).",
            min=0.001,
        ),
    ] = None,
) -> None:
    """Check think-aloud bundles, upload the good ones to the landing area, and print a per-session report.

    Checks: manifest format, every named file present, events parse, audio/video/screenshots decode, size limits,
    no absolute paths, '..' or links inside archives. Bad bundles are reported and not uploaded; the others go on.

    Example: flywheel upload ~/recordings/*.zip --landing s3://annotations/landing --ingest --round 3
    """
    from core.settings import get_settings
    from flywheel.people.upload import Landing, Limits, UploadOutcome, check_bundle, upload_size

    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        fail(f"no such file or folder: {', '.join(missing)}")
    limits = Limits.from_settings()
    if max_gb is not None:  # only lowers what ingestion accepts (a larger bundle would pass here and fail there)
        cap = min(int(max_gb * 1e9), limits.max_bundle_bytes)
        limits = replace(limits, max_bundle_bytes=cap, max_file_bytes=min(cap, limits.max_file_bytes))
    lk = open_lake(lake) if ingest else None  # fail early on a wrong --lake or --landing, before any work
    area = None if check_only else Landing.open(landing or get_settings().landing)
    outcomes: list[UploadOutcome] = []
    with console.status("checking bundles..."):
        for p in paths:
            outcomes.append(UploadOutcome(check_bundle(p, limits)))
    good = [o for o in outcomes if o.check.ok]
    if area is not None and good:
        total = sum(upload_size(o.check) for o in good)
        cols = (
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*cols, console=console, transient=False) as bar:
            task = bar.add_task(f"uploading to {esc(area.uri)}", total=total)
            for o in good:
                bar.update(task, description=esc(o.check.session_id))
                try:
                    o.landed_uri, o.uploaded = area.upload(o.check, lambda n: bar.advance(task, n))
                except Exception as e:  # noqa: BLE001 - one failed upload must not stop the others
                    o.error = str(e).splitlines()[0][:300]
        if ingest and lk is not None:
            _ingest(lk, area, [o for o in good if o.landed_uri], round)
    _report(outcomes, check_only)
    bad = [o for o in outcomes if o.status in ("refused", "failed")]
    if bad:
        fail(
            f"{len(bad)} of {len(outcomes)} bundle(s) not uploaded: "
            + "; ".join(f"{o.check.path.name}: {o.error or o.check.problems[0]}" for o in bad)
        )


def _ingest(lk, area, outcomes, round: int) -> None:  # noqa: ANN001
    """Run the think-aloud ingestion on the landed bundles and attach each session's row to its outcome."""
    from flywheel.people.upload import ingest_landed

    with console.status(f"ingesting {len(outcomes)} bundle(s) (ASR runs on CPU; this can take a while)..."):
        rows = ingest_landed(lk, area, [o.landed_uri for o in outcomes], round)
    for o in outcomes:
        o.session = rows.get(o.landed_uri)


def _report(outcomes, check_only: bool) -> None:  # noqa: ANN001
    t = Table(
        "bundle",
        "session",
        "status",
        "duration s",
        "actions",
        "thought share",
        "ASR conf.",
        "problems",
        title="upload report",
    )
    for o in outcomes:
        c, s = o.check, o.session or {}
        status = o.status if not check_only or not c.ok else "checked ok"
        if s:
            status += f", {s.get('status')}"
        probs = [str(p) for p in c.problems] + ([o.error] if o.error else []) + list(s.get("problems") or [])
        t.add_row(
            esc(c.path.name),
            esc(c.session_id or "—"),
            esc(status),
            esc(_fmt(s.get("duration_s", c.duration_s))),
            esc(_fmt(s.get("n_actions", c.n_actions))),
            esc(_fmt(s.get("thought_share", c.thought_share))),
            esc(_fmt(s.get("asr_confidence"))),
            esc("\n".join(probs)) or "none",
        )
    console.print(t)
    if any(o.check.ok for o in outcomes) and not any(o.session for o in outcomes):
        console.print("ASR confidence (and thought share for bundles with audio) come from ingestion: add --ingest.")


# ----------------------------------------------------------------------------------------------- sessions
def sessions(
    lake: LakeOpt = None,
    landing: Annotated[
        str | None,
        typer.Option("--landing", help="Also list bundles landed but not ingested yet (a folder or s3://...)."),
    ] = None,
    annotator: Annotated[str | None, typer.Option("--annotator", help="Only this annotator (pseudonym).")] = None,
    group: Annotated[str | None, typer.Option("--group", help="Only this group (expert | novice | model).")] = None,
    status: Annotated[
        str | None, typer.Option("--status", help="Only this status (landed | quarantined | uploaded).")
    ] = None,
    summary: Annotated[
        bool, typer.Option("--summary", help="One row per annotator and group instead of per session.")
    ] = False,
    format: FormatOpt = "table",
    out: OutOpt = None,
) -> None:
    """List uploaded sessions with their status (landed, or quarantined with the reason) per annotator and group.

    Example: flywheel sessions --group novice --status quarantined
    """
    from flywheel.people.sessions import session_frame, session_summary

    if status not in (None, "landed", "quarantined", "uploaded"):
        fail(f"unknown --status {status!r}; choose landed, quarantined or uploaded")
    frame = session_frame(open_lake(lake), landing=landing, annotator=annotator, group=group, status=status)
    if summary:
        frame = session_summary(frame)
    _show(frame, format, out, title="sessions per annotator and group" if summary else "sessions")


# -------------------------------------------------------------------------------------------------- audit
def _stratify(value: str | None) -> tuple[str, ...]:
    return tuple(s.strip() for s in value.split(",") if s.strip()) if value else ()


@audit_app.command("sample")
def audit_sample(
    round: Annotated[int, typer.Option("--round", "-r", help="Round whose SFT episodes to sample.", min=0)],
    n: Annotated[
        int, typer.Option("--n", help="Episodes to draw (all of them when the round has fewer).", min=1)
    ] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Random seed: the same seed draws the same episodes.")] = 0,
    stratify: Annotated[
        str | None, typer.Option("--stratify", help="Comma-separated: source, validators, task_family, group.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Folder for sheet.html, verdicts.csv, sample.json (default ./audit-rR-sS)."),
    ] = None,
    pile_version: Annotated[
        int | None, typer.Option("--pile-version", help="Sample the SFT pile as of this Delta version.", min=0)
    ] = None,
    lake: LakeOpt = None,
) -> None:
    """Draw a reproducible random sample of passed (SFT) episodes and write an audit sheet to fill in.

    Example: flywheel audit sample --round 3 --n 200 --seed 7 --stratify source,validators --out audit-r3
    """
    from flywheel.people.audit import sample
    from flywheel.people.audit_sheet import write_sheet

    strata = _stratify(stratify)
    lk = open_lake(lake)
    s = sample(lk, round, n, seed, strata, pile_version)
    dest = out or Path(f"audit-r{round}-s{seed}")
    with console.status(f"writing the audit sheet for {s.episodes.height} episodes..."):
        sheet = write_sheet(lk, s, dest)
    console.print(
        f"drew {s.episodes.height} of {s.population} SFT episodes of round {round} (seed {seed}, pile version {s.pile_version})"
        + (f", strata: {esc(', '.join(f'{k} {d}/{p}' for k, (p, d) in s.strata.items()))}" if strata else "")
    )
    console.print(
        f"open {esc(sheet.html)}, fill in {esc(sheet.csv)} (verdict good|bad, note, auditor), then: "
        f"flywheel audit record {esc(sheet.csv)}"
    )
    if sheet.missing_screenshots:
        err_console.print(f"warning: {sheet.missing_screenshots} screenshot(s) missing from the object store")


@audit_app.command("record")
def audit_record(
    file: Annotated[Path, typer.Argument(help="The filled-in verdicts.csv.", show_default=False)],
    auditor: Annotated[
        str | None, typer.Option("--auditor", help="Auditor name for rows whose auditor column is empty.")
    ] = None,
    lake: LakeOpt = None,
) -> None:
    """Record the verdicts of a filled-in audit sheet (append-only; recording the same sheet again adds nothing).

    Example: flywheel audit record audit-r3/verdicts.csv --auditor alice
    """
    from flywheel.people.audit import record

    if not file.is_file():
        fail(f"no such file: {file}")
    res = record(open_lake(lake), file, auditor)
    console.print(
        f"recorded {res.added} verdict(s); {res.already} already recorded; {res.blank} row(s) without a verdict"
    )
    if res.errors:
        fail(
            f"{len(res.errors)} row(s) not recorded: "
            + "; ".join(res.errors[:10])
            + (" ..." if len(res.errors) > 10 else "")
        )


@audit_app.command("report")
def audit_report(
    round: Annotated[int | None, typer.Option("--round", "-r", help="Only this round.", min=0)] = None,
    by: Annotated[
        str,
        typer.Option(
            "--by",
            help="Breakdowns after the round level: comma-separated levels, each 'source' or 'source+validators'.",
        ),
    ] = "source,source+validators",
    threshold: Annotated[
        float, typer.Option("--threshold", help="Flag rounds whose precision is below this.", min=0.0, max=1.0)
    ] = 0.9,
    method: Annotated[str, typer.Option("--method", help="Interval: wilson | clopper-pearson.")] = "wilson",
    strict: Annotated[
        bool, typer.Option("--strict", help="Exit 1 when a round is confidently below the threshold.")
    ] = False,
    format: FormatOpt = "table",
    out: OutOpt = None,
    lake: LakeOpt = None,
) -> None:
    """Validator precision (share of audited SFT episodes truly good) with a 95% interval per round, source, validators.

    Status per round: 'below' when the whole interval is under --threshold, 'maybe below' when the estimate is.

    Example: flywheel audit report --threshold 0.9 --method clopper-pearson
    """
    import polars as pl

    from flywheel.people.audit import METHODS, audited, precision_report

    if method not in METHODS:
        fail(f"unknown --method {method!r}; choose wilson or clopper-pearson")
    levels = [("round",)] + [("round", *lv.split("+")) for lv in (x.strip() for x in by.split(",")) if lv]
    frame = audited(open_lake(lake))
    if round is not None:
        frame = frame.filter(pl.col("round") == round)
    if frame.is_empty():
        fail(
            "no audited episodes"
            + (f" in round {round}" if round is not None else "")
            + "; record verdicts with `flywheel audit record`"
        )
    rep = precision_report(frame, levels, threshold, method)
    _show(rep, format, out, title=f"validator precision ({method}, 95% interval, threshold {threshold})")
    below = rep.filter(pl.col("status") == "below")
    if below.height:
        err_console.print(
            f"[bold red]rounds below {threshold}:[/] " + esc(", ".join(str(r) for r in below.get_column("round")))
        )
        if strict:
            raise typer.Exit(1)


# ------------------------------------------------------------------------------------------------- export
def _export(
    kind: str,
    out: Path,
    lake: str | None,
    version: int | None,
    round: int | None,
    max_images: int | None,
    allow_empty: bool = False,
    allow_missing: bool = False,
    val_fraction: float | None = None,
) -> None:
    from training.exports import VAL_FRACTION, export

    lk = open_lake(lake)
    with Progress(
        TextColumn(f"export {kind}"), BarColumn(), TextColumn("{task.completed}/{task.total} rows"), console=console
    ) as bar:
        task = bar.add_task(kind, total=None)
        res = export(lk, kind, out, version=version, round=round, max_images=max_images, allow_empty=allow_empty,
                     allow_missing=allow_missing, val_fraction=VAL_FRACTION if val_fraction is None else val_fraction,
                     progress=lambda done, total: bar.update(task, completed=done, total=total))  # fmt: skip
    files = ", ".join(f"{esc(p.name)} ({res.split_rows[s]:,})" if s in res.split_rows else esc(p.name)
                      for s, p in res.files.items())  # fmt: skip
    console.print(
        f"wrote {res.rows:,} rows ({res.images:,} images) to {esc(out)}: {files}, from {res.table} version "
        f"{res.table_version}; lineage in {esc(res.sidecar.name)}"
    )
    if res.missing_images:
        err_console.print(
            f"{res.missing_images} screenshot(s) missing from the object store were left out (--allow-missing)"
        )


OutDir = Annotated[
    Path, typer.Option("--out", "-o", help="Output folder (data.parquet + flywheel_export.json).", show_default=False)
]
AllowEmptyOpt = Annotated[
    bool,
    typer.Option("--allow-empty", help="Write a 0-row file (full schema) instead of refusing an empty selection."),
]
VersionOpt = Annotated[
    int | None, typer.Option("--version", help="Export the table as of this Delta version (default: newest).", min=0)
]
RoundOpt = Annotated[int | None, typer.Option("--round", "-r", help="Only episodes of this round.", min=0)]
AllowMissingOpt = Annotated[
    bool,
    typer.Option(
        "--allow-missing", help="Leave out screenshots missing from the object store (counted) instead of failing."
    ),
]


@export_app.command("sft-trl")
def export_sft_trl(
    out: OutDir,
    max_images: Annotated[
        int | None, typer.Option("--max-images", help="Keep screenshots of the last K steps only.", min=0)
    ] = None,
    version: VersionOpt = None,
    round: RoundOpt = None,
    lake: LakeOpt = None,
    allow_empty: AllowEmptyOpt = False,
    allow_missing: AllowMissingOpt = False,
) -> None:
    """The SFT pile in TRL's conversational format: messages (with image items), images, and the screenshots' size
    (width, height) the actions' pixel coordinates refer to.

    Example: flywheel export sft-trl --out exports/sft-trl --max-images 5
    """
    _export("sft-trl", out, lake, version, round, max_images, allow_empty, allow_missing)


@export_app.command("sft-verl")
def export_sft_verl(
    out: OutDir,
    version: VersionOpt = None,
    round: RoundOpt = None,
    lake: LakeOpt = None,
    allow_empty: AllowEmptyOpt = False,
    allow_missing: AllowMissingOpt = False,
    val_fraction: Annotated[
        float,
        typer.Option(
            "--val-fraction", help="Share of tasks (by task-id hash) in validation.parquet.", min=0.0, max=0.99
        ),
    ] = 0.1,
) -> None:
    """The SFT pile as verl RL parquet (train.parquet, validation.parquet): prompt, images, reward_model (the
    task's verifier, scored by training/verl_reward.py), agent_name and tools_kwargs for verl's tool agent loop.

    Example: flywheel export sft-verl --out exports/verl --round 2 --val-fraction 0.1
    """
    _export("sft-verl", out, lake, version, round, None, allow_empty, allow_missing, val_fraction)


@export_app.command("ct-text")
def export_ct_text(
    out: OutDir,
    version: VersionOpt = None,
    round: RoundOpt = None,
    lake: LakeOpt = None,
    allow_empty: AllowEmptyOpt = False,
) -> None:
    """The CT pile as plain text for language-model training (one `text` per episode).

    Example: flywheel export ct-text --out exports/ct
    """
    _export("ct-text", out, lake, version, round, None, allow_empty)


@export_app.command("preferences")
def export_preferences(
    out: OutDir,
    version: VersionOpt = None,
    round: RoundOpt = None,
    lake: LakeOpt = None,
    allow_empty: AllowEmptyOpt = False,
) -> None:
    """Annotators' overrides as preference pairs (prompt, chosen, rejected) for DPO-style training.

    Example: flywheel export preferences --out exports/dpo
    """
    _export("preferences", out, lake, version, round, None, allow_empty)


def register(app: typer.Typer) -> None:
    app.command()(upload)
    app.command()(sessions)
    app.add_typer(audit_app, name="audit")
    app.add_typer(export_app, name="export")
