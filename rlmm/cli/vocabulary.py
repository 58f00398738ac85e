"""One spelling per concept across the commands, and the old spellings kept for one release.

``--bootstrap-server``/``-b`` names the Kafka servers, ``--view`` a view's directory, ``--target``/``-t`` a
running rlmm server. The spellings some commands used before (``--bootstrap-servers``, ``--db``,
``--address``/``-a``) still work, hidden from ``--help``: they are rewritten to the new ones, with a note
on stderr. ``rlmm query``'s own options may come after its subcommand too (``rlmm query ready P
--retry-for 30``).
"""

from __future__ import annotations

from collections.abc import Sequence

import click

RENAMED = {"--bootstrap-servers": "--bootstrap-server", "--db": "--view", "--address": "--target", "-a": "-t"}


def new_spellings(args: Sequence[str]) -> list[str]:
    """``args`` with every old option spelling replaced by the new one (a note on stderr for each)."""
    out = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + list(args[i:])
        name, eq, value = arg.partition("=")
        new = RENAMED.get(name)
        if new is not None:
            click.echo(f"note: {name} is now {new}; the old spelling goes away in the next release", err=True)
            arg = new + eq + value
        out.append(arg)
    return out


class RenamingGroup(click.Group):
    """The top-level group: rewrites old spellings anywhere on the command line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, new_spellings(args))


class RenamingCommand(click.Command):
    """A command run on its own (``python -m rlmm.server.healthcheck``) rewrites old spellings too."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, new_spellings(args))


class GroupOptionsAnywhere(click.Group):
    """A group whose own options may also follow its subcommand's name; they are moved before it, unless the
    subcommand has an option of the same name."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {
            name: not (p.is_flag or p.count)
            for p in self.params
            if isinstance(p, click.Option)
            for name in p.opts + p.secondary_opts
        }
        i = 0
        while i < len(args) and args[i].startswith("-") and args[i] != "--":  # the group's options, first
            i += 2 if takes_value.get(args[i], False) else 1
        if i >= len(args) or args[i] == "--":
            return super().parse_args(ctx, args)
        command = self.get_command(ctx, args[i])
        own = {
            name
            for p in (command.params if command else [])
            if isinstance(p, click.Option)
            for name in p.opts + p.secondary_opts
        }
        front, rest = list(args[: i + 1]), []
        j = i + 1
        while j < len(args):
            name = args[j].partition("=")[0]
            if args[j] == "--":
                rest += args[j:]
                break
            if name in takes_value and name not in own:
                width = 2 if takes_value[name] and "=" not in args[j] else 1
                front[i:i] = args[j : j + width]
                i += width
                j += width
                continue
            rest.append(args[j])
            j += 1
        return super().parse_args(ctx, front + rest)
