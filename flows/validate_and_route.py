"""Prefect flow: validate a round's new episodes and route them into the piles (thin tasks over validators.routing)."""

from __future__ import annotations

from typing import Any

from prefect import flow, task

from storage.lake import Lake
from validators.registry import load_policy
from validators.routing import route_round


@task(retries=2, retry_delay_seconds=5)
def route_task(lake_uri: str, round: int, allow_failed_dq: bool, policy_path: str | None) -> dict[str, Any]:
    """Idempotent, so a retry after an I/O error repairs whatever the failed attempt left half done."""
    return route_round(
        Lake.open(lake_uri), round, policy=load_policy(policy_path), allow_failed_dq=allow_failed_dq
    ).as_dict()


@flow(name="validate-and-route")
def validate_and_route(
    round: int, lake: str, allow_failed_dq: bool = False, policy_path: str | None = None
) -> dict[str, Any]:
    """Route round `round` of the lake at `lake`; returns the round summary (also stored in `rounds`)."""
    return route_task(lake, round, allow_failed_dq, policy_path)
