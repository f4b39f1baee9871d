"""Panel specs: each panel is `<id>.sql` (a DuckDB query over the lake's table views) plus `<id>.yaml` (how to draw it).

The SQL stays a plain file so analysts can run it as is (`flywheel sql "$(cat dashboards/panels/pass_rate.sql)"`);
the YAML only names columns of its result. Specs are validated with pydantic so a typo fails with the file and
field named, not with a blank chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dashboards.format import Format

PANELS_DIR = Path(__file__).resolve().parent / "panels"


class Wilson(BaseModel):
    """Fill `rate`, `lo`, `hi` with the Wilson 95% interval of k successes in n trials where they are null."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    k: str
    n: str
    rate: str
    lo: str
    hi: str


class TableSpec(BaseModel):
    """The numbers beneath the chart: the chart's own rows (pivoted by series) or a separate summary query."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    query: str | None = None  # another .sql file in the panels folder; default: the chart's query
    pivot: bool | None = None  # rows = x, one column per series; default: true when the chart has series
    descending: bool = True  # newest round first
    columns: dict[str, str] = Field(default_factory=dict)  # column -> header label (also selects and orders)


class PanelSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = ""
    title: str
    description: str = ""
    order: int = 100
    chart: Literal["line", "bar", "hbar"]
    x: str
    y: str
    series: str | None = None
    facet: str | None = None
    lo: str | None = None
    hi: str | None = None
    interval_style: Literal["band", "whisker"] = "band"
    stacked: bool = False
    x_label: str = ""
    y_label: str = ""
    x_format: Format = "auto"
    y_format: Format = "auto"
    formats: dict[str, Format] = Field(default_factory=dict)  # table column -> format
    y_min: float | None = None
    y_max: float | None = None
    colors: dict[str, str] = Field(default_factory=dict)  # series name -> colour
    series_sort: Literal["query", "natural"] = "query"  # natural: "round 2" before "round 10"
    wide: bool = False  # span the whole page width (facets side by side)
    wilson: Wilson | None = None
    table: TableSpec = Field(default_factory=TableSpec)
    empty: str  # what to do when there is nothing to show
    sql: str = ""
    table_sql: str | None = None
    sql_path: str = ""

    @model_validator(mode="after")
    def _interval_pair(self) -> PanelSpec:
        if (self.lo is None) != (self.hi is None):
            raise ValueError("lo and hi go together")
        return self


def load_panels(folder: Path = PANELS_DIR) -> tuple[PanelSpec, ...]:
    """Every panel in `folder`, in display order (read afresh each time, so edits show on the next render).
    A bad spec raises ValueError naming the file."""
    root = Path(folder)
    panels = []
    for yml in sorted(root.glob("*.yaml")):
        sql_path = yml.with_suffix(".sql")
        if not sql_path.is_file():
            raise ValueError(f"panel {yml.name}: no {sql_path.name} beside it")
        try:
            raw = yaml.safe_load(yml.read_text()) or {}
            table = raw.get("table") or {}
            table_sql = (root / table["query"]).read_text() if table.get("query") else None
            panels.append(
                PanelSpec(
                    **raw,
                    id=yml.stem,
                    sql=sql_path.read_text(),
                    table_sql=table_sql,
                    sql_path=f"dashboards/panels/{sql_path.name}",
                )
            )
        except (ValidationError, yaml.YAMLError, OSError, TypeError) as e:
            raise ValueError(f"panel {yml.name}: {e}") from None
    return tuple(sorted(panels, key=lambda p: (p.order, p.id)))
