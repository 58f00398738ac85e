"""``rlmm health`` / ``python -m rlmm.server.healthcheck``: exit 0 when the server's grpc.health.v1 status
is SERVING, 1 otherwise (NOT_SERVING, with the failure its status gives, unreachable, timeout) -- for Docker
HEALTHCHECK and probes, over plaintext, TLS or mutual TLS."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from rlmm.cli.vocabulary import RenamingCommand

_PEM = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command(cls=RenamingCommand)
@click.option(
    "--target",
    "-t",
    default="127.0.0.1:50051",
    show_default=True,
    envvar="RLMM_TARGET",
    help="The server, HOST:PORT (or RLMM_TARGET).",
)
@click.option("--service", default="", help="A service name (default: the whole server).")
@click.option("--timeout", type=float, default=3.0, show_default=True, help="Seconds before giving up.")
@click.option(
    "--ca",
    type=_PEM,
    envvar="RLMM_HEALTH_CA",
    help="Speak TLS, verifying the server's certificate with this CA (PEM; or RLMM_HEALTH_CA).",
)
@click.option(
    "--cert",
    type=_PEM,
    envvar="RLMM_HEALTH_CERT",
    help="Client certificate for a mutual-TLS server (PEM; or RLMM_HEALTH_CERT).",
)
@click.option("--key", type=_PEM, envvar="RLMM_HEALTH_KEY", help="Its private key (PEM; or RLMM_HEALTH_KEY).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"address": ..., "service": ..., "status": ...} (with "failure" when not SERVING) instead of the '
    "bare status.",
)
def health(
    target: str, service: str, timeout: float, ca: Path | None, cert: Path | None, key: Path | None, as_json: bool
) -> None:
    """Check a running rlmm server's grpc.health.v1 status: print SERVING, NOT_SERVING or UNREACHABLE (CODE);
    exit 0 if SERVING, else 1, with one line on stderr saying why (NOT_SERVING: the failure of the server's
    status). Plaintext unless --ca is given."""
    from rlmm.client import RlmmClient
    from rlmm.errors import CallError

    if (cert is None) != (key is None):
        raise click.UsageError("give --cert and --key together")
    if cert is not None and ca is None:
        raise click.UsageError("--cert and --key need --ca (they are for a TLS server)")
    failure = None
    try:
        with RlmmClient.from_files(target, ca=ca, cert=cert, key=key, timeout=timeout, retry_for=0) as client:
            status = client.health(service)
            if status != "SERVING":
                failure = _failure(client)
    except CallError as exc:
        status = f"UNREACHABLE ({exc.code.name})"
    answer = {"address": target, "service": service, "status": status}
    if failure is not None:
        answer["failure"] = failure
    click.echo(json.dumps(answer) if as_json else status)
    if status.startswith("UNREACHABLE"):
        click.echo(
            f"error: no health answer from {target}: is rlmm serve running there, "
            f"{'with TLS signed by --ca' if ca else 'in plaintext (for TLS give --ca)'}? Give its address "
            f"with --target or RLMM_TARGET",
            err=True,
        )
    elif status != "SERVING":
        click.echo(f"error: {target} is {status}: {failure}", err=True)
    sys.exit(0 if status == "SERVING" else 1)


def _failure(client) -> str:
    """Why the server does not serve, as its status says (GetStatus.failure)."""
    from rlmm.errors import CallError

    try:
        failure = client.status()["failure"]
    except CallError as exc:
        return f"its status cannot be read ({exc.code.name}: {exc.message})"
    return failure or "its status names no failure (it is starting, or stopping)"


if __name__ == "__main__":
    health()
