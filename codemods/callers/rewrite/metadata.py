"""What a caller codemod is, said once: id, summary, description, review guidance, references
and its policy option.

Each codemod has one ``CodemodMetadata(...)`` in its entry of the LibCST-free registry
(``registry.GUARD`` for ``guard.py``, ...), which the codemod module re-exports as ``METADATA``.
Everything that describes a codemod to a person or a tool reads it from there: the LibCST
``DESCRIPTION`` and ``add_args`` of the command class, the ``auxcap migrate --help`` text and
option help, the ``--format json`` report (CodeTF-shaped: ``codemod``, ``summary``,
``description``, ``references``) and the pull-request description of ``migrate --branch``.

before: a description string in the command class, another in the CLI help, a third in the
        PR body.
after:  one record per codemod, rendered for each audience by the methods below.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from codemods.catalog.hooks import NONE_ERROR_DSPARK, PP_ERROR_DSPARK

#: The SGLang source the two capture errors come from (Kimi-Linear's DSPARK hook), pinned to
#: one commit so the line ranges stay true.
SGLANG_KIMI_LINEAR = (
    "https://github.com/sgl-project/sglang/blob/0132848349585cfe6aae51c4941cbae872505f8a/"
    "python/sglang/srt/models/kimi_linear.py"
)


@dataclass(frozen=True)
class Reference:
    """A link for the reader, with what it shows."""

    url: str
    description: str

    def to_dict(self) -> dict[str, str]:
        return {"url": self.url, "description": self.description}


#: Where ``ValueError("DSPARK requires explicit layer_ids ...")`` is raised.
NONE_ERROR_REFERENCE = Reference(
    url=f"{SGLANG_KIMI_LINEAR}#L779-L815",
    description=f'ValueError("{NONE_ERROR_DSPARK}"): the capture hook rejects None layer ids',
)
#: Where ``NotImplementedError("DSPARK aux hidden capture requires PP=1.")`` is raised.
PP_ERROR_REFERENCE = Reference(
    url=f"{SGLANG_KIMI_LINEAR}#L775-L811",
    description=(
        f'NotImplementedError("{PP_ERROR_DSPARK}"): the capture hook refuses pipeline '
        "parallelism (aux hidden states are gathered on the last stage only)"
    ),
)


@dataclass(frozen=True)
class PolicyChoice:
    """One value of a codemod's policy option."""

    name: str
    #: What the rewritten code does, as a clause ("the hook is not called when ...").
    meaning: str
    #: The per-call-site change, with ``{hook}`` and ``{ids}`` placeholders.
    change: str


@dataclass(frozen=True)
class PolicyOption:
    """The option that picks how a codemod rewrites (``--guard-policy``, ...)."""

    flag: str
    help: str
    choices: tuple[PolicyChoice, ...]
    default: str

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def label(self) -> str:
        """``--guard-policy`` -> ``guard policy``."""
        return self.flag.lstrip("-").replace("-", " ")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(choice.name for choice in self.choices)

    def choice(self, name: str) -> PolicyChoice:
        for choice in self.choices:
            if choice.name == name:
                return choice
        raise ValueError(f"unknown {self.label} {name!r}; use one of {self.names}")


@dataclass(frozen=True)
class CodemodMetadata:
    """Everything said about one codemod.

    ``id`` follows the CodeTF convention ``vendor:language/name``; ``action`` is the
    :class:`~codemods.callers.records.Action` value of the call sites this codemod rewrites.
    """

    id: str
    action: str
    summary: str
    description: str
    review_guidance: str
    references: tuple[Reference, ...]
    policy: PolicyOption

    # ---------------------------------------------------------------- LibCST
    @property
    def libcst_description(self) -> str:
        """The ``DESCRIPTION`` of the LibCST command: summary, then the policies."""
        policies = "; ".join(
            f"{self.policy.flag} {choice.name}: {choice.meaning}" for choice in self.policy.choices
        )
        return f"{self.summary} ({self.id}). {policies}."

    def add_args(self, arg_parser: argparse.ArgumentParser) -> None:
        """The LibCST ``add_args``: the policy option and ``--hook``."""
        arg_parser.add_argument(
            self.policy.flag,
            dest=self.policy.dest,
            choices=self.policy.names,
            default=self.policy.default,
            help=self.policy.help,
        )
        arg_parser.add_argument(
            "--hook",
            dest="extra_hooks",
            action="append",
            default=[],
            metavar="NAME",
            help=HOOK_OPTION_HELP,
        )

    # ----------------------------------------------------------------- texts
    def help_entry(self) -> str:
        """One paragraph for ``--help``: id and summary."""
        return f"{self.id}: {self.summary}."

    def change_description(self, policy: str, hook: str, ids: str | None) -> str:
        """What this codemod did at one call site under ``policy``."""
        template = self.policy.choice(policy).change
        return template.format(hook=hook, ids=ids if ids is not None else "the layer ids")

    def markdown(self, policy: str | None = None) -> str:
        """A Markdown section for a pull-request description."""
        lines = [f"### `{self.id}`: {self.summary}", "", self.description, ""]
        if policy is not None:
            lines += [f"- {self.policy.label} `{policy}`: {self.policy.choice(policy).meaning}."]
        lines += [f"- Review: {self.review_guidance}"]
        lines += [f"- Reference: [{ref.description}]({ref.url})" for ref in self.references]
        return "\n".join(lines) + "\n"


HOOK_OPTION_HELP = "Also treat NAME as a capture hook that rejects None (repeatable)."
