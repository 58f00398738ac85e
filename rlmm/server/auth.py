"""Optional write authorization: when subjects or tokens are configured, only a caller presenting a
client certificate (mutual TLS) whose subject is listed, or a listed bearer token
(``authorization: Bearer TOKEN`` metadata), may call the writes and the registrations. Reads stay open
to every caller the transport admits."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

import grpc

from rlmm.errors import AccessDenied

_BEARER = "bearer "


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class WriteAuthorization:
    def __init__(self, subjects: Iterable[str] = (), tokens: Iterable[str] = ()) -> None:
        """``subjects``: a certificate's full subject as gRPC reports it (RFC 2253, e.g. ``CN=broker-1,O=kafka``)
        or its common name alone."""
        self.subjects = frozenset(subjects)
        self._tokens = [_digest(t) for t in tokens]
        self.enabled = bool(self.subjects or self._tokens)

    def check(self, context: grpc.ServicerContext) -> None:
        """Raise ``AccessDenied`` unless the caller may write."""
        if not self.enabled:
            return
        token = next((v for k, v in context.invocation_metadata() if k == "authorization"), None)
        if token is not None:
            if token[: len(_BEARER)].lower() == _BEARER and self._known_token(token[len(_BEARER) :].strip()):
                return
            raise AccessDenied("the bearer token is not one allowed to write")
        auth = context.auth_context()
        names = [v.decode(errors="replace") for key in ("x509_subject", "x509_common_name") for v in auth.get(key, ())]
        if any(name in self.subjects for name in names):
            return
        if names:
            raise AccessDenied(f"client certificate {names[0]!r} is not allowed to write")
        raise AccessDenied(
            "writes need a listed client certificate (mutual TLS) or a bearer token "
            "('authorization: Bearer TOKEN' metadata)",
            unauthenticated=True,
        )

    def _known_token(self, token: str) -> bool:
        digest = _digest(token)
        found = False
        for known in self._tokens:  # no early exit: the time taken does not tell which token matched
            found |= hmac.compare_digest(digest, known)
        return found
