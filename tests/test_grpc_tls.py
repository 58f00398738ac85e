"""TLS, mutual TLS and write authorization, with certificates made for the test (trustme)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
import trustme

from rlmm.client import RlmmClient
from rlmm.errors import AccessDeniedError, RefusedError, UnavailableError
from rlmm.state.view import View
from tests.grpc_support import fill_view, finished, new_tp, running_server, segment, served

TP = new_tp("tls")


class Pki:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca, self.other_ca = trustme.CA(), trustme.CA()
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        server = self.ca.issue_cert("127.0.0.1", "localhost")
        self.server_cert = self._write("server.pem", b"".join(p.bytes() for p in server.cert_chain_pems))
        self.server_key = self._write("server.key", server.private_key_pem.bytes())

    def _write(self, name: str, data: bytes) -> Path:
        (self.root / name).write_bytes(data)
        return self.root / name

    def client(
        self,
        port: int,
        name: str | None = None,
        *,
        ca: trustme.CA | None = None,
        issuer: trustme.CA | None = None,
        **kwargs,
    ) -> RlmmClient:
        """A client trusting ``ca`` (default: the test CA), with a certificate for ``name`` if given."""
        chain = key = None
        if name is not None:
            leaf = (issuer or self.ca).issue_cert(f"{name}.clients.test", common_name=name)
            chain, key = leaf.cert_chain_pems[0].bytes(), leaf.private_key_pem.bytes()
        return RlmmClient(
            f"localhost:{port}",
            root_certificates=(ca or self.ca).cert_pem.bytes(),
            certificate_chain=chain,
            private_key=key,
            retry_for=0.2,
            **kwargs,
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def test_tls_and_token_authorization(pki, tmp_path) -> None:
    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 9)])
        with running_server(view, tls_cert=pki.server_cert, tls_key=pki.server_key, write_tokens=["s3cret"]) as server:
            with pki.client(server.port) as rlmm:
                assert rlmm.is_ready(TP) and rlmm.health() == "SERVING"
                with pytest.raises(AccessDeniedError, match="writes need a listed client certificate") as denied:
                    rlmm.on_stop_partitions([TP])
                assert denied.value.code is grpc.StatusCode.UNAUTHENTICATED
            with pki.client(server.port, token="wrong") as rlmm:
                with pytest.raises(AccessDeniedError, match="the bearer token is not one allowed to write") as denied:
                    rlmm.on_stop_partitions([TP])
                assert denied.value.code is grpc.StatusCode.PERMISSION_DENIED
                assert rlmm.is_ready(TP)  # reads need no token
            with pki.client(server.port, token="s3cret") as rlmm, pytest.raises(RefusedError, match="without Kafka"):
                rlmm.on_stop_partitions([TP])  # authorized; this server has no Kafka
            with pki.client(server.port, ca=pki.other_ca) as stranger, pytest.raises(UnavailableError):
                stranger.is_ready(TP)  # the server's certificate is not signed by what it trusts
            with RlmmClient(f"127.0.0.1:{server.port}", retry_for=0.2) as plain, pytest.raises(UnavailableError):
                plain.is_ready(TP)


def test_mutual_tls_and_subject_authorization(pki, kafka, tmp_path) -> None:
    with served(
        tmp_path,
        kafka.bootstrap_servers,
        [TP],
        tls_cert=pki.server_cert,
        tls_key=pki.server_key,
        tls_client_ca=pki.ca_file,
        write_subjects=["writer"],
        write_tokens=["s3cret"],
    ) as (server, _, _):
        with pki.client(server.port) as anonymous, pytest.raises(UnavailableError):
            anonymous.is_ready(TP)  # no client certificate: the handshake fails
        with pki.client(server.port, "writer", issuer=pki.other_ca) as forged, pytest.raises(UnavailableError):
            forged.is_ready(TP)
        seg = segment(TP, 0, 9)
        with pki.client(server.port, "writer") as writer:
            assert writer.wait_ready([TP], timeout=30)
            writer.add_remote_log_segment_metadata(seg)
            writer.update_remote_log_segment_metadata(finished(seg))
        with pki.client(server.port, "reader") as reader:
            assert reader.remote_log_segment_metadata(TP, 0, 5).segment_id == seg.segment_id
            with pytest.raises(AccessDeniedError, match=r"client certificate 'CN=reader.*' is not allowed to write"):
                reader.on_stop_partitions([TP])
        with pki.client(server.port, "reader", token="s3cret") as reader:
            reader.add_remote_log_segment_metadata(segment(TP, 10, 19))
            assert len(reader.list_remote_log_segments(TP)) == 2


def test_health_command_over_tls_and_mutual_tls(pki, tmp_path) -> None:
    from click.testing import CliRunner

    from rlmm.cli.main import main

    leaf = pki.ca.issue_cert("prober.clients.test", common_name="prober")
    cert = pki._write("prober.pem", leaf.cert_chain_pems[0].bytes())
    key = pki._write("prober.key", leaf.private_key_pem.bytes())
    runner = CliRunner()

    def health(port: int, *args: str):
        return runner.invoke(main, ["health", "--target", f"127.0.0.1:{port}", "--timeout", "2", *args])

    with View(tmp_path / "view") as view:
        fill_view(view, TP, [segment(TP, 0, 9)])
        with running_server(view, tls_cert=pki.server_cert, tls_key=pki.server_key) as server:
            ok = health(server.port, "--ca", str(pki.ca_file))
            assert (ok.exit_code, ok.stdout.strip()) == (0, "SERVING")
            plain = health(server.port)
            assert plain.exit_code == 1 and plain.stdout.startswith("UNREACHABLE")
            assert "for TLS give --ca" in plain.stderr
        with running_server(
            view, tls_cert=pki.server_cert, tls_key=pki.server_key, tls_client_ca=pki.ca_file
        ) as server:
            anonymous = health(server.port, "--ca", str(pki.ca_file))
            assert anonymous.exit_code == 1 and anonymous.stdout.startswith("UNREACHABLE")
            ok = health(server.port, "--ca", str(pki.ca_file), "--cert", str(cert), "--key", str(key), "--json")
            assert ok.exit_code == 0, ok.output
            assert ok.stdout.strip() == f'{{"address": "127.0.0.1:{server.port}", "service": "", "status": "SERVING"}}'
    half = health(1, "--cert", str(cert), "--key", str(key))
    assert half.exit_code == 2 and "need --ca" in half.stderr
