"""Serve the deployments declared in prefect.yaml from one process (`flywheel serve`).

prefect.yaml stays the single list of deployments: `prefect deploy --all` reads it for work pools, and this
module reads the same entries (name, entrypoint, parameters, schedules) and serves them with `prefect.serve`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def load_deployments(path: Path, only: list[str] | None = None) -> list[dict[str, Any]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run from the project folder or pass --file")
    doc = yaml.safe_load(path.read_text()) or {}
    deps = doc.get("deployments") or []
    if only:
        unknown = set(only) - {d["name"] for d in deps}
        if unknown:
            raise ValueError(f"no deployment named {', '.join(sorted(unknown))} in {path}")
        deps = [d for d in deps if d["name"] in only]
    return deps


def to_runner_deployments(path: Path, only: list[str] | None = None) -> list[Any]:
    """RunnerDeployments for each entry; entrypoints are resolved relative to the file's folder."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.schedules import Cron, Interval

    out = []
    for d in load_deployments(path, only):
        file, _, fn = d["entrypoint"].partition(":")
        flow = load_flow_from_entrypoint(f"{(path.parent / file).resolve()}:{fn}")
        schedules = []
        for s in d.get("schedules") or []:
            if "cron" in s:
                schedules.append(Cron(s["cron"], timezone=s.get("timezone", "UTC")))
            elif "interval" in s:
                schedules.append(Interval(s["interval"]))
        out.append(flow.to_deployment(name=d["name"], parameters=d.get("parameters") or {}, schedules=schedules or None,
                                      description=d.get("description")))  # fmt: skip
    return out


def serve_file(path: Path, only: list[str] | None = None) -> None:
    from prefect import serve

    serve(*to_runner_deployments(path, only))
