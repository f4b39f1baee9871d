"""Operations commands: `flywheel check` (the lake's invariants), `flywheel maintain` (compact + vacuum) and
`flywheel repair` (torn commits, lost data files, key indexes)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from core.console import console, err_console, esc
from flywheel.commands.common import LakeOpt, open_lake


def check(
    lake: LakeOpt = None,
    media: Annotated[
        bool,
        typer.Option(
            "--media/--no-media", help="Also check that every screenshot and checkpoint is in the object store."
        ),
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Verify the lake's invariants; exit 1 listing each violated one with counts and example ids.

    Checked: no duplicate key in any table; every routed episode in exactly one pile; `rounds` counts agree with
    the tables (n_new = n_pass + n_fail, pile sizes); every data file of the current and pinned versions, every
    screenshot and every checkpoint present.

    Example: flywheel check --lake s3://my-bucket/flywheel
    """
    from validators.lake_check import check_lake

    lk = open_lake(lake)
    with console.status("checking") as st:
        report = check_lake(lk, media=media, progress=lambda what: st.update(f"checking {what}"))
    if as_json:
        print(json.dumps(report.as_dict(), indent=2, default=str))
    else:
        rows = {k.removeprefix("rows."): v for k, v in report.stats.items() if k.startswith("rows.")}
        console.print(
            f"{esc(lk.uri)}: {rows.get('episodes', 0):,} episodes, {rows.get('sft', 0):,} sft, {rows.get('ct', 0):,} ct, "
            f"{report.stats.get('rounds.routed', 0)} routed round(s), {report.stats.get('media.screenshots_referenced', 0):,} "
            f"screenshot(s), {report.stats.get('pins', 0)} pinned version(s); {len(set(report.checked))} invariants "
            f"in {sum(report.seconds.values()):.1f} s"
        )
        for v in report.violations:
            err_console.print(f"[bold red]violated:[/] {esc(v.line())}", highlight=False, soft_wrap=True)
        if report.ok:
            console.print("[green]all invariants hold[/]")
    if not report.ok:
        raise typer.Exit(1)


def maintain(
    lake: LakeOpt = None,
    retain_hours: Annotated[
        int,
        typer.Option("--retain-hours", min=0, help="Keep every version younger than this (Delta time travel window)."),
    ] = 168,
    table: Annotated[list[str] | None, typer.Option("--table", "-t", help="Only this table (repeatable).")] = None,
    compact: Annotated[
        bool, typer.Option("--compact/--no-compact", help="Rewrite small files into large ones.")
    ] = True,
    vacuum: Annotated[bool, typer.Option("--vacuum/--no-vacuum", help="Delete files no kept version needs.")] = True,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Change nothing; report what vacuum would delete.")
    ] = False,
    target_mb: Annotated[int, typer.Option("--target-mb", min=1, help="Target size of compacted files.")] = 128,
) -> None:
    """Compact small files and vacuum old versions, keeping versions that exports, audits and training refer to.

    Example: flywheel maintain --lake ./lake --retain-hours 168
    """
    from storage.maintain import maintain as run_maintain

    lk = open_lake(lake)
    with console.status("maintaining") as st:
        rep = run_maintain(lk, retain_hours=retain_hours, tables=table or None, compact=compact, vacuum=vacuum,
                           dry_run=dry_run, target_bytes=target_mb << 20, progress=lambda n: st.update(f"maintaining {n}"))  # fmt: skip
    t = Table("table", "version", "files", "compacted", "vacuumed", "kept versions", "s",
              title=f"{esc(lk.uri)} (retain {retain_hours} h{', dry run' if dry_run else ''})")  # fmt: skip
    for m in rep.tables:
        ver = (
            str(m.version_before) if m.version_after == m.version_before else f"{m.version_before} -> {m.version_after}"
        )
        files = str(m.files_before) if m.files_after == m.files_before else f"{m.files_before} -> {m.files_after}"
        t.add_row(m.table, ver, files, f"{m.files_compacted} -> {m.files_written}" if m.files_compacted else "-",
                  str(m.files_vacuumed), ", ".join(map(str, m.kept_versions)) or "-", f"{m.seconds:.1f}")  # fmt: skip
    console.print(t)


def repair(
    lake: LakeOpt = None,
    table: Annotated[list[str] | None, typer.Option("--table", "-t", help="Only this table (repeatable).")] = None,
) -> None:
    """Repair what `flywheel check` reports as torn or emptied commits, missing or unreadable data files and key
    indexes that disagree with the data; then re-ingest the sources to restore the lost rows. Run it with no other
    writer on the lake.

    Example: flywheel repair --lake ./lake && flywheel ingest rollouts landing/rollouts/ && flywheel check
    """
    from validators.lake_check import repair_lake

    lk = open_lake(lake)
    with console.status("repairing"):
        rep = repair_lake(lk, table or None)
    for line in rep.done:
        console.print(f"repaired: {esc(line)}", highlight=False, soft_wrap=True)
    if not rep.done:
        console.print("nothing to repair")
    elif rep.found:
        console.print(
            "rows of the lost commits and files are not in the lake: re-ingest their sources (nothing is duplicated), "
            "then run `flywheel check`"
        )


def register(app: typer.Typer) -> None:
    app.command()(check)
    app.command()(maintain)
    app.command()(repair)
