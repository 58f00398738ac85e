"""One spelling per concept: ``--bootstrap-server``, ``--view``, ``--target``; the old spellings still work for
one release (hidden, with a note), and ``rlmm query``'s options may follow its subcommand."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result

from consumers.broker import free_port
from rlmm.cli.main import main
from rlmm.cli.vocabulary import new_spellings
from tests.snapshot_support import live_view, workload_events


def invoke(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), prog_name="rlmm")


def test_old_spellings_are_rewritten_with_a_note() -> None:
    assert new_spellings(
        ["snapshot", "export", "--db=/v", "--bootstrap-servers", "k:9092", "-a", "h:1", "--", "--db"]
    ) == ["snapshot", "export", "--view=/v", "--bootstrap-server", "k:9092", "-t", "h:1", "--", "--db"]


def test_snapshot_commands_take_view_and_still_db(tmp_path) -> None:
    events, tps = workload_events(300, seed=3)
    live_view(events, tps, tmp_path / "live").close()
    new = invoke(
        "snapshot", "export", "--view", str(tmp_path / "live"), "--out", str(tmp_path / "a"), "--num-partitions", "5"
    )
    old = invoke(
        "snapshot", "export", "--db", str(tmp_path / "live"), "--out", str(tmp_path / "b"), "--num-partitions", "5"
    )
    assert new.exit_code == 0 and old.exit_code == 0, old.output
    assert json.loads(new.stdout)["counts"] == json.loads(old.stdout)["counts"]
    assert "--db is now --view" in old.stderr and "--db is now" not in new.stderr
    for command in ("export", "restore", "verify"):
        shown = invoke("snapshot", command, "--help").stdout
        assert "--view" in shown and "--db" not in shown


def test_every_command_names_kafka_view_and_server_alike() -> None:
    assert "--bootstrap-server" in invoke("snapshot", "build", "--help").stdout
    assert "--bootstrap-server" in invoke("archive", "--help").stdout
    for command in (["serve"], ["consume"], ["snapshot", "build"], ["archive"]):
        assert "--bootstrap-servers" not in invoke(*command, "--help").stdout
    for command in (["health"], ["query"]):
        shown = invoke(*command, "--help").stdout
        assert "--target" in shown and "--address" not in shown
    refused = invoke("snapshot", "build", "--bootstrap-servers", "127.0.0.1:1", "--archive", ".", "--out", "x")
    assert refused.exit_code == 2 and "give either --bootstrap-server or --archive" in refused.output


def test_query_options_may_follow_the_subcommand() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    before = invoke("query", "--target", nobody, "--retry-for", "0", "--timeout", "1", "status")
    after = invoke("query", "status", "--target", nobody, "--retry-for=0", "--timeout", "1")
    assert before.exit_code == after.exit_code == 1, after.output
    assert json.loads(after.stdout)["error"] == json.loads(before.stdout)["error"] == "UNAVAILABLE"
    down = invoke("health", "--address", nobody, "--timeout", "1")
    assert down.exit_code == 1 and "--address is now --target" in down.stderr and f"from {nobody}" in down.stderr
