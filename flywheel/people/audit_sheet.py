"""The audit sheet: a self-contained HTML page to read, and a CSV to fill in, for one audit sample.

The HTML inlines every screenshot as a data URI read from the lake's object store (local or S3), so the page can
be mailed or opened offline; each action's point is marked on its screenshot. The CSV has one row per episode
with empty `verdict` (good | bad), `note` and `auditor` columns; `flywheel audit record` reads it back.
Text that could be a spreadsheet formula is prefixed with a quote in the CSV (CSV injection).
"""

from __future__ import annotations

import base64
import csv
import io
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from flywheel.people.audit import AuditSample
from storage.errors import LakeError
from storage.lake import Lake
from storage.piles import read_pile

SHEET_HTML = "sheet.html"
SHEET_CSV = "verdicts.csv"
SHEET_META = "sample.json"
CSV_COLUMNS = (
    "episode_id",
    "round",
    "seed",
    "source",
    "validators",
    "task_id",
    "instruction",
    "verdict",
    "note",
    "auditor",
)

_MIME = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif", b"RIFF": "image/webp"}

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Audit: round {{ s.round }}, seed {{ s.seed }}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
.ep { border-top: 3px solid #888; margin-top: 2em; padding-top: 1em; }
.meta { color: #555; font-size: 0.9em; }
.step { display: flex; gap: 1.5em; margin: 1em 0; align-items: flex-start; }
.shot { position: relative; display: inline-block; flex: 0 0 auto; }
.shot img { max-width: 640px; border: 1px solid #ccc; display: block; }
.mark { position: absolute; width: 14px; height: 14px; margin: -9px 0 0 -9px; border: 2px solid red;
        border-radius: 50%; pointer-events: none; }
.mark.end { border-color: blue; }
.noshot { width: 320px; padding: 1em; background: #f4f4f4; color: #777; }
code { background: #f4f4f4; padding: 0 .2em; }
pre { white-space: pre-wrap; }
</style></head><body>
<h1>Audit sheet: round {{ s.round }}</h1>
<p class="meta">{{ s.episodes.height }} of {{ s.population }} SFT episodes drawn with seed {{ s.seed }}
{% if s.stratify %}, stratified by {{ s.stratify|join(", ") }}{% endif %}; SFT pile version {{ s.pile_version }};
lake {{ lake }}; made {{ made }}.</p>
<p>For each episode decide: is this a <b>good</b> demonstration of the instruction (every step sensible, the task
done), or <b>bad</b>? Write <code>good</code> or <code>bad</code> in the <code>verdict</code> column of
<code>{{ csv_name }}</code> (with a note and your name), then run <code>flywheel audit record {{ csv_name }}</code>.</p>
{% for e in episodes %}
<div class="ep" id="{{ e.episode_id }}">
<h2>{{ loop.index }}. {{ e.instruction }}</h2>
<p class="meta">episode <code>{{ e.episode_id }}</code> · source {{ e.source }} · task {{ e.task_id }}
· validators {{ e.validators }} · outcome {{ e.outcome }}{% if e.final_answer %} · answer <code>{{ e.final_answer }}</code>{% endif %}
{% if e.reference_answer %} · reference <code>{{ e.reference_answer }}</code>{% endif %}</p>
{% for st in e.steps %}
<div class="step">
  {% if st.img %}<div class="shot"><img src="{{ st.img }}" alt="screenshot before step {{ st.index }}">
    {% for m in st.marks %}<span class="mark{{ ' end' if m.end else '' }}" style="left:{{ m.left }}%;top:{{ m.top }}%"></span>{% endfor %}
  </div>{% else %}<div class="noshot">{{ st.noshot }}{% if st.observation %}<pre>{{ st.observation }}</pre>{% endif %}</div>{% endif %}
  <div><p><b>Step {{ st.index }}</b></p>
  <p><b>Thought:</b> {{ st.thought or "(none)" }}</p>
  <p><b>Action:</b> <code>{{ st.action }}</code></p></div>
</div>
{% endfor %}
</div>
{% endfor %}
</body></html>
"""


@dataclass(frozen=True)
class Sheet:
    html: Path
    csv: Path
    meta: Path
    n_episodes: int
    n_screenshots: int
    missing_screenshots: int


def _data_uri(data: bytes) -> str:
    mime = next((m for magic, m in _MIME.items() if data.startswith(magic)), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _size(data: bytes) -> tuple[int, int] | None:
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size
    except Exception:  # noqa: BLE001 - an unreadable image still shows (the browser decides), without marks
        return None


def _marks(step: dict[str, Any], size: tuple[int, int] | None) -> list[dict[str, Any]]:
    if not size or step.get("x") is None or step.get("y") is None:
        return []
    w, h = size
    out = [{"left": round(100 * step["x"] / w, 3), "top": round(100 * step["y"] / h, 3), "end": False,
            "x": step["x"], "y": step["y"]}]  # fmt: skip
    if step.get("x2") is not None and step.get("y2") is not None:
        out.append({"left": round(100 * step["x2"] / w, 3), "top": round(100 * step["y2"] / h, 3), "end": True,
                    "x": step["x2"], "y": step["y2"]})  # fmt: skip
    return out


def episode_steps(lake: Lake, episode: dict[str, Any]) -> tuple[list[dict[str, Any]], int, int]:
    """An episode's steps as an auditor sees them: each with its screenshot inlined (`img`, a data URI, and its
    `size`) and the action's point(s) as `marks` (pixels, and percent of the image); returns (steps, screenshots shown, screenshots missing).
    Shared by the audit sheet and the workbench's audit page."""
    steps, shown, gone = [], 0, 0
    for st in episode.get("steps") or []:
        img, size, noshot = None, None, "(no screenshot)"
        if st.get("screenshot_uri"):
            try:
                data = lake.objects.get_object(st["screenshot_uri"])
                img, size = _data_uri(data), _size(data)
                shown += 1
            except LakeError as e:
                gone += 1
                noshot = f"(screenshot unavailable: {e})"
        steps.append({**st, "img": img, "size": size, "marks": _marks(st, size), "noshot": noshot})
    return steps, shown, gone


def _cell(v: Any) -> str:
    s = "" if v is None else str(v)
    return "'" + s if s[:1] in ("=", "+", "-", "@", "\t", "\r") else s


def write_sheet(lake: Lake, s: AuditSample, out_dir: Path) -> Sheet:
    """Write sheet.html, verdicts.csv and sample.json for the sample into out_dir (created if missing)."""
    from jinja2 import Environment

    ids = s.episodes.get_column("episode_id").to_list()
    rows = read_pile(
        lake, "sft", version=s.pile_version, filter=pc.field("episode_id").isin(pa.array(ids, pa.string()))
    ).to_pylist()
    by_id = {r["episode_id"]: r for r in rows}
    extra = {r["episode_id"]: r for r in s.episodes.iter_rows(named=True)}
    n_shots = missing = 0
    episodes = []
    for eid in ids:
        r = by_id[eid]
        steps, shown, gone = episode_steps(lake, r)
        n_shots, missing = n_shots + shown, missing + gone
        episodes.append({**r, "validators": extra[eid]["validators"], "steps": steps})
    made = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    env = Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    html = env.from_string(_TEMPLATE).render(s=s, episodes=episodes, lake=str(lake.uri), made=made, csv_name=SHEET_CSV)
    out_dir.mkdir(parents=True, exist_ok=True)
    p_html, p_csv, p_meta = out_dir / SHEET_HTML, out_dir / SHEET_CSV, out_dir / SHEET_META
    p_html.write_text(html, encoding="utf-8")
    with p_csv.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for e in episodes:
            w.writerow(
                [_cell(e["episode_id"]), e["round"], s.seed, _cell(e["source"]), _cell(e["validators"]), _cell(e["task_id"]),
                 _cell(e["instruction"]), "", "", ""]
            )  # fmt: skip
    meta = {
        "round": s.round, "seed": s.seed, "n_requested": s.n_requested, "n_drawn": s.episodes.height,
        "population": s.population, "stratify": list(s.stratify), "sft_version": s.pile_version, "lake": str(lake.uri),
        "strata": {k: {"population": p, "drawn": d} for k, (p, d) in s.strata.items()}, "made_at": made,
        "episode_ids": ids,
    }  # fmt: skip
    p_meta.write_text(json.dumps(meta, indent=2))
    from storage.pins import pin_version

    pin_version(lake, "sft", s.pile_version, f"audit sample round {s.round} seed {s.seed}", str(out_dir.resolve()))
    return Sheet(p_html, p_csv, p_meta, len(episodes), n_shots, missing)
