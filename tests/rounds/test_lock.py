"""The lake lock: one holder at a time, a clear message for the second, takeover of an expired lease."""

import json
import os
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


def test_a_holder_killed_inside_its_swap_does_not_block_the_takeover(lake) -> None:
    """kill -9 while a holder updates its stage name leaves the takeover guard behind, naming a dead process."""
    import socket
    import subprocess
    import sys
    from pathlib import Path

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_holder = f"{socket.gethostname()}:{gone.stdout.strip()}"
    dead = LakeLock(lake, "round", what="round 1 (stage annotate)", heartbeat=False)
    dead.holder = dead_holder
    dead.acquire()  # never released, and its process is gone
    lock = Path(lake.uri.key("locks/round.json"))
    lock.with_name("round.json.takeover").write_text(dead_holder)  # the guard it held when it was killed
    t0 = time.monotonic()
    with LakeLock(lake, "round", what="round 1 (resumed)", heartbeat=False) as lease:
        assert json.loads(lock.read_text())["token"] == lease.token
    assert time.monotonic() - t0 < 5  # at once, not after the guard's 30 s
    # a live holder's guard still blocks
    lock.with_name("round.json.takeover").write_text(f"{socket.gethostname()}:{os.getpid()}")
    dead.acquire()
    with pytest.raises(LockHeld, match="taking it over now"):
        LakeLock(lake, "round", heartbeat=False).acquire()


def test_a_guard_is_never_left_naming_no_one(lake, monkeypatch) -> None:
    """A process killed while taking the guard leaves either no guard or one that names it, never an empty one (an
    empty guard counted as alive and blocked the resume after a kill -9 for 30 s)."""
    from pathlib import Path

    from storage import lock as lock_mod

    guard = Path(lake.uri.key("locks")) / "round.json.takeover"
    guard.parent.mkdir(parents=True, exist_ok=True)

    def killed(*a, **k):  # the process dies after writing its name, before the guard exists
        raise SystemExit("killed")

    monkeypatch.setattr(lock_mod.os, "link", killed)
    with pytest.raises(SystemExit):
        lock_mod._make_guard(guard, "host:123")
    assert not guard.exists()
    monkeypatch.undo()
    assert lock_mod._make_guard(guard, "host:123") and guard.read_text() == "host:123"
    assert not lock_mod._make_guard(guard, "host:456") and guard.read_text() == "host:123"  # taken: refused
    assert [p.name for p in guard.parent.iterdir()] == ["round.json.takeover"]  # no written file left beside it
