"""The settings of the commands that run the service, ``rlmm serve`` and ``rlmm consume``: one model, read
from a TOML file (``--config``), environment variables (``RLMM_`` + the field name in capitals, e.g.
``RLMM_LISTEN``; lists and tables as JSON) and command-line flags, each overriding the one before. ``consume``
reads the same file and variables and uses the settings it has a use for (the view, Kafka, the partitions,
the logs).

Kafka's settings keep Kafka's names, in the ``kafka`` table (``remote.log.metadata.topic.num.partitions``,
``remote.log.metadata.consumer.*``, ...): they are handed to ``consumers.config.RlmmConfig.from_properties``
as they are. ``remote.log.metadata.common.client.bootstrap.servers`` there may stand in for
``bootstrap_servers``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    InitSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from consumers.config import COMMON_CLIENT_PREFIX, RlmmConfig
from consumers.service import parse_partition
from rlmm.records.model import TopicIdPartition
from rlmm.state.rocks import BLOCK_CACHE_MB, ROW_CACHE_MB, WRITE_BUFFER_MB

BOOTSTRAP_PROPERTY = COMMON_CLIENT_PREFIX + "bootstrap.servers"


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


def join_address(host: str, port: int) -> str:
    """(host, port) -> ``host:port`` (``[v6]:port``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLMM_", extra="forbid")

    view: Path = Field(description="The view's directory (created when missing).")
    listen: str = Field("127.0.0.1:50051", description="gRPC address, HOST:PORT (port 0: a free one).")
    bootstrap_servers: str | None = Field(
        None,
        description="Kafka bootstrap servers. Without them the view is served read-only: no consumer, no "
        "writes, no registrations.",
    )
    kafka: dict[str, str | int | bool] = Field(
        default_factory=dict,
        description="Kafka-named settings: remote.log.metadata.* and the client prefixes "
        "(the Kafka-named settings of docs/configuration.md).",
    )
    partitions: list[str] = Field(
        default_factory=list, description="User partitions to register at start, TOPIC_ID:TOPIC:PARTITION."
    )
    metrics_listen: str | None = Field(None, description="Prometheus /metrics address, HOST:PORT (unset: none).")
    tls_cert: Path | None = Field(None, description="Server certificate chain (PEM): serve TLS.")
    tls_key: Path | None = Field(None, description="Server private key (PEM).")
    tls_client_ca: Path | None = Field(
        None,
        description="CA bundle (PEM) for client certificates: mutual TLS, every client must present one it signed.",
    )
    write_subjects: list[str] = Field(
        default_factory=list,
        description="Client certificate subjects (RFC 2253, or the CN alone) allowed "
        "to write and register. Setting this or write_tokens turns write "
        "authorization on.",
    )
    write_tokens: list[SecretStr] = Field(
        default_factory=list,
        description="Bearer tokens allowed to write and register. They "
        "need TLS, unless write_tokens_over_plaintext is set.",
    )
    write_tokens_over_plaintext: bool = Field(
        False,
        description="Accept write_tokens without TLS, where they travel in clear: only on loopback or a "
        "network protected otherwise.",
    )
    workers: int = Field(
        1,
        ge=1,
        description="Serving processes on the one port (SO_REUSEPORT): the first consumes and writes the view, "
        "the others read it as RocksDB secondary instances and forward writes to it.",
    )
    read_threads: int = Field(2, ge=1, description="Threads answering reads (more only adds contention here).")
    stream_threads: int = Field(4, ge=1, description="Threads serving ListRemoteLogSegments streams.")
    write_threads: int = Field(16, ge=1, description="Threads for writes and registrations, which wait for the topic.")
    max_concurrent_rpcs: int = Field(1000, ge=1, description="Calls in progress beyond this get RESOURCE_EXHAUSTED.")
    max_batch_lookups: int = Field(10_000, ge=1, description="Lookups one BatchRemoteLogSegmentMetadata may hold.")
    stream_chunk: int = Field(500, ge=1, description="Segments per ListRemoteLogSegments message.")
    retry_after_ms: int = Field(500, ge=0, description="Retry delay suggested with UNAVAILABLE.")
    grace_s: float = Field(30.0, ge=0, description="On SIGTERM, how long in-flight calls may take to finish.")
    sync: bool = Field(False, description="fsync each view write batch.")
    cache_mb: int = Field(BLOCK_CACHE_MB, ge=1, description="RocksDB block cache of the view, MB.")
    write_buffer_mb: int = Field(
        WRITE_BUFFER_MB,
        ge=1,
        description="RocksDB memtables of the view, MB in all: rows written and not yet in table files.",
    )
    row_cache_mb: int = Field(
        ROW_CACHE_MB,
        ge=0,
        description="RocksDB row cache of the view, MB (0: none): the offset index "
        "entries batch lookups read (~270 bytes per segment), which then "
        "skip the block searches; the view then deletes a partition key by key.",
    )
    check_mb_per_s: float = Field(
        2.0,
        ge=0,
        description="Pace of the background check of the view while serving: MB of its table files read per "
        "second, every block's checksum verified, over and over (0: off). Damage it finds turns the server "
        "NOT_SERVING, as a read that meets it does.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Least severe log lines written to stderr."
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="json: one JSON object per line; text: for people (the default of rlmm consume)."
    )

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ):
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)

    @field_validator("listen", "metrics_listen")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            split_address(value)
        return value

    @field_validator("partitions")
    @classmethod
    def _partitions(cls, values: list[str]) -> list[str]:
        for value in values:
            parse_partition(value)
        return values

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("tls_client_ca (mutual TLS) needs tls_cert and tls_key")
        if self.write_subjects and self.tls_client_ca is None:
            raise ValueError(
                "write_subjects needs mutual TLS (tls_client_ca): without it no client presents a certificate"
            )
        if self.write_tokens and self.tls_cert is None and not self.write_tokens_over_plaintext:
            raise ValueError(
                "write_tokens without TLS would travel in clear: serve TLS (tls_cert, tls_key), or set "
                "write_tokens_over_plaintext where the network is protected otherwise"
            )
        if (self.kafka or self.partitions) and self.bootstrap is None:
            raise ValueError("kafka settings and partitions need bootstrap servers")
        self.rlmm_config()  # Kafka's names and values checked now, not when the consumer starts
        return self

    @property
    def bootstrap(self) -> str | None:
        bootstrap = self.bootstrap_servers or self.kafka.get(BOOTSTRAP_PROPERTY)
        return None if bootstrap is None else str(bootstrap)

    def rlmm_config(self) -> RlmmConfig | None:
        """The consumer's configuration, None without Kafka."""
        if self.bootstrap is None:
            return None
        properties = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in self.kafka.items()}
        return RlmmConfig.from_properties(self.bootstrap, properties)

    def initial_partitions(self) -> list[TopicIdPartition]:
        return [parse_partition(p) for p in self.partitions]


def load_settings(
    config_file: Path | None = None, command_defaults: Mapping[str, object] | None = None, **overrides: object
) -> Settings:
    """Settings from ``config_file`` (TOML), then the environment, then ``overrides`` (flags; None and
    empty values are left out). ``command_defaults`` stand in for the model's defaults (a command's own)."""
    if config_file is not None and not config_file.is_file():
        raise ValueError(f"no configuration file {config_file}")
    defaults = dict(command_defaults or {})

    def sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
        toml = TomlConfigSettingsSource(settings_cls)
        return init_settings, env_settings, toml, InitSettingsSource(settings_cls, init_kwargs=defaults)

    loaded = type(
        "Settings",
        (Settings,),
        {
            "model_config": {**Settings.model_config, "toml_file": config_file},
            "settings_customise_sources": classmethod(sources),
        },
    )
    return loaded(**{k: v for k, v in overrides.items() if v not in (None, (), [], {})})


def settings_problems(exc: ValidationError) -> str:
    """A pydantic ``ValidationError`` in one line: each field and what is wrong with it."""
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return (
        f"invalid settings: {'; '.join(problems)} (settings come from --config, RLMM_<NAME> variables and "
        f"flags; see docs/configuration.md)"
    )
