"""``rlmm health`` / ``python -m rlmm.server.healthcheck``: exit 0 when the server's grpc.health.v1 status
is SERVING, 1 otherwise (NOT_SERVING, unreachable, timeout) -- for Docker HEALTHCHECK and probes."""

from __future__ import annotations

import json
import sys

import click


@click.command()
@click.option("--address", "-a", default="127.0.0.1:50051", show_default=True, envvar="RLMM_TARGET",
              help="The server, HOST:PORT (or RLMM_TARGET).")
@click.option("--service", default="", help="A service name (default: the whole server).")
@click.option("--timeout", type=float, default=3.0, show_default=True, help="Seconds before giving up.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"address": ..., "service": ..., "status": ...} instead of the bare status.')
def health(address: str, service: str, timeout: float, as_json: bool) -> None:
    """Check a running rlmm server's grpc.health.v1 status (plaintext): print SERVING, NOT_SERVING or
    UNREACHABLE (CODE); exit 0 if SERVING, else 1.

    For a server with TLS use `rlmm query --ca ... health`."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(address) as channel:
            response = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service),
                                                                 timeout=timeout)
        status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    except grpc.RpcError as exc:
        status = f"UNREACHABLE ({exc.code().name})"
    click.echo(json.dumps({"address": address, "service": service, "status": status}) if as_json else status)
    if status.startswith("UNREACHABLE"):
        click.echo(f"error: no health answer from {address}: is rlmm serve running there (plaintext)? Give its "
                   f"address with --address or RLMM_TARGET", err=True)
    sys.exit(0 if status == "SERVING" else 1)


if __name__ == "__main__":
    health()
