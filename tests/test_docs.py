"""The generated references are current and complete: ``docs/api.md`` (from the proto comments) and
``docs/configuration.md`` (from the settings code); the README links them; docs/operations.md's metrics
table is what a real server exports; the README's Quickstart runs and answers real data."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers.broker import free_port
from consumers.config import PROPERTIES, SETTINGS, RlmmConfig
from rlmm.settings import Settings
from rlmm.state.view import View
from scripts import gen_api_docs, gen_config_docs

ROOT = Path(__file__).resolve().parent.parent
PROTOS = sorted((ROOT / "proto").rglob("*.proto"))


@pytest.mark.parametrize("script", ["gen_api_docs.py", "gen_config_docs.py"])
def test_the_committed_reference_is_a_fresh_generation(script: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("is current")


@pytest.mark.parametrize("module", [gen_api_docs, gen_config_docs], ids=["api", "configuration"])
def test_check_fails_in_one_line_when_the_reference_is_stale(module, tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "docs" / module.OUT.name
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "OUT", out)
    assert module.main(["--check"]) == 1  # missing
    assert module.main([]) == 0 and out.read_text() == module.render()  # written
    assert module.main(["--check"]) == 0
    out.write_text(out.read_text().replace("|", "!", 1))
    assert module.main(["--check"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"docs/{out.name} is stale: run python scripts/{Path(module.__file__).name}"


def test_every_rpc_of_the_protos_is_in_the_api_reference() -> None:
    api = (ROOT / "docs" / "api.md").read_text()
    rpcs = [name for proto in PROTOS for name in re.findall(r"^\s*rpc\s+(\w+)\s*\(", proto.read_text(), re.M)]
    assert len(rpcs) == 16
    for name in rpcs:
        assert f"### rpc `{name}`" in api and f"[`{name}`](#rpc-{name.lower()})" in api, name


def test_every_method_message_field_and_enum_value_has_a_comment() -> None:
    missing = []
    for file in gen_api_docs.descriptors():
        comments = gen_api_docs.Comments.of(file)
        for s, service in enumerate(file.service):
            missing += [f"rpc {m.name}" for i, m in enumerate(service.method) if not comments(6, s, 2, i)]
        for message, path, name in gen_api_docs.messages(file):
            missing += [] if comments(*path) else [f"message {name}"]
            missing += [f"field {name}.{f.name}" for i, f in enumerate(message.field) if not comments(*path, 2, i)]
        for enum, path, name in gen_api_docs.enums(file):
            missing += [f"value {name}.{v.name}" for i, v in enumerate(enum.value) if not comments(*path, 2, i)]
    assert missing == []


def test_every_message_field_and_enum_is_in_the_api_reference() -> None:
    api = (ROOT / "docs" / "api.md").read_text()
    for file in gen_api_docs.descriptors():
        for message, _, name in gen_api_docs.messages(file):
            assert f"### message `{name.removeprefix('rlmm.v1.')}`" in api
            for field in message.field:
                assert f"| `{field.name}` | {field.number} |" in api, f"{name}.{field.name}"
        for enum, _, name in gen_api_docs.enums(file):
            assert all(f"| `{v.name}` | {v.number} |" in api for v in enum.value), name


def test_the_configuration_reference_has_every_setting() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    for name, info in Settings.model_fields.items():
        assert info.description, f"Settings.{name} has no description"
        assert f"| `{name}` | `RLMM_{name.upper()}` |" in doc, name
    assert "| `view` | `RLMM_VIEW` | `--view` | `Path` | required |" in doc
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in doc and setting.meaning, setting.name
    kafka_fields = {f.name for f in dataclasses.fields(RlmmConfig)} - {
        "bootstrap_servers",
        "num_partitions_given",  # whether num_partitions was set: not a setting of its own
        "common_client",
        "producer",
        "consumer",
    }
    assert {s.field for s in SETTINGS} == kafka_fields and len(PROPERTIES) == len(SETTINGS)
    assert "| `remote.log.metadata.consume.wait.ms` | `120000` |" in doc


def test_the_readme_links_the_references_and_the_changelog() -> None:
    readme = (ROOT / "README.md").read_text()
    for target in ("docs/api.md", "docs/configuration.md", "docs/operations.md", "CHANGELOG.md"):
        assert f"]({target})" in readme, target
        assert (ROOT / target).is_file(), target


def _documented_metrics() -> set[str]:
    """The rlmm_ metrics of docs/operations.md's table, as their samples are named (labels left out)."""
    operations = (ROOT / "docs" / "operations.md").read_text()
    table = operations.split("## Metrics and alerts", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(rlmm_[a-z_]+)[`{]", table, re.M))


def _exported_metrics(*serve_args: str, view: Path) -> set[str]:
    """The rlmm_ metric families a real ``rlmm serve`` exports on /metrics, named as the doc names them:
    counters by their ``_total`` samples, without their ``_created`` ones."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rlmm.cli", "serve", "--view", str(view), "--listen", "127.0.0.1:0", *serve_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line, process.communicate(timeout=30)[1][-3000:]
        port = json.loads(line)["metrics_port"]
        exposition = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(60)
    names = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(exposition)
        if f.name.startswith("rlmm_")
    }
    # prometheus_client's creation time of a counter it keeps itself: part of the counter, not a metric of rlmm
    return {name for name in names if not (name.endswith("_created") and f"{name[:-8]}_total" in names)}


def test_the_metrics_table_is_what_a_server_exports(tmp_path) -> None:
    """Every rlmm_ metric a server exports is in docs/operations.md's table, and every one there is exported:
    by a server of one process, or of several (--workers, which adds the workers' own)."""
    View(tmp_path / "view").close()  # served read-only: the view's and the consumer's metrics are exported all the same
    metrics = ("--metrics-listen", "127.0.0.1:0", "--log-level", "warning")
    single = _exported_metrics(*metrics, view=tmp_path / "view")
    several = _exported_metrics(*metrics, "--workers", "2", view=tmp_path / "view")
    documented = _documented_metrics()
    assert "rlmm_view_segments" in single and "rlmm_worker_up" in several - single
    assert sorted((single | several) - documented) == [], "exported, not in docs/operations.md"
    assert sorted(documented - (single | several)) == [], "in docs/operations.md, not exported"


def _quickstart() -> list[str]:
    """The command lines of the README's Quickstart (comments left out)."""
    readme = (ROOT / "README.md").read_text()
    [block] = re.findall(r"## Quickstart\n\n```bash\n(.*?)```", readme, re.S)
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_the_quickstart_queries_answer_real_data() -> None:
    """The Quickstart's queries, run as shown against the `rlmm demo --keep` it shows (on a free port: the queries
    find it through RLMM_TARGET), answer the demo's data: no null, no empty listing."""
    lines = _quickstart()
    [kept] = [shlex.split(line) for line in lines if line.startswith("rlmm demo --keep")]
    queries = [shlex.split(line) for line in lines[lines.index(shlex.join(kept)) + 1 :]]
    assert kept[kept.index("--listen") + 1] == "127.0.0.1:50051"  # rlmm query's default target
    target = f"127.0.0.1:{free_port()}"
    kept[kept.index("--listen") + 1] = target
    demo = subprocess.Popen(
        [sys.executable, "-m", "rlmm.cli", *kept[1:]], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        printed = []
        for line in demo.stdout:  # the summary, then what to query once it is kept running
            printed.append(line)
            if line.startswith("rlmm query"):
                break
        assert printed and printed[-1].startswith("rlmm query"), "".join(printed)
        assert len(queries) >= 5 and all(q[0] == "rlmm" for q in queries)
        for query in queries:
            done = subprocess.run(
                [sys.executable, "-m", "rlmm.cli", *query[1:]],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "RLMM_TARGET": target},
            )
            assert done.returncode == 0, (query, done.stderr)
            answer = done.stdout.strip() if query[1] == "health" else json.loads(done.stdout)
            assert answer not in (None, [], False, 0, ""), (query, answer)
    finally:
        demo.send_signal(signal.SIGINT)
        assert demo.wait(60) == 0


def test_a_generation_keeps_the_hand_written_part_of_the_api_reference(tmp_path, monkeypatch) -> None:
    out = tmp_path / "docs" / "api.md"
    monkeypatch.setattr(gen_api_docs, "OUT", out)
    out.parent.mkdir()
    out.write_text(f"an old generation\n{gen_api_docs.HAND_WRITTEN}\n\n## By hand\n\nkept.\n")
    assert gen_api_docs.main([]) == 0
    generated, marker, by_hand = out.read_text().partition(gen_api_docs.HAND_WRITTEN)
    assert generated.startswith("# rlmm gRPC API reference") and "an old generation" not in generated
    assert marker and by_hand == "\n\n## By hand\n\nkept.\n"


def test_the_client_examples_name_real_calls_and_fields() -> None:
    """The Node, grpcurl and Go examples of docs/api.md ask for calls and fields the protos have (a dynamic client
    drops a field it does not know without a word)."""
    by_hand = (ROOT / "docs" / "api.md").read_text().split(gen_api_docs.HAND_WRITTEN, 1)[1]
    [js] = re.findall(r"```js\n(.*?)```", by_hand, re.S)
    shell_and_go = "\n".join(re.findall(r"```(?:bash|go)\n(.*?)```", by_hand, re.S))
    files = gen_api_docs.descriptors()
    rpcs = {m.name for file in files for service in file.service for m in service.method}
    fields = {f.name for file in files for message, _, _ in gen_api_docs.messages(file) for f in message.field}
    called = set(re.findall(r"client\.([A-Z]\w+)\(", js))
    called |= set(re.findall(r"RemoteLogMetadataService/(\w+)", shell_and_go))
    called |= set(re.findall(r"go run \. \S+ (\w+)", by_hand))
    assert {"HighestOffsetForEpoch", "RemoteLogSegmentMetadata", "ListRemoteLogSegments"} <= called <= rpcs
    named = set(re.findall(r"[{,]\s*(\w+):", js.split("const tp", 1)[1]))  # the requests' keys
    named |= set(re.findall(r"\.([a-z]+(?:_[a-z]+)+)\b", js))  # the answers' fields read
    named |= {field for pair in re.findall(r"\._(\w+) === '(\w+)'", js) for field in pair}  # optional, set
    named |= set(re.findall(r'"(\w+)":', shell_and_go))  # JSON requests and answers
    assert {"topic_id_partition", "leader_epoch", "offset", "remote_log_segment_metadata", "partition"} <= named
    assert named <= fields, sorted(named - fields)
