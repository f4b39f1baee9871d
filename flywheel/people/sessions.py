"""`flywheel sessions`: what happened to each uploaded session, per annotator and group.

Reads the `session_status` view (sessions joined with the quarantine reasons for their input). With a landing
area it also lists bundles that were uploaded but not ingested yet (status 'uploaded'), so nothing an annotation
lead sent is invisible.
"""

from __future__ import annotations

import polars as pl

from storage.lake import Lake

COLUMNS = ["session_id", "source", "annotator", "group", "status", "round", "n_actions", "duration_s", "thought_share",
           "asr_confidence", "reason", "landed_uri"]  # fmt: skip


def _base(uri: str | None) -> str | None:
    return None if uri is None else uri.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]


def session_frame(
    lake: Lake,
    landing: str | None = None,
    annotator: str | None = None,
    group: str | None = None,
    status: str | None = None,
) -> pl.DataFrame:
    """Sessions with status and reason; with `landing`, also uploads not ingested yet, and the annotator and group
    of quarantined uploads (from the upload records, matched by the landing name or the content hash)."""
    con = lake.duckdb(tables=["sessions", "quarantine"])
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    sql = f"SELECT {cols}, content_sha256 FROM session_status ORDER BY ingested_at, session_id"
    frame = pl.from_arrow(con.sql(sql).to_arrow_table())
    assert isinstance(frame, pl.DataFrame)
    if landing:
        from flywheel.people.upload import Landing

        recs = Landing.open(landing).records()
        by_name = {_base(r["landed_uri"]): r for r in recs}
        names = [_base(u) for u in frame.get_column("landed_uri").to_list()]
        shas = set(frame.get_column("content_sha256").drop_nulls().to_list())
        # fill who uploaded a quarantined input (ingestion could not read its manifest)
        fill = [by_name.get(n) or {} for n in names]
        frame = frame.with_columns(
            pl.Series(
                "annotator",
                [a if a is not None else f.get("annotator") for a, f in zip(frame["annotator"], fill)],
                pl.String,
            ),
            pl.Series(
                "group", [g if g is not None else f.get("group") for g, f in zip(frame["group"], fill)], pl.String
            ),
        )
        seen = set(names)
        pending = [r for r in recs if _base(r["landed_uri"]) not in seen and r.get("content_sha256") not in shas]
        if pending:
            extra = pl.DataFrame(
                {
                    "session_id": [r["session_id"] for r in pending],
                    "annotator": [r.get("annotator") for r in pending],
                    "group": [r.get("group") for r in pending],
                    "status": ["uploaded"] * len(pending),
                    "n_actions": [r.get("n_actions") for r in pending],
                    "duration_s": [r.get("duration_s") for r in pending],
                    "reason": ["not ingested yet"] * len(pending),
                    "landed_uri": [r["landed_uri"] for r in pending],
                },
                schema_overrides={"n_actions": pl.Int32, "duration_s": pl.Float64},
            )
            frame = pl.concat([frame, extra], how="diagonal_relaxed")
    for col, val in (("annotator", annotator), ("group", group), ("status", status)):
        if val is not None:
            frame = frame.filter(pl.col(col) == val)
    return frame.select(COLUMNS)


def session_summary(frame: pl.DataFrame) -> pl.DataFrame:
    """One row per (annotator, group): sessions by status, actions, mean thought share and ASR confidence."""
    return (
        frame.group_by("annotator", "group")
        .agg(
            pl.len().alias("sessions"),
            (pl.col("status") == "landed").sum().alias("landed"),
            (pl.col("status") == "quarantined").sum().alias("quarantined"),
            (pl.col("status") == "uploaded").sum().alias("uploaded"),
            pl.col("n_actions").sum().alias("actions"),
            pl.col("thought_share").mean().alias("mean_thought_share"),
            pl.col("asr_confidence").mean().alias("mean_asr_confidence"),
        )
        .sort("annotator", "group", nulls_last=True)
    )
