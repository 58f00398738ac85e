"""The records a rebuild read, counted as they are read (snapshots/progress.py): each reading task's count in a
file of its own, written while it reads, added up on the driver. tests/test_snapshot_spark.py watches a real
build's."""

from __future__ import annotations

from snapshots import progress


def test_a_task_writes_its_count_while_it_reads_and_at_its_end(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(progress, "WRITE_EVERY_S", 0.0)  # at every look at the clock
    rows = progress.counted(iter(range(5000)), str(tmp_path), "task-a")
    taken = [next(rows) for _ in range(2 * progress.CHECK_EVERY)]
    assert len(taken) == 2048 and (tmp_path / "task-a").read_text() == "2048"  # read so far, more to come
    assert len(list(rows)) == 5000 - 2048 and (tmp_path / "task-a").read_text() == "5000"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["task-a"]  # no partial file left


def test_the_driver_adds_up_the_tasks_counts(tmp_path) -> None:
    reports: list[int] = []
    with progress.RecordsRead(tmp_path / "counts", reports.append) as watching:
        for task, size in (("a", 300), ("b", 1200)):
            assert len(list(progress.counted(iter(range(size)), str(tmp_path / "counts"), task))) == size
        assert watching.total() == 1500
    assert reports[-1] == 1500 and reports == sorted(reports)
