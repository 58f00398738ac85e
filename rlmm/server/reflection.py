"""gRPC server reflection under both names clients use: ``grpc.reflection.v1alpha`` (what grpcio-reflection
ships) and ``grpc.reflection.v1`` (what grpcurl and newer clients ask first). The two protocols have the same
messages, field for field, under another package name, so one servicer answers both."""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"


def enable_reflection(service_names: Iterable[str], server: grpc.Server) -> None:
    names = (*service_names, reflection.SERVICE_NAME, V1_SERVICE_NAME)
    servicer = reflection.ReflectionServicer(names)
    for service in (reflection.SERVICE_NAME, V1_SERVICE_NAME):
        server.add_generic_rpc_handlers(
            (
                grpc.method_handlers_generic_handler(
                    service,
                    {
                        "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                            servicer.ServerReflectionInfo,
                            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
                        )
                    },
                ),
            )
        )
