"""Helpers of the gRPC tests: servers on loopback over a view (with or without a manager on the test
broker), records to write, raw stubs, and test certificates."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from consumers.config import RlmmConfig
from consumers.manager import RemoteLogMetadataManager
from rlmm.client import RlmmClient
from rlmm.records.model import (
    PartitionDelete,
    PartitionDeleteState,
    SegmentMetadata,
    SegmentState,
    SegmentUpdate,
    TopicIdPartition,
)
from rlmm.records.serde import encode_value
from rlmm.server.app import RlmmServer
from rlmm.server.backend import Backend
from rlmm.settings import Settings
from rlmm.state.view import View
from rlmm.v1 import service_pb2_grpc

TS = 1_700_000_000_000


def new_tp(topic: str = "payments", partition: int = 0) -> TopicIdPartition:
    return TopicIdPartition(os.urandom(16), topic, partition)


def segment(
    tp: TopicIdPartition,
    start: int,
    end: int,
    epoch: int = 0,
    *,
    txn_empty: bool = True,
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED,
    custom: bytes | None = None,
) -> SegmentMetadata:
    return SegmentMetadata(
        tp, os.urandom(16), start, end, 1, TS + end, TS, ((epoch, start),), 1000 + end - start, custom, state, txn_empty
    )


def finished(seg: SegmentMetadata) -> SegmentUpdate:
    return SegmentUpdate(seg.tp, seg.segment_id, 1, TS + 1, seg.custom_metadata, SegmentState.COPY_SEGMENT_FINISHED)


def partition_delete(tp: TopicIdPartition, state: PartitionDeleteState) -> PartitionDelete:
    return PartitionDelete(tp, 1, TS + 2, state)


def fill_view(
    view: View,
    tp: TopicIdPartition,
    segments: list[SegmentMetadata],
    *,
    ready: bool = True,
    metadata_partition: int = 0,
) -> None:
    """Register ``tp`` in a view without Kafka and apply the segments as finished."""
    offset = max(view.metadata_offsets().get(metadata_partition, -1) + 1, 0)
    with view.batch() as batch:
        batch.assign(tp)
        for seg in segments:
            for record in (seg, finished(seg)):
                batch.apply(metadata_partition, offset, encode_value(record))
                offset += 1
        if ready:
            batch.mark_ready(tp)


def kafka_config(bootstrap_servers: str, num_partitions: int = 3, **settings) -> RlmmConfig:
    return RlmmConfig(
        bootstrap_servers,
        topic=f"rlmm-grpc-{uuid.uuid4().hex[:12]}",
        num_partitions=num_partitions,
        replication_factor=1,
        min_insync_replicas=1,
        **settings,
    )


def settings(view_dir: Path, **values) -> Settings:
    return Settings(view=view_dir, listen="127.0.0.1:0", **values)


def start_server(view: View, manager: RemoteLogMetadataManager | None = None, **values) -> RlmmServer:
    return RlmmServer(Backend(view, manager), settings(view.path, **values)).start()


@contextmanager
def running_server(view: View, manager: RemoteLogMetadataManager | None = None, **values) -> Iterator[RlmmServer]:
    server = start_server(view, manager, **values)
    try:
        yield server
    finally:
        server.stop(grace=1)


@contextmanager
def served(
    tmp: Path, bootstrap_servers: str | None, partitions=(), config: RlmmConfig | None = None, **values
) -> Iterator[tuple[RlmmServer, RemoteLogMetadataManager | None, View]]:
    """A view in ``tmp``, a manager on the broker (unless ``bootstrap_servers`` is None), and a server."""
    with View(tmp / "view") as view:
        manager = None
        if bootstrap_servers is not None:
            manager = RemoteLogMetadataManager(view, config or kafka_config(bootstrap_servers), partitions).start()
        try:
            with running_server(view, manager, **values) as server:
                yield server, manager, view
        finally:
            if manager is not None:
                manager.close()


def client(server: RlmmServer, **kwargs) -> RlmmClient:
    return RlmmClient(f"127.0.0.1:{server.port}", **kwargs)


def stub(server: RlmmServer) -> tuple[grpc.Channel, service_pb2_grpc.RemoteLogMetadataServiceStub]:
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    return channel, service_pb2_grpc.RemoteLogMetadataServiceStub(channel)
