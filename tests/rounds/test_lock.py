"""The lake lock: one holder at a time, a clear message for the second, takeover of an expired lease."""

import json
import time

import pytest

from storage.lock import LakeLock, LockHeld


def test_second_holder_is_refused_with_who_and_since(any_lake) -> None:
    with LakeLock(any_lake, "round", what="round 3", heartbeat=False):
        with pytest.raises(LockHeld, match=r"round 3 is running .* since \d{4}-\d\d-\d\d"):
            LakeLock(any_lake, "round", what="round 4").acquire()
    # released: the next one gets it
    with LakeLock(any_lake, "round", what="round 4", heartbeat=False) as lease:
        assert lease.what == "round 4"


def test_expired_lease_is_taken_over(any_lake) -> None:
    dead = LakeLock(any_lake, "round", what="round 1", lease_s=0.5, heartbeat=False)
    dead.acquire()  # never released: a crashed holder
    time.sleep(0.7)
    with LakeLock(any_lake, "round", what="round 2", heartbeat=False) as lease:
        raw = json.loads(any_lake.objects.get_text("locks/round.json"))
        assert raw["token"] == lease.token and raw["what"] == "round 2"


def test_heartbeat_keeps_a_long_holder_alive(lake) -> None:
    with LakeLock(lake, "round", what="round 5", lease_s=0.6):
        time.sleep(1.5)  # longer than the lease: the heartbeat renews it
        with pytest.raises(LockHeld):
            LakeLock(lake, "round", heartbeat=False).acquire()
