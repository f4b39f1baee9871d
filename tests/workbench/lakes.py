"""Lakes with routed sandbox episodes for the audit and lead tests."""

from __future__ import annotations


def routed_round(lake, n: int = 30, round: int = 1) -> int:
    """Sandbox attempts (the expert, and the novice for failures) landed as think-aloud episodes with real
    screenshots, routed by the real validators: returns the SFT pile's size for the round."""
    from sandbox.demonstrators import Expert, Novice
    from sandbox.rollout import run_attempt, to_episode
    from schemas.records import episodes_to_table
    from storage.objects import sha256_hex
    from training.envs import env_backend
    from validators.routing import route_round

    def ref(png: bytes) -> tuple[str, str]:
        return lake.objects.put_object(png, ".png"), sha256_hex(png)

    eps = []
    for i, info in enumerate(env_backend("sandbox").training_tasks(n, 11)):
        a = run_attempt(info.payload, Expert() if i % 4 else Novice(seed=i), screenshots=True)
        eps.append(to_episode(a, "think_aloud", f"audit-test-{i}", round=round, screenshot_ref=ref,
                              annotator=f"anon-{i % 3}"))  # fmt: skip
    lake.append("episodes", episodes_to_table(eps))
    route_round(lake, round)
    return lake.read("sft", ["episode_id"]).num_rows
