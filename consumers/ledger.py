"""The consumer's bookkeeping per metadata partition, without Kafka, RocksDB or threads: which user partitions
are registered and which of them wait for readiness (and up to which end offset), where reading stands
(positions, end offsets, the last record read before a run of failed ones), what must be read again from the
beginning, and where a hold stops it. The consumer thread feeds it what the client fetched and asks it what
to tell the client and the view; other threads read copies (``progress``, ``registered``, ``waiting``,
``not_ready``: which partitions wait, and for what)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rlmm.records.model import TopicIdPartition
from rlmm.records.partitioner import metadata_partition
from rlmm.records.uuid import uuid_to_str
from rlmm.state.results import ApplyResult

# Where a reading from the beginning starts. Not the logical OFFSET_BEGINNING: offset 0 is the same once
# auto.offset.reset=earliest moves it to the log start (when retention removed it), and it spares a
# ListOffsets round trip, which Tansu answers only after ~0.5 s.
BEGINNING = 0
NO_BROKER = -1  # the holder of a registration made without a broker id (tools, ``rlmm serve --partition``)
EXAMPLES = 5  # partitions named where not-ready ones are reported
BEHIND_GRACE_S = 5.0  # how long an end offset may stay below the consumer's position (a new leader's high
# watermark can lag for a moment on Kafka) before the offsets count as gone backwards


@dataclass(frozen=True)
class Progress:
    """Where the consumer stands in one metadata partition."""

    position: int | None  # next offset to read (None: not known until the first fetch after a rewind)
    end: int | None  # end offset (high watermark) the broker last reported

    @property
    def lag(self) -> int | None:
        return None if self.position is None or self.end is None else max(0, self.end - self.position)


@dataclass(frozen=True)
class NotReady:
    """Registered partitions of one metadata partition that are not ready yet, and why."""

    metadata_partition: int
    partitions: list[TopicIdPartition]
    reason: str  # what they wait for, e.g. "waits for a record after offset 41 of metadata partition 7, which ..."
    # nothing the topic holds now can make them ready: the records after the last one read all failed, up to
    # the end; a later record must come (as in Kafka)
    stuck: bool

    @property
    def examples(self) -> list[str]:
        """A few of the partitions (``EXAMPLES``), as TOPIC_ID:TOPIC:PARTITION."""
        return [partition_text(tp) for tp in self.partitions[:EXAMPLES]]

    def describe(self) -> str:
        """The partitions (a few named) and what they wait for, in one sentence."""
        if len(self.partitions) == 1:
            return f"partition {partition_text(self.partitions[0])} is not ready: it {self.reason}"
        named = ", ".join(self.examples)
        more = len(self.partitions) - EXAMPLES
        return (
            f"{len(self.partitions)} partitions ({named}{f' and {more} more' if more > 0 else ''}) are not ready: "
            f"each {self.reason}"
        )


def partition_text(tp: TopicIdPartition) -> str:
    """A user partition as the command line takes it: TOPIC_ID:TOPIC:PARTITION."""
    return f"{uuid_to_str(tp.topic_id)}:{tp.topic}:{tp.partition}"


@dataclass(frozen=True)
class Registration:
    """A newly registered user partition: its metadata partition is read again from the beginning."""

    metadata_partition: int
    reread_until: int | None  # the offset that reading again must pass (None: never read before)


@dataclass(frozen=True)
class Reassignment:
    """What the client must do to follow the registrations, in this order."""

    unassign: list[int]
    assign: dict[int, int]  # metadata partition -> offset to start at
    resume: list[int]  # held partitions that are read again: a hold ends where reading starts again
    rewind: list[int]  # partitions already assigned that are read again from the beginning
    rereading: dict[int, int]  # partitions read again to load new registrations -> the offset to pass


@dataclass
class FetchRead:
    """What one fetch did, per metadata partition."""

    read: dict[int, int] = field(default_factory=dict)  # next offset after its last record read
    held: dict[int, int] = field(default_factory=dict)  # the first offset at or past its limit (not read)
    ended: set[int] = field(default_factory=set)  # partitions whose end the fetch reached
    failed: dict[int, dict[int, ApplyResult]] = field(default_factory=dict)  # offsets whose record threw, and how
    records: int = 0

    @property
    def seen(self) -> set[int]:
        """The partitions whose position this fetch reported."""
        return self.ended | self.read.keys()


class ConsumerLedger:
    def __init__(self, num_partitions: int, assign_all: bool) -> None:
        self.num_partitions = num_partitions
        self.assign_all = assign_all
        self.initial_positions: dict[int, int] = {}  # next offset per metadata partition when the view was opened
        self.limits: dict[int, int] = {}  # metadata partition -> offset it is read up to (``hold``)
        self.registered: dict[TopicIdPartition, int] = {}  # user partition -> its metadata partition
        # user partition -> the brokers whose registrations hold it (none recorded: a view of an older release)
        self.holders: dict[TopicIdPartition, set[int]] = {}
        self.pending: dict[int, dict[TopicIdPartition, int | None]] = {}  # mp -> not ready -> end offset to reach
        self.rewind: set[int] = set()  # metadata partitions to read again from the beginning
        self.reread_until: dict[int, int] = {}  # metadata partition read again -> the offset it must pass
        self.assigned: set[int] = set()
        self.positions: dict[int, int | None] = {}
        # metadata partition -> next offset after its last record that was handled or skipped, while the
        # records read after it all failed (Kafka's read offset does not pass a record that threw)
        self.read_before_failures: dict[int, int] = {}
        self.last_failure: dict[int, tuple[int, str]] = {}  # metadata partition -> its last record that failed, how
        self.ends: dict[int, int] = {}
        self.held: set[int] = set()
        self.behind_since: dict[int, float] = {}  # metadata partition -> since when its end is below its position

    def restarted(self) -> ConsumerLedger:
        """A ledger for a consumer that starts again on the same view: it keeps the holds and the offsets the
        view was first opened at, nothing the client did."""
        fresh = ConsumerLedger(self.num_partitions, self.assign_all)
        fresh.initial_positions = dict(self.initial_positions)
        fresh.limits = self.limits
        return fresh

    def metadata_partition_of(self, tp: TopicIdPartition) -> int:
        return metadata_partition(tp.topic_id, tp.partition, self.num_partitions)

    # ---- loading what the view holds --------------------------------------------------------------

    def load_offsets(self, applied: Mapping[int, int]) -> None:
        """The last offset the view applied per metadata partition: reading resumes after it."""
        for mp, offset in applied.items():
            self.initial_positions[mp] = offset + 1

    def resume_reread(self, mp: int, until: int) -> None:
        """A reading again from the beginning that a previous run did not finish: it starts over."""
        self.reread_until[mp] = until
        self.rewind.add(mp)

    def restore(self, tp: TopicIdPartition, waits: bool) -> None:
        """A partition the view has assigned; unless its metadata was removed it waits until caught up."""
        mp = self.registered[tp] = self.metadata_partition_of(tp)
        if waits:
            self.pending.setdefault(mp, {})[tp] = None

    def loaded(self) -> None:
        """Registrations loaded: the positions are known before the broker is; the end offsets come with it."""
        for mp in self.wanted():
            self.positions[mp] = None if mp in self.rewind else self.initial_positions.get(mp)

    # ---- registrations ------------------------------------------------------------------------------

    def register(
        self, tp: TopicIdPartition, applied: Mapping[int, int], holder: int = NO_BROKER
    ) -> Registration | None:
        """``holder`` (a broker id) registers a partition; a new one is followed (None: followed already).
        ``applied``: next offset the view has not applied per metadata partition."""
        self.holders.setdefault(tp, set()).add(holder)
        if tp in self.registered:
            return None
        mp = self.registered[tp] = self.metadata_partition_of(tp)
        self.pending.setdefault(mp, {})[tp] = None
        self.rewind.add(mp)
        until = None
        if applied.get(mp, 0) > 0:
            until = self.reread_until[mp] = applied[mp] - 1
        return Registration(mp, until)

    def unregister(self, tp: TopicIdPartition, holder: int = NO_BROKER) -> bool:
        """End ``holder``'s registration of a partition; True when that stops following it: it was followed,
        and no other holder is left (a partition whose holders were never recorded has none)."""
        holders = self.holders.get(tp, set())
        holders.discard(holder)
        if holders:
            return False
        self.holders.pop(tp, None)
        mp = self.registered.pop(tp, None)
        if mp is None:
            return False
        self.pending.get(mp, {}).pop(tp, None)
        return True

    def held_by(self, holder: int) -> list[TopicIdPartition]:
        """The partitions whose registrations ``holder`` holds."""
        return [tp for tp, holders in self.holders.items() if holder in holders]

    def wanted(self) -> set[int]:
        if self.assign_all:
            return set(range(self.num_partitions))
        return set(self.registered.values())

    def reassign(self) -> Reassignment:
        """Bring the assignment in line with the registrations and rewind what must be read again. Partitions
        waiting for readiness take their end offset from the next fetch."""
        wanted = self.wanted()
        gone = self.assigned - wanted
        for mp in gone:
            self.positions.pop(mp, None)
            self.read_before_failures.pop(mp, None)
            self.ends.pop(mp, None)
            self.held.discard(mp)
        starts = {}
        for mp in sorted(wanted - self.assigned):
            stored = None if mp in self.rewind else self.initial_positions.get(mp)
            starts[mp] = BEGINNING if stored is None else stored
            self.positions[mp] = stored
            self.read_before_failures.pop(mp, None)
        rewind = sorted(self.rewind & (self.assigned - gone))
        resume = [mp for mp in rewind if mp in self.held]
        self.held.difference_update(resume)
        for mp in rewind:
            self.positions[mp] = None
            self.read_before_failures.pop(mp, None)
        rereading = {mp: self.reread_until[mp] for mp in sorted(self.rewind & wanted & self.reread_until.keys())}
        self.rewind.clear()
        self.assigned = wanted
        return Reassignment(sorted(gone), starts, resume, rewind, rereading)

    # ---- holds --------------------------------------------------------------------------------------

    def set_limits(self, limits: dict[int, int]) -> list[int]:
        """Read each listed metadata partition only below its offset; returns the held partitions to resume."""
        self.limits = limits
        release = [mp for mp in self.held if mp not in limits or limits[mp] > (self.positions.get(mp) or 0)]
        self.held.difference_update(release)
        return release

    def hold_at(self, fetch: FetchRead, mp: int, offset: int) -> bool:
        """Whether the record at ``offset`` is at or past the partition's limit (then it is not read)."""
        limits = self.limits
        if not limits or mp not in limits or offset < limits[mp]:
            return False
        fetch.held.setdefault(mp, offset)
        return True

    def held_at(self, mp: int) -> None:
        """The client paused the partition at the offset ``hold_at`` reported."""
        self.held.add(mp)

    # ---- reading ------------------------------------------------------------------------------------

    def below_position(self, mp: int, offset: int) -> int | None:
        """The next offset expected when ``offset`` lies below it (the offsets went back), else None."""
        expected = self.positions.get(mp)
        return expected if expected is not None and offset < expected else None

    def read(self, fetch: FetchRead, mp: int, offset: int, failed: bool, what: str = "failed") -> None:
        """A record was handled or skipped, or (``failed``) its decoding, routing or handling threw; ``what``
        became of it then, after "which" ("was quarantined ...")."""
        if failed:
            self.read_before_failures.setdefault(mp, self.positions.get(mp) or BEGINNING)
            self.last_failure[mp] = offset, what
        else:
            self.read_before_failures.pop(mp, None)
        self.positions[mp] = fetch.read[mp] = offset + 1
        fetch.records += 1

    def reached_end(self, fetch: FetchRead, mp: int, offset: int) -> None:
        """The fetch reached the end of the partition: ``offset`` is the next one to read."""
        self.positions[mp] = offset
        fetch.ended.add(mp)

    def end_reported(self, mp: int, end: int, now: float) -> int | None:
        """The partition's end offset from the last fetch. Returns the position when the end has stayed below
        it for ``BEHIND_GRACE_S`` (the partition lost records), else None."""
        self.ends[mp] = end
        position = self.positions.get(mp)
        if position is None or end >= position:
            self.behind_since.pop(mp, None)
        elif now - self.behind_since.setdefault(mp, now) >= BEHIND_GRACE_S:
            return position
        return None

    # ---- readiness ----------------------------------------------------------------------------------

    def now_ready(self, mps: Iterable[int]) -> list[TopicIdPartition]:
        """The waiting partitions of these metadata partitions that are read up to their end offset now; they
        stop waiting. A partition waiting for its end offset takes the one last reported."""
        ready = []
        for mp in mps:
            waiting = self.pending.get(mp)
            position = self.read_before_failures.get(mp, self.positions.get(mp))
            if not waiting or position is None:
                continue
            end = max(self.ends.get(mp, 0), position)
            for tp, target in list(waiting.items()):
                if target is None:
                    target = waiting[tp] = end
                if position >= target:
                    del waiting[tp]
                    ready.append(tp)
        return ready

    def rereads_done(self, mps: Iterable[int]) -> list[int]:
        """The metadata partitions among ``mps`` whose reading again has passed its offset; forgotten."""
        done = [mp for mp in mps if mp in self.reread_until and (self.positions.get(mp) or 0) > self.reread_until[mp]]
        for mp in done:
            del self.reread_until[mp]
        return done

    # ---- what other threads read (copies) -------------------------------------------------------------

    def progress(self) -> dict[int, Progress]:
        positions, ends = dict(self.positions), dict(self.ends)
        return {mp: Progress(positions.get(mp), ends.get(mp)) for mp in sorted(positions)}

    def waiting(self) -> int:
        """How many registered partitions wait for readiness."""
        return sum(len(v) for v in dict(self.pending).values())

    def not_ready(self) -> list[NotReady]:
        """The registered partitions that wait for readiness, by metadata partition, with what they wait for."""
        out = []
        for mp, waiting in sorted(dict(self.pending).items()):
            targets = dict(waiting)
            if targets:
                reason, stuck = self._waits_for(mp, [t for t in targets.values() if t is not None])
                out.append(NotReady(mp, list(targets), reason, stuck))
        return out

    def _waits_for(self, mp: int, targets: list[int]) -> tuple[str, bool]:
        """What the partitions of ``mp`` waiting for the end offsets ``targets`` wait for; whether they are stuck."""
        where = f"metadata partition {mp}"
        position, end = self.positions.get(mp), self.ends.get(mp)
        if position is None:
            return f"waits for the first fetch of {where} (reading it from the beginning)", False
        if mp in self.held:
            return f"waits at offset {position} of {where}, where a hold stops reading it", False
        if not targets:
            return f"waits for the end offset of {where}, which the next fetch reports", False
        target = max(targets)
        failure = self.last_failure.get(mp)
        if mp in self.read_before_failures and position >= target and failure is not None:
            offset, what = failure
            stuck = end is None or position >= end
            return f"waits for a record after offset {offset} of {where}, which {what}", stuck
        return f"reads {where} up to offset {target}: at offset {position}", False

    def registered_partitions(self) -> list[TopicIdPartition]:
        return list(dict(self.registered))
