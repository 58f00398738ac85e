"""Generate ``docs/configuration.md``, the configuration reference, from the code that reads the settings.

    python scripts/gen_config_docs.py           # rewrite docs/configuration.md
    python scripts/gen_config_docs.py --check   # exit 1 when docs/configuration.md differs from a fresh generation

Sources: the settings model of ``rlmm serve`` and ``rlmm consume`` (``rlmm/settings.py``: each field's description,
default and constraints) and their click flags; the Kafka-named settings and client settings of ``consumers/config.py``
(``SETTINGS``, ``CLIENT_SETTINGS``, ``RlmmConfig``'s defaults); the environment variables of every
``rlmm`` command's options.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import annotated_types
import click
from pydantic.fields import FieldInfo

from consumers.config import (
    CLIENT_SETTINGS,
    COMMON_CLIENT_PREFIX,
    CONSUMER_PREFIX,
    PRODUCER_PREFIX,
    SETTINGS,
    RlmmConfig,
)
from rlmm.cli.main import consume
from rlmm.cli.main import main as rlmm_cli
from rlmm.server.commands import serve
from rlmm.settings import BOOTSTRAP_PROPERTY, Settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.generated_doc import ROOT, write_or_check  # noqa: E402

OUT = ROOT / "docs" / "configuration.md"
ENV_PREFIX = Settings.model_config["env_prefix"]


def cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def value(v: object) -> str:
    """A default as it is written in a properties file or TOML."""
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if v is None:
        return "unset"
    if isinstance(v, (list, dict)) and not v:
        return "empty"
    return f"`{v}`"


def field_type(info: FieldInfo) -> str:
    annotation = info.annotation
    if typing.get_origin(annotation) is typing.Literal:
        text = " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    else:
        text = cell(annotation.__name__ if isinstance(annotation, type) else str(annotation))
        for prefix in ("pathlib.", "typing.", "pydantic.types."):
            text = text.replace(prefix, "")
        text = f"`{text}`"
    bounds = [f"≥ {m.ge}" for m in info.metadata if isinstance(m, annotated_types.Ge)]
    return " ".join([text, *bounds])


def default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    return value(info.get_default(call_default_factory=True, validated_data={}))


def flags_of(command: click.Command) -> dict[str, str]:
    """Settings field -> the flag of ``command`` that sets it (the option's parameter name is the field's)."""
    return {p.name: ", ".join(f"`{o}`" for o in p.opts) for p in command.params if isinstance(p, click.Option)}


def settings_section() -> Iterator[str]:
    flags = flags_of(serve)
    consume_flags = flags_of(consume)
    used_by_consume = [f"`{name}`" for name in Settings.model_fields if name in consume_flags]
    config_option = next(p for p in serve.params if p.name == "config_file")
    yield from [
        "## `rlmm serve` and `rlmm consume`",
        "",
        f"One settings model, `rlmm/settings.py`'s `Settings`, read from a TOML file "
        f"({', '.join(f'`{o}`' for o in config_option.opts)} or `{config_option.envvar}`), then environment "
        f"variables (`{ENV_PREFIX}` + the field name in capitals; lists and tables as JSON, e.g. "
        f"`{ENV_PREFIX}WRITE_TOKENS='[\"...\"]'`), then flags: each source overrides the one before. An "
        f"unknown key in the file or a bad value anywhere is a usage error (exit code 2) that names the "
        f"setting; environment variables that name no setting are ignored. `rlmm consume` reads the same "
        f"file and variables and uses {', '.join(used_by_consume)}, with the same flags; it logs as "
        f"`text` unless told otherwise.",
        "",
        "| setting (TOML key) | environment | flag | type | default | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, info in Settings.model_fields.items():
        yield (
            f"| `{name}` | `{ENV_PREFIX}{name.upper()}` | {flags.get(name, '')} | {field_type(info)} | "
            f"{default(info)} | {cell(info.description)} |"
        )
    yield from [
        "",
        f"Without `bootstrap_servers` (or `{BOOTSTRAP_PROPERTY}` in `kafka`) `rlmm serve` serves the view as "
        f"it is, read-only: no consumer, and writes and registrations answer `FAILED_PRECONDITION`.",
        "",
    ]


def kafka_section() -> Iterator[str]:
    defaults = {f.name: f.default for f in dataclasses.fields(RlmmConfig)}
    yield from [
        "## Kafka-named settings",
        "",
        "`rlmm serve` and `rlmm consume` (the `kafka` table, `--set NAME=VALUE`) take the settings "
        "of Kafka's `TopicBasedRemoteLogMetadataManagerConfig` under Kafka's names, with Kafka's defaults, "
        "plus a few of rlmm's own (`consumers/config.py`, `RlmmConfig.from_properties`). An unknown name "
        "is refused.",
        "",
        "| name | default | meaning | in Kafka |",
        "| --- | --- | --- | --- |",
    ]
    for setting in SETTINGS:
        in_kafka = "yes, same name and default" if setting.in_kafka else "no, rlmm's own"
        yield f"| `{setting.name}` | {value(defaults[setting.field])} | {cell(setting.meaning)} | {in_kafka} |"
    yield from [
        "",
        "Kafka client settings pass through under Kafka's prefixes, as librdkafka (confluent-kafka) "
        "settings, whose usual names (`bootstrap.servers`, `security.protocol`, `sasl.*`, `ssl.*`) are the "
        "Java client's:",
        "",
        f"- `{COMMON_CLIENT_PREFIX}*`: every client (consumer, producer, admin);",
        f"- `{PRODUCER_PREFIX}*`: the producer of the writes;",
        f"- `{CONSUMER_PREFIX}*`: the consumer of the metadata topic.",
        "",
        "rlmm sets these client settings itself; the fixed ones cannot be overridden, the others are "
        "defaults the prefixes above may change:",
        "",
        "| client | name | value | overridable | why |",
        "| --- | --- | --- | --- | --- |",
    ]
    for s in CLIENT_SETTINGS:
        yield f"| {s.client} | `{s.name}` | {value(s.value)} | {'no' if s.fixed else 'yes'} | {cell(s.why)} |"
    yield ""


def environment_section() -> Iterator[str]:
    yield from [
        "## Environment variables of the other commands",
        "",
        "Besides the `RLMM_<FIELD>` variables of `rlmm serve` and `rlmm consume`, these options read the environment:",
        "",
        "| command | option | environment |",
        "| --- | --- | --- |",
    ]
    for path, command in _commands(rlmm_cli, ("rlmm",)):
        if command in (serve, consume):
            continue
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                yield f"| `{' '.join(path)}` | {', '.join(f'`{o}`' for o in param.opts)} | `{param.envvar}` |"
    yield ""


def _commands(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _commands(sub, (*path, name))


def render() -> str:
    lines = [
        "# rlmm configuration reference",
        "",
        "Generated by `python scripts/gen_config_docs.py` from the code that reads the settings "
        "(`rlmm/settings.py`, `consumers/config.py`, the commands' options): change them there "
        "(`python scripts/gen_config_docs.py --check` fails when this file is stale).",
        "",
        *settings_section(),
        *kafka_section(),
        *environment_section(),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    return write_or_check(__file__, OUT, render, argv)


if __name__ == "__main__":
    sys.exit(main())
