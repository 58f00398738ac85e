"""The command-line face of the settings model (rlmm/settings.py): the flags ``rlmm serve`` and ``rlmm consume``
share, and the one way both turn a file, the environment and their flags into settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import click

from rlmm.settings import Settings

F = TypeVar("F", bound=Callable[..., object])

SHARED_OPTIONS = (
    click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar="RLMM_CONFIG",
        help="TOML file with the settings (or RLMM_CONFIG); environment variables RLMM_<NAME> and these flags "
        "override it.",
    ),
    click.option("--view", "view", type=click.Path(file_okay=False, path_type=Path), help="The view's directory."),
    click.option(
        "--bootstrap-server",
        "-b",
        "bootstrap_servers",
        help="Kafka bootstrap servers (or RLMM_BOOTSTRAP_SERVERS).",
    ),
    click.option(
        "--set",
        "kafka",
        multiple=True,
        metavar="NAME=VALUE",
        help="A Kafka-named setting, e.g. remote.log.metadata.topic.num.partitions=50 (repeatable).",
    ),
    click.option(
        "--partition",
        "partitions",
        multiple=True,
        metavar="TOPIC_ID:TOPIC:PARTITION",
        help="Register a user partition (repeatable). Registrations are kept in the view.",
    ),
    click.option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"]),
        help="Least severe log lines on stderr [info].",
    ),
    click.option("--log-format", type=click.Choice(["json", "text"]), help="Log lines as JSON objects or text."),
)


def settings_options(command: F) -> F:
    for option in reversed(SHARED_OPTIONS):
        command = option(command)
    return command


def settings_from_command_line(
    config_file: Path | None,
    kafka: tuple[str, ...],
    command_defaults: Mapping[str, object] | None = None,
    **flags: object,
) -> Settings:
    """The settings, or a usage error (exit code 2) in one line naming each bad setting."""
    from pydantic import ValidationError

    from consumers.config import parse_setting
    from rlmm.settings import load_settings, settings_problems

    try:
        return load_settings(config_file, command_defaults, kafka=dict(parse_setting(s) for s in kafka), **flags)
    except ValidationError as exc:
        raise click.UsageError(settings_problems(exc)) from None
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
