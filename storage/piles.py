"""The SFT and CT piles: thin membership rows joined to their episodes.

A pile row (schemas.tables.SFT / CT) holds the episode id, the routing columns (round_routed, reasons for CT, the
exact-dedup content key) and the small flat episode columns pile queries filter and group on (round, source,
task_id, task_family, difficulty). Everything else, the steps above all, is read from `episodes` by episode id:
routing then writes a few bytes per episode instead of copying it, and an episode's content exists once.

`read_pile` is the one way Python code reads pile episodes (training, exports, audits, dedup indexes); DuckDB users
get the same join as the `sft` and `ct` views (storage/views.py). Pile versions stay the unit of lineage: a pile
read at Delta version v joins the latest episodes, which is exact because episodes are immutable and append-only
(content-hash ids; nothing rewrites or deletes an episode). Pile versions written before schema version 2 hold
whole episodes; `read_pile` reads only their membership columns and joins them the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from schemas.tables import EPISODES, TABLES
from storage import projection
from storage.errors import LakeError

if TYPE_CHECKING:
    from storage.lake import Lake

PILES = ("sft", "ct")


def pile_only_columns(name: str) -> list[str]:
    """Columns of a pile that its episode does not have (round_routed, content key, reasons for CT)."""
    _check(name)
    return [c for c in TABLES[name].schema.names if c not in EPISODES.names]


def full_columns(name: str) -> list[str]:
    """What a pile row reads as: every episode column, then round_routed (and reasons for CT)."""
    return EPISODES.names + [c for c in ("round_routed", "reasons") if c in TABLES[name].schema.names]


def _check(name: str) -> None:
    if name not in PILES:
        raise LakeError(f"{name!r} is not a pile; piles: {', '.join(PILES)}")


def read_pile(
    lake: Lake,
    name: str,
    columns: Sequence[str] | None = None,
    *,
    version: int | None = None,
    filter: pc.Expression | None = None,
    step_fields: Sequence[str] | None = None,
) -> pa.Table:
    """Rows of pile `name` at Delta `version` (the newest when None), each with its episode's columns.

    columns: any episode column and any pile column (default: full_columns(name)). filter: an expression over the
    pile's own columns (episode_id, round, source, task_id, task_family, difficulty, round_routed, ...) is pushed
    down to the pile; one naming other episode columns is applied after the join. step_fields: read only these
    fields of each step (Parquet nested projection). Rows come in the pile's order; a pile row whose episode is
    missing from `episodes` (a broken lake: `flywheel check` reports it as pile_orphan) is left out.
    """
    _check(name)
    cols = list(columns) if columns is not None else full_columns(name)
    thin = TABLES[name].schema
    unknown = [c for c in cols if c not in thin.names and c not in EPISODES.names]
    if unknown:
        raise LakeError(f"pile {name}: unknown column(s) {', '.join(unknown)}")
    dset = lake.dataset(name, version)
    have = set(dset.schema.names)
    pile_cols = [c for c in dict.fromkeys(["episode_id", "round", *cols]) if c in thin.names]
    post_filter = None
    try:
        rows = dset.to_table(columns=[c for c in pile_cols if c in have], filter=filter)
    except pa.ArrowInvalid as e:  # the filter names an episode column: apply it after the join
        if filter is None or "No match for FieldRef" not in str(e):
            raise
        rows = dset.to_table(columns=[c for c in pile_cols if c in have])
        post_filter = filter
    for c in pile_cols:  # a pile version older than the column (content_key on a schema-1 pile)
        if c not in rows.column_names:
            rows = rows.append_column(thin.field(c), pa.nulls(rows.num_rows, thin.field(c).type))
    ep_cols = [c for c in cols if c not in thin.names]
    if post_filter is not None:  # which columns a filter names is not public in pyarrow: read the flat ones
        ep_cols += [c for c in EPISODES.names if c not in thin.names and c not in ep_cols and c != projection.STEPS]
    if ep_cols and rows.num_rows:
        rows = join_episodes(lake, rows, ep_cols, step_fields)
    elif ep_cols:
        schema = projection.projected_schema(lake.dataset("episodes").schema, ep_cols, step_fields)
        for f in schema:
            rows = rows.append_column(f, pa.nulls(0, f.type))
    if post_filter is not None:
        rows = rows.filter(post_filter)
    return rows.select(cols)


def join_episodes(lake: Lake, rows: pa.Table, ep_cols: list[str], step_fields: Sequence[str] | None) -> pa.Table:
    """rows + the episode columns `ep_cols`, matched on episode_id (inner join, rows' order kept)."""
    ids = rows.column("episode_id").combine_chunks()
    rounds = pc.unique(rows.column("round").combine_chunks())
    # a pile row's round is its episode's, and episodes are written per round: file statistics prune the rest
    flt = pc.field("round").isin(rounds) & pc.field("episode_id").isin(ids)
    eps = projection.read(lake, "episodes", ["episode_id", "round", *ep_cols], step_fields=step_fields, filter=flt)
    pos = pc.index_in(ids, value_set=eps.column("episode_id").combine_chunks())
    found = pc.is_valid(pos)
    if not pc.all(found).as_py():
        rows, pos = rows.filter(found), pos.filter(found)
    eps = eps.take(pos)
    for c in ep_cols:
        rows = rows.append_column(eps.schema.field(c), eps.column(c))
    return rows


def pile_ids(lake: Lake, round: int | None = None) -> pa.Array:
    """Episode ids in either pile (of episodes of `round` only, when given: cheap, the piles carry `round`)."""
    flt = None if round is None else pc.field("round") == round
    return pa.concat_arrays(
        [lake.read(p, ["episode_id"], filter=flt).column("episode_id").combine_chunks() for p in PILES]
    )
