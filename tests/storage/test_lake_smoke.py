"""Smoke: the same basic append/read works on a local and an S3 lake."""

from schemas.records import Episode, Step, episodes_to_table


def _eps(n: int) -> list[Episode]:
    return [
        Episode("s1", "rollout", f"task-{i}", "open the menu", (Step(0, "click(point='<point>10 20</point>')", "go"),))
        for i in range(n)
    ]


def test_append_is_idempotent(any_lake) -> None:
    t = episodes_to_table(_eps(5))
    assert any_lake.append("episodes", t) == 5
    assert any_lake.append("episodes", t) == 0
    assert any_lake.count("episodes") == 5
    uri = any_lake.objects.put_object(b"png-bytes", ".png")
    assert any_lake.objects.get_object(uri) == b"png-bytes"
