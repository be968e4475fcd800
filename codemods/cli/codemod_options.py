"""The ``migrate`` command's codemod options and epilog, read from the caller-codemod registry
each time the command is used (so a codemod registered after import shows in ``--help`` and
gets its ``--<name>-policy`` option)."""

from __future__ import annotations

import click

from codemods.callers.rewrite import registry
from codemods.callers.rewrite.metadata import CodemodMetadata

_OPTIONS: dict[str, click.Option] = {}


def policy_option(metadata: CodemodMetadata) -> click.Option:
    """The ``--<name>-policy`` option of one codemod (its default shown in ``--help``)."""
    option = _OPTIONS.get(metadata.id)
    if option is None:
        policy = metadata.policy
        option = click.Option(
            [policy.flag, policy.dest],
            type=click.Choice(policy.names),
            default=policy.default,
            show_default=True,
            help=policy.help,
        )
        _OPTIONS[metadata.id] = option
    return option


class CodemodCommand(click.Command):
    """A command with one policy option per registered codemod, placed after the parameter
    named ``policies_after``, and the registry's codemod list as its epilog."""

    def __init__(self, *args, policies_after: str | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.policies_after = policies_after

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)
        options = [policy_option(metadata) for metadata in registry.CODEMODS]
        names = [param.name for param in params]
        at = names.index(self.policies_after) + 1 if self.policies_after in names else 0
        return [*params[:at], *options, *params[at:]]

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.epilog = registry.help_epilog()
        super().format_epilog(ctx, formatter)
