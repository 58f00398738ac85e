"""Every command and subcommand of ``rlmm`` answers ``--help`` with exit 0 and a usage line."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from rlmm.cli.main import main


def _commands(group: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    if isinstance(group, click.Group):
        for name, command in sorted(group.commands.items()):
            found += _commands(command, (*path, name))
    return found


COMMANDS = _commands(main)


def test_the_walk_finds_the_commands() -> None:
    names = {c[0] for c in COMMANDS if c}
    assert names >= {
        "replay",
        "decode",
        "consume",
        "broker",
        "quarantine",
        "serve",
        "query",
        "snapshot",
        "archive",
        "demo",
        "health",
    }
    assert ("query", "segment") in COMMANDS and ("snapshot", "build") in COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "rlmm")
def test_help(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*path, "--help"], prog_name="rlmm")
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: rlmm {' '.join(path)}".rstrip()), result.output[:200]
