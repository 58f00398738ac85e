"""Health follows the service (NOT_SERVING until the consumer runs, and from the moment the server stops),
and a stopping server lets calls in flight finish."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from rlmm.client import RlmmClient
from rlmm.errors import UnavailableError
from rlmm.records.partitioner import metadata_partition
from rlmm.server.app import RlmmServer
from rlmm.server.backend import Backend
from rlmm.server.servicer import SERVICE_NAME
from rlmm.settings import Settings
from rlmm.state.view import View
from tests.grpc_support import RemoteLogMetadataManager, kafka_config, new_tp, running_server, segment, start_server

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def wait_for(condition, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def follow(watch, seen: list[int]) -> None:
    try:
        seen.extend(response.status for response in watch)
    except grpc.RpcError:
        pass  # the server stopped


def test_health_follows_the_consumer_and_the_stop(kafka, tmp_path) -> None:
    tp = new_tp("health")
    with View(tmp_path / "view") as view:
        kafka.pause()  # the consumer cannot reach the broker: the topic is not known good
        try:
            manager = RemoteLogMetadataManager(view, kafka_config(kafka.bootstrap_servers), [tp]).start()
            server = start_server(view, manager)
            channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
            health = health_pb2_grpc.HealthStub(channel)
            seen: list[int] = []
            watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
            threading.Thread(target=follow, args=(watch, seen), daemon=True).start()
            assert health.Check(health_pb2.HealthCheckRequest()).status == NOT_SERVING
            with RlmmClient(f"127.0.0.1:{server.port}", retry_for=0.3) as rlmm:
                with pytest.raises(UnavailableError, match="the metadata topic .* is not ready"):
                    rlmm.add_remote_log_segment_metadata(segment(tp, 0, 9))
                time.sleep(0.5)
        finally:
            kafka.resume()
        try:
            wait_for(lambda: health.Check(health_pb2.HealthCheckRequest()).status == SERVING)
            assert health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME)).status == SERVING
            with RlmmClient(f"127.0.0.1:{server.port}") as rlmm:
                assert rlmm.wait_ready([tp], timeout=30)  # readiness per partition stays with IsReady
            wait_for(lambda: seen[-1:] == [SERVING])
            assert seen[0] == NOT_SERVING
            stopping = threading.Thread(target=server.stop, args=(2,))
            stopping.start()
            wait_for(lambda: seen[-1:] == [NOT_SERVING])
            stopping.join()
        finally:
            channel.close()
            server.stop(0)
            manager.close()


def test_a_stopping_server_finishes_calls_in_flight_and_takes_no_new_ones(kafka, tmp_path) -> None:
    tp = new_tp("drain")
    config = kafka_config(kafka.bootstrap_servers)
    mp = metadata_partition(tp.topic_id, tp.partition, config.num_partitions)
    with View(tmp_path / "view") as view, RemoteLogMetadataManager(view, config, [tp]) as manager:
        assert manager.consumer.wait_ready([tp], timeout=30)
        server = start_server(view, manager)
        rlmm = RlmmClient(f"127.0.0.1:{server.port}", retry_for=0)
        assert manager.consumer.hold({mp: 0}).wait(5)  # the write cannot be applied until released
        outcome: list[object] = []

        def write() -> None:
            outcome.append(rlmm.add_remote_log_segment_metadata(segment(tp, 0, 9)))

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(0.5)  # the write is waiting in the server
        stopping = threading.Thread(target=server.stop, args=(20,))
        stopping.start()
        time.sleep(0.3)
        with pytest.raises(UnavailableError):
            rlmm.is_ready(tp)  # no new calls once stopping
        assert writer.is_alive() and stopping.is_alive()
        manager.consumer.hold(None)
        writer.join(10)
        stopping.join(10)
        assert [type(answer).__name__ for answer in outcome] == ["Position"]  # the write in flight finished, applied
        assert len(list(view.queries.list_remote_log_segments(tp))) == 1
        rlmm.close()


def test_reflection_describes_the_services(tmp_path) -> None:
    with View(tmp_path / "view") as view, running_server(view) as server:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            database = ProtoReflectionDescriptorDatabase(channel)
            assert {SERVICE_NAME, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= set(
                database.get_services()
            )
            service = descriptor_pool.DescriptorPool(database).FindServiceByName(SERVICE_NAME)
            assert "BatchRemoteLogSegmentMetadata" in service.methods_by_name
            assert service.methods_by_name["ListRemoteLogSegments"].server_streaming


def test_reflection_answers_under_the_v1_name_too(tmp_path) -> None:
    """grpcurl and newer clients ask grpc.reflection.v1 first; its messages are v1alpha's, field for field."""
    from grpc_reflection.v1alpha import reflection_pb2

    with View(tmp_path / "view") as view, running_server(view) as server:
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            for name in ("grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"):
                call = channel.stream_stream(
                    f"/{name}/ServerReflectionInfo",
                    request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                    response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
                )
                asks = [
                    reflection_pb2.ServerReflectionRequest(list_services=""),
                    reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
                ]
                listed, described = list(call(iter(asks), timeout=10))
                names = {s.name for s in listed.list_services_response.service}
                assert {SERVICE_NAME, "grpc.health.v1.Health", name} <= names
                assert described.file_descriptor_response.file_descriptor_proto  # the service's file


def test_the_protos_name_their_go_and_java_packages() -> None:
    from rlmm.v1 import metadata_pb2, service_pb2

    for module in (metadata_pb2, service_pb2):
        options = module.DESCRIPTOR.GetOptions()
        assert options.go_package.endswith("/rlmm/v1;rlmmv1") and options.java_package == "io.rlmm.v1"
        assert options.java_multiple_files


def test_a_client_that_reached_its_server_waits_for_it_to_come_back(tmp_path) -> None:
    """A refused connection is retried once the client has had an answer there (the server restarts); before,
    nothing listens at the address and the call fails at once (tests/test_cli_errors.py)."""
    with View(tmp_path / "view") as view:
        server = start_server(view)
        target = f"127.0.0.1:{server.port}"
        with RlmmClient(target, retry_for=60) as rlmm:
            assert rlmm.health() == "SERVING"
            server.stop(grace=0)
            with RlmmClient(target, retry_for=60) as never_answered, pytest.raises(UnavailableError, match="refused"):
                never_answered.health()
            answers: list[str] = []
            asking = threading.Thread(target=lambda: answers.append(rlmm.health()))
            asking.start()
            time.sleep(0.5)  # its first attempts are refused
            again = RlmmServer(Backend(view, None), Settings(view=view.path, listen=target)).start()
            try:
                asking.join(60)
                assert answers == ["SERVING"]
            finally:
                again.stop(grace=0)
