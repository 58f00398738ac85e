"""rlmm's gRPC API, version 1: stubs generated from ``proto/rlmm/v1`` by ``scripts/gen_proto.py``."""
