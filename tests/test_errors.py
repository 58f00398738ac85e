"""One error tree: every exception rlmm defines is in rlmm/errors.py under RlmmError (issue 17, item 3)."""

from __future__ import annotations

import importlib
import pkgutil

import grpc
import pytest

import consumers
import rlmm
import snapshots
from rlmm import errors
from rlmm.cli.errors import Failure

# how a command shows a failure (click's), and the broker's private retry signal (a BrokerError)
OUTSIDE_THE_MODULE = {Failure, importlib.import_module("consumers.broker")._NotReady}


def _modules():
    for package in (rlmm, consumers, snapshots):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.startswith("rlmm.v1"):
                yield importlib.import_module(info.name)


def test_every_error_is_defined_in_the_one_module_under_one_root() -> None:
    defined = {
        obj
        for module in _modules()
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
    }
    elsewhere = {cls.__qualname__ for cls in defined if cls.__module__ != "rlmm.errors"} - {
        cls.__qualname__ for cls in OUTSIDE_THE_MODULE
    }
    assert not elsewhere, f"define these in rlmm/errors.py: {sorted(elsewhere)}"
    in_the_module = [cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, BaseException)]
    assert len(in_the_module) > 30
    assert all(issubclass(cls, errors.RlmmError) for cls in in_the_module)
    assert issubclass(importlib.import_module("consumers.broker")._NotReady, errors.RlmmError)


@pytest.mark.parametrize(
    "error, kafka_exception",
    [
        (errors.RemoteResourceNotFound("gone"), "RemoteResourceNotFoundException"),
        (errors.ReplicaNotAvailable("loading"), "ReplicaNotAvailableException"),
        (errors.NotInitializedError("not yet"), "IllegalStateException"),
        (errors.InvalidMetadataError("bad"), "IllegalArgumentException"),
        (errors.WriteTimeoutError("late"), "TimeoutException"),
        (errors.ProducerRecoveringError("again"), "RetriableException"),
        (
            errors.DecodeError("bad bytes", "SerializationException", "BufferUnderflowException"),
            "SerializationException",
        ),
        (errors.WireError("BufferUnderflowException", "input ends", 3), "BufferUnderflowException"),
        (errors.ViewDamaged("checksum"), None),
        (errors.CallError(grpc.StatusCode.NOT_FOUND, "gone", kafka_exception="X"), "X"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else str(value),
)
def test_one_attribute_names_the_kafka_exception(error: errors.RlmmError, kafka_exception: str | None) -> None:
    assert error.kafka_exception == kafka_exception


def test_a_failed_call_is_also_the_local_error() -> None:
    """What a caller catches locally catches the same failure over gRPC: one WriteTimeoutError, one
    RemoteResourceNotFound."""
    deadline = errors.DeadlineExceededError(grpc.StatusCode.DEADLINE_EXCEEDED, "late")
    assert isinstance(deadline, errors.WriteTimeoutError) and isinstance(deadline, TimeoutError)
    assert isinstance(errors.NotFoundError(grpc.StatusCode.NOT_FOUND, "gone"), errors.RemoteResourceNotFound)
    assert isinstance(
        errors.ReplicaNotAvailableError(grpc.StatusCode.UNAVAILABLE, "loading"), errors.ReplicaNotAvailable
    )
    assert isinstance(errors.InvalidArgumentError(grpc.StatusCode.INVALID_ARGUMENT, "x"), ValueError)
