"""Regenerates the column reference in docs/queries.md from the views a fresh lake defines:
`python -m storage.column_doc docs/queries.md`."""

from __future__ import annotations

from storage.analyst_views import BEGIN, END, column_reference


def refresh_doc(path: str) -> bool:
    """Rewrite the generated column reference between the markers of a Markdown file; True when it changed."""
    import tempfile
    from pathlib import Path

    from storage.lake import Lake

    with tempfile.TemporaryDirectory() as tmp:
        ref = column_reference(Lake.open(Path(tmp) / "lake", create=True).duckdb())
    p = Path(path)
    text = p.read_text()
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{ref}\n{END}{tail}"
    if new != text:
        p.write_text(new)
    return new != text


if __name__ == "__main__":  # python -m storage.column_doc docs/queries.md
    import sys

    for f in sys.argv[1:]:
        print(f"{f}: {'updated' if refresh_doc(f) else 'up to date'}")
