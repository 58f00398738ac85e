"""The gRPC service over the view (see ``proto/rlmm/v1`` for the contract): servicer, status mapping,
health, metrics, TLS and authorization, configuration, and the ``serve`` / ``query`` commands."""
