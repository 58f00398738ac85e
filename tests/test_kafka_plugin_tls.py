"""TLS, mutual TLS and write authorization through the Kafka plugin, against ``rlmm serve`` with --tls-cert/--tls-key
(and --tls-client-ca, --write-subject), write tokens in RLMM_WRITE_TOKENS; certificates made for the test."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.kafka_plugin_support import Harness, Pki, RlmmServe, built_plugin, new_tp, topic_name  # noqa: F401

STORAGE_EXCEPTION = "org.apache.kafka.server.log.remote.storage.RemoteStorageException"
NOT_FOUND = "RemoteResourceNotFoundException"
SHORT = {"call_timeout_ms": 1_500, "write_timeout_ms": 5_000}


@pytest.fixture(scope="module")
def harness(built_plugin, tmp_path_factory) -> Iterator[Harness]:  # noqa: F811
    with Harness(built_plugin, tmp_path_factory.mktemp("harness") / "harness.log") as jvm:
        yield jvm


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def _connects(harness: Harness, name: str) -> dict:
    """A read of a partition nobody registered: RemoteResourceNotFoundException means rlmm answered (TLS worked)."""
    return harness.call("read", id=name, op="remoteLogSegmentMetadata", tp=new_tp("nobody"), epoch=0, offset=0)


def _add(harness: Harness, name: str, tp: dict) -> dict:
    return harness.call("write", id=name, op="add", tp=tp, wait_ms=60_000)


def test_tls_and_write_tokens(harness: Harness, pki: Pki, kafka, tmp_path) -> None:
    cert, key = pki.server()
    token, wrong = tmp_path / "token", tmp_path / "wrong-token"
    token.write_text("s3cret\n")
    wrong.write_text("guess\n")
    tp, unregistered = new_tp("tls"), new_tp("tls-anonymous")
    with RlmmServe(
        tmp_path,
        kafka.bootstrap_servers,
        topic_name(),
        1,
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        env={"RLMM_WRITE_TOKENS": json.dumps(["s3cret"])},
    ) as server:
        ca = str(pki.ca_file)
        harness.open("writer", server.address, 1, tls_ca_file=ca, write_token_file=str(token))
        harness.open("anonymous", server.address, 2, tls_ca_file=ca, **SHORT)
        harness.open("wrong-token", server.address, 3, tls_ca_file=ca, write_token_file=str(wrong), **SHORT)
        harness.open("other-ca", server.address, 4, tls_ca_file=str(pki.other_ca_file), **SHORT)
        harness.open("jvm-trust-store", server.address, 5, tls_enabled="true", **SHORT)
        harness.open("plaintext", server.address, 6, **SHORT)

        assert "error" not in harness.call("register", id="writer", leaders=[tp])
        assert harness.call("wait_ready", id="writer", partitions=[tp])["ready"]
        added = _add(harness, "writer", tp)
        assert added.get("write") == "ok", added
        finished = harness.call("write", id="writer", op="update", tp=tp, segment_id=added["segment_id"])
        assert finished.get("write") == "ok", finished

        for name, status in (("anonymous", "UNAUTHENTICATED"), ("wrong-token", "PERMISSION_DENIED")):
            refused = _add(harness, name, tp)
            assert "sync_error" not in refused, refused
            error = refused.get("write_error", {})
            assert error.get("class") == STORAGE_EXCEPTION and status in error.get("message", ""), (name, refused)
        listed = harness.call("read", id="writer", op="listRemoteLogSegments", tp=tp)
        assert [s["segment_id"] for s in listed["value"]] == [added["segment_id"]], "a refused write was written"
        # a registration without the token is refused by rlmm: never thrown at the broker, and not registered
        assert "error" not in harness.call("register", id="anonymous", leaders=[unregistered])
        assert not harness.call("wait_ready", id="writer", partitions=[unregistered], timeout_ms=1_500)["ready"]

        for name in ("other-ca", "jvm-trust-store", "plaintext"):
            failed = _connects(harness, name)
            assert failed.get("class") == STORAGE_EXCEPTION, (name, failed)
            assert failed["ms"] <= SHORT["call_timeout_ms"] + 2_500, (name, failed)
            assert harness.call("read", id=name, op="isReady", tp=tp)["value"] is False
        for name in ("writer", "anonymous", "wrong-token", "other-ca", "jvm-trust-store", "plaintext"):
            harness.call("close", id=name)


def test_mutual_tls_and_write_subjects(harness: Harness, pki: Pki, kafka, tmp_path) -> None:
    cert, key = pki.server()
    tp = new_tp("mtls")
    with RlmmServe(
        tmp_path,
        kafka.bootstrap_servers,
        topic_name(),
        1,
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
        "--tls-client-ca",
        str(pki.ca_file),
        "--write-subject",
        "writer",
    ) as server:
        ca = str(pki.ca_file)
        clients = {
            "m-writer": pki.client("writer"),
            "m-reader": pki.client("reader"),
            "m-forged": pki.client("writer", issuer=pki.other_ca),
        }
        for name, (client_cert, client_key) in clients.items():
            harness.open(
                name,
                server.address,
                1,
                tls_ca_file=ca,
                tls_cert_file=str(client_cert),
                tls_key_file=str(client_key),
                **SHORT,
            )
        harness.open("m-anonymous", server.address, 1, tls_ca_file=ca, **SHORT)

        assert "error" not in harness.call("register", id="m-writer", leaders=[tp])
        assert harness.call("wait_ready", id="m-writer", partitions=[tp])["ready"]
        added = _add(harness, "m-writer", tp)
        assert added.get("write") == "ok", added
        refused = _add(harness, "m-reader", tp)
        error = refused.get("write_error", {})
        assert error.get("class") == STORAGE_EXCEPTION and "PERMISSION_DENIED" in error.get("message", ""), refused
        listed = harness.call("read", id="m-writer", op="listRemoteLogSegments", tp=tp)
        assert [s["segment_id"] for s in listed["value"]] == [added["segment_id"]], listed
        for name in ("m-forged", "m-anonymous"):  # no handshake: no certificate, or one the server's CA did not sign
            failed = _connects(harness, name)
            assert failed.get("class") == STORAGE_EXCEPTION, (name, failed)
        for name in ("m-writer", "m-reader", "m-forged", "m-anonymous"):
            harness.call("close", id=name)


def test_tls_server_name(harness: Harness, pki: Pki, kafka, tmp_path) -> None:
    """A server certificate for another name than the target's host: tls.server.name says which name to verify."""
    cert, key = pki.server("rlmm.internal.test", prefix="named")
    with RlmmServe(
        tmp_path, kafka.bootstrap_servers, topic_name(), 1, "--tls-cert", str(cert), "--tls-key", str(key)
    ) as server:
        ca = str(pki.ca_file)
        harness.open("named", server.address, 1, tls_ca_file=ca, tls_server_name="rlmm.internal.test", **SHORT)
        harness.open("unnamed", server.address, 1, tls_ca_file=ca, **SHORT)
        assert _connects(harness, "named").get("error") == NOT_FOUND
        assert _connects(harness, "unnamed").get("class") == STORAGE_EXCEPTION
        for name in ("named", "unnamed"):
            harness.call("close", id=name)
