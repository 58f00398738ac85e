"""The consumer's bookkeeping without a broker: readiness, positions, end offsets, holds and readings again,
fed the way the consumer feeds it (``MetadataConsumer._poll``), one table of named cases per question."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from consumers.ledger import (
    BEHIND_GRACE_S,
    ConsumerLedger,
    FetchRead,
    NotReady,
    Progress,
    Reassignment,
    Registration,
)
from rlmm.records import TopicIdPartition

A = TopicIdPartition(bytes(range(16)), "orders", 0)
B = TopicIdPartition(bytes(range(16)), "orders", 1)  # one metadata partition (0) holds both: num_partitions=1


@dataclass(frozen=True)
class Fetch:
    """What the client returned: records (offset, whether applying it threw), the partition's end."""

    ok: range = range(0)
    failed: tuple[int, ...] = ()
    eof: int | None = None  # the fetch reached the end: the next offset
    high: int | None = None  # the high watermark the fetch reported


@dataclass(frozen=True)
class Register:
    tp: TopicIdPartition


@dataclass(frozen=True)
class Hold:
    limits: dict[int, int] = field(default_factory=dict)


Step = Fetch | Register | Hold


def feed(ledger: ConsumerLedger, fetch: Fetch, now: float = 0.0) -> list[TopicIdPartition]:
    """One poll of metadata partition 0, as the consumer does it; the partitions it made ready."""
    read = FetchRead()
    offsets = sorted([(o, False) for o in fetch.ok] + [(o, True) for o in fetch.failed])
    for offset, failed in offsets:
        assert ledger.below_position(0, offset) is None
        if not ledger.hold_at(read, 0, offset):
            ledger.read(read, 0, offset, failed)
    if fetch.eof is not None and 0 not in read.held:
        ledger.reached_end(read, 0, fetch.eof)
    if fetch.high is not None:
        for mp in read.seen | read.held.keys():
            assert ledger.end_reported(mp, fetch.high, now) is None
    ledger.rereads_done(read.seen)
    for mp in read.held:
        ledger.held_at(mp)
    return ledger.now_ready(read.seen)


def run(steps: list[Step]) -> tuple[ConsumerLedger, list[TopicIdPartition]]:
    """A ledger on a new view, fed the steps; the partitions that became ready, in order."""
    ledger = ConsumerLedger(num_partitions=1, assign_all=False)
    ledger.loaded()
    ready: list[TopicIdPartition] = []
    for step in steps:
        if isinstance(step, Register):
            ledger.register(step.tp, {})
            ledger.reassign()
        elif isinstance(step, Hold):
            ledger.set_limits(step.limits)
        else:
            ready += feed(ledger, step)
    return ledger, ready


@pytest.mark.parametrize(
    ("steps", "ready", "position"),
    [
        pytest.param([Register(A), Fetch(eof=0, high=0)], [A], 0, id="empty-metadata-partition-ready-at-first-fetch"),
        pytest.param([Register(A), Fetch(ok=range(5), high=10)], [], 5, id="bootstrap-waits-for-the-first-fetch-end"),
        pytest.param(
            [Register(A), Fetch(ok=range(5), high=10), Fetch(ok=range(5, 10), high=10)],
            [A],
            10,
            id="bootstrap-ready-at-that-end",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(5), high=10), Fetch(ok=range(5, 10), high=25)],
            [A],
            10,
            id="records-written-later-do-not-delay-readiness",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(9), failed=(9,), high=10)],
            [],
            10,
            id="a-record-that-threw-is-not-read",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(8), failed=(8, 9), high=10), Fetch(eof=10, high=10)],
            [],
            10,
            id="the-end-of-the-partition-does-not-pass-failed-records",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(9), failed=(9,), high=10), Fetch(ok=range(10, 11), high=11)],
            [A],
            11,
            id="a-record-handled-after-failed-ones-reads-them",
        ),
        pytest.param(
            [Register(A), Register(B), Fetch(ok=range(4), high=4)],
            [A, B],
            4,
            id="partitions-of-one-metadata-partition-ready-together",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(4), high=4), Register(B), Fetch(ok=range(3), high=6)],
            [A],
            3,
            id="a-partition-registered-later-waits-for-a-new-reading-from-the-beginning",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(4), high=4), Register(B), Fetch(ok=range(6), high=6)],
            [A, B],
            6,
            id="then-ready-at-the-end-seen-after-its-registration",
        ),
        pytest.param(
            [Hold({0: 5}), Register(A), Fetch(ok=range(10), high=10)],
            [],
            5,
            id="a-hold-stops-reading-before-the-end",
        ),
        pytest.param(
            [Hold({0: 5}), Register(A), Fetch(ok=range(10), high=10), Hold({}), Fetch(ok=range(5, 10), high=10)],
            [A],
            10,
            id="released-it-reads-on-to-the-end",
        ),
    ],
)
def test_readiness(steps: list[Step], ready: list[TopicIdPartition], position: int) -> None:
    ledger, became_ready = run(steps)
    assert became_ready == ready
    assert ledger.waiting() == len(ledger.registered) - len(ready)
    assert ledger.progress()[0].position == position


@pytest.mark.parametrize(
    ("steps", "reason", "stuck"),
    [
        pytest.param(
            [Register(A)],
            "waits for the first fetch of metadata partition 0 (reading it from the beginning)",
            False,
            id="registered-not-fetched-yet",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(5), high=10)],
            "reads metadata partition 0 up to offset 10: at offset 5",
            False,
            id="catching-up",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(9), failed=(9,), high=10)],
            "waits for a record after offset 9 of metadata partition 0, which failed",
            True,
            id="the-metadata-partition-ends-with-a-record-that-threw",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(8), failed=(8, 9), high=10), Fetch(eof=10, high=10)],
            "waits for a record after offset 9 of metadata partition 0, which failed",
            True,
            id="the-last-of-several-that-threw-is-named",
        ),
        pytest.param(
            [Register(A), Fetch(ok=range(9), failed=(9,), high=10), Fetch(failed=(10,), high=12)],
            "waits for a record after offset 10 of metadata partition 0, which failed",
            False,
            id="not-stuck-while-records-are-left-to-read",
        ),
        pytest.param(
            [Hold({0: 5}), Register(A), Fetch(ok=range(10), high=10)],
            "waits at offset 5 of metadata partition 0, where a hold stops reading it",
            False,
            id="held",
        ),
    ],
)
def test_what_a_partition_that_is_not_ready_waits_for(steps: list[Step], reason: str, stuck: bool) -> None:
    ledger, _ = run(steps)
    assert ledger.not_ready() == [NotReady(0, [A], reason, stuck)]


def test_ready_partitions_wait_for_nothing_and_waiting_ones_are_named_together() -> None:
    ledger, _ = run([Register(A), Fetch(eof=0, high=0)])
    assert ledger.not_ready() == []
    ledger, _ = run([Register(A), Register(B), Fetch(ok=range(3), failed=(3,), high=4)])
    [waits] = ledger.not_ready()
    assert waits.describe() == (
        "2 partitions (AAECAwQFBgcICQoLDA0ODw:orders:0, AAECAwQFBgcICQoLDA0ODw:orders:1) are not ready: "
        "each waits for a record after offset 3 of metadata partition 0, which failed"
    )
    [single] = restored({0: 41}, (A, False)).not_ready()  # a restart: the end offset comes with the first fetch
    assert single.describe() == (
        "partition AAECAwQFBgcICQoLDA0ODw:orders:0 is not ready: it waits for the end offset of metadata partition 0, "
        "which the next fetch reports"
    )


def restored(applied: dict[int, int], *partitions: tuple[TopicIdPartition, bool], reread: int | None = None):
    """A ledger as a restarted consumer loads it: the view's offsets, its assigned partitions (removed or
    not), a reading again a killed run left unfinished."""
    ledger = ConsumerLedger(num_partitions=1, assign_all=False)
    ledger.load_offsets(applied)
    if reread is not None:
        ledger.resume_reread(0, reread)
    for tp, removed in partitions:
        ledger.restore(tp, waits=not removed)
    ledger.loaded()
    return ledger


@pytest.mark.parametrize(
    ("ledger", "positions", "assignment", "waiting"),
    [
        pytest.param(restored({}), {}, Reassignment([], {}, [], [], {}), 0, id="nothing-registered-nothing-assigned"),
        pytest.param(
            restored({}, (A, False)), {0: None}, Reassignment([], {0: 0}, [], [], {}), 1, id="never-read-from-start"
        ),
        pytest.param(
            restored({0: 41}, (A, False)),
            {0: 42},
            Reassignment([], {0: 42}, [], [], {}),
            1,
            id="restart-resumes-after-the-view-offset-and-waits",
        ),
        pytest.param(
            restored({0: 41}, (A, True)),
            {0: 42},
            Reassignment([], {0: 42}, [], [], {}),
            0,
            id="a-removed-partition-does-not-wait",
        ),
        pytest.param(
            restored({0: 41}, (A, False), reread=30),
            {0: None},
            Reassignment([], {0: 0}, [], [], {0: 30}),
            1,
            id="an-unfinished-reading-again-starts-over",
        ),
    ],
)
def test_restart(ledger: ConsumerLedger, positions: dict, assignment: Reassignment, waiting: int) -> None:
    assert ledger.positions == positions
    assert ledger.reassign() == assignment
    assert ledger.waiting() == waiting
    assert ledger.reassign() == Reassignment([], {}, [], [], {})  # nothing changed since


def test_registering_on_a_metadata_partition_read_before_rewinds_it() -> None:
    ledger = restored({0: 41}, (A, False))
    ledger.reassign()
    assert ledger.register(A, {0: 42}) is None  # followed already
    assert ledger.register(B, {0: 42}) == Registration(0, 41)
    assert ledger.reassign() == Reassignment([], {}, [], [0], {0: 41})
    assert ledger.positions[0] is None  # known again at the next fetch
    read = FetchRead()
    for offset in range(41):
        ledger.read(read, 0, offset, failed=False)
    assert ledger.rereads_done([0]) == []  # offset 41, the last one applied before, not read yet
    ledger.read(read, 0, 41, failed=False)
    assert ledger.rereads_done([0]) == [0] and ledger.reread_until == {}


@pytest.mark.parametrize(
    ("limits", "released"),
    [
        pytest.param({}, [0], id="no-limits-release-all"),
        pytest.param({1: 3}, [0], id="a-limit-elsewhere-releases"),
        pytest.param({0: 6}, [0], id="a-higher-limit-releases"),
        pytest.param({0: 5}, [], id="the-same-limit-keeps-the-hold"),
        pytest.param({0: 2}, [], id="a-lower-limit-keeps-the-hold"),
    ],
)
def test_changing_limits_of_a_held_partition(limits: dict[int, int], released: list[int]) -> None:
    ledger, _ = run([Hold({0: 5}), Register(A), Fetch(ok=range(10), high=10)])
    assert ledger.held == {0} and ledger.positions[0] == 5
    assert ledger.set_limits(limits) == released
    assert ledger.held == ({0} - set(released))


def test_reading_again_ends_a_hold() -> None:
    ledger, _ = run([Hold({0: 5}), Register(A), Fetch(ok=range(10), high=10)])
    ledger.register(B, {0: 5})
    assert ledger.reassign() == Reassignment([], {}, [0], [0], {0: 4})
    assert ledger.held == set()


@pytest.mark.parametrize(
    ("position", "offset", "below"),
    [
        pytest.param(None, 0, None, id="unknown-position-takes-anything"),
        pytest.param(10, 10, None, id="the-next-offset"),
        pytest.param(10, 12, None, id="a-gap-is-fine"),
        pytest.param(10, 9, 10, id="below-the-next-offset"),
    ],
)
def test_offsets_going_back(position: int | None, offset: int, below: int | None) -> None:
    ledger = ConsumerLedger(1, assign_all=True)
    ledger.positions[0] = position
    assert ledger.below_position(0, offset) == below


@pytest.mark.parametrize(
    ("reports", "behind"),
    [
        pytest.param([(10, 0.0)], None, id="end-at-the-position"),
        pytest.param([(8, 0.0)], None, id="end-below-for-a-moment"),
        pytest.param([(8, 0.0), (8, BEHIND_GRACE_S)], 10, id="end-below-for-the-grace"),
        pytest.param([(8, 0.0), (10, 1.0), (8, BEHIND_GRACE_S)], None, id="caught-up-meanwhile-restarts-the-grace"),
    ],
)
def test_end_below_the_position(reports: list[tuple[int, float]], behind: int | None) -> None:
    ledger = ConsumerLedger(1, assign_all=True)
    ledger.positions[0] = 10
    answers = [ledger.end_reported(0, end, now) for end, now in reports]
    assert answers[:-1] == [None] * (len(answers) - 1)
    assert answers[-1] == behind
    assert ledger.ends[0] == reports[-1][0]


@pytest.mark.parametrize(
    ("progress", "lag"),
    [
        pytest.param(Progress(None, 10), None, id="position-unknown"),
        pytest.param(Progress(4, None), None, id="end-unknown"),
        pytest.param(Progress(4, 10), 6, id="behind"),
        pytest.param(Progress(12, 10), 0, id="past-a-lagging-end"),
    ],
)
def test_lag(progress: Progress, lag: int | None) -> None:
    assert progress.lag == lag


def test_a_restart_keeps_holds_and_start_offsets_only() -> None:
    ledger, _ = run([Hold({0: 5}), Register(A), Fetch(ok=range(10), high=10)])
    ledger.load_offsets({0: 4})
    fresh = ledger.restarted()
    assert fresh.limits == {0: 5} and fresh.initial_positions == {0: 5}
    assert (fresh.registered, fresh.positions, fresh.held, fresh.ends) == ({}, {}, set(), {})


# ---- registrations per broker -----------------------------------------------------------------------------

HOLDER_CASES = {
    # (holder, "register" | "stop") steps -> whether A is still followed, and by whom
    "the last holder's stop ends it": ([(1, "register"), (2, "register"), (1, "stop"), (2, "stop")], set()),
    "another broker's registration keeps it": ([(1, "register"), (2, "register"), (1, "stop")], {2}),
    "a stop by a broker that never held it ends nothing": ([(1, "register"), (3, "stop")], {1}),
    "a registration without a broker id is a holder too": ([(-1, "register"), (1, "register"), (1, "stop")], {-1}),
    "a broker registering twice stops once": ([(1, "register"), (1, "register"), (1, "stop")], set()),
}


@pytest.mark.parametrize("steps, holders", HOLDER_CASES.values(), ids=HOLDER_CASES.keys())
def test_a_partition_is_followed_while_a_broker_holds_it(steps, holders) -> None:
    ledger = ConsumerLedger(num_partitions=1, assign_all=False)
    for holder, action in steps:
        if action == "register":
            ledger.register(A, {}, holder)
        else:
            ledger.unregister(A, holder)
    assert (A in ledger.registered) == bool(holders)
    assert ledger.holders.get(A, set()) == holders
    assert {holder for holder in holders if A in ledger.held_by(holder)} == holders


def test_a_partition_whose_holders_were_never_recorded_ends_at_the_first_stop() -> None:
    """A view of an earlier release, or restored from a snapshot: registrations without holders."""
    ledger = ConsumerLedger(num_partitions=1, assign_all=False)
    ledger.restore(A, waits=True)
    assert ledger.unregister(A, 7)
    assert A not in ledger.registered
