"""What a caller codemod is, said once: id, summary, description, review guidance, references
and its policy option.

Each codemod has one ``CodemodMetadata`` in its entry of the LibCST-free registry
(``registry.GUARD`` for ``guard.py``, ...), which the codemod module re-exports as ``METADATA``.
The built-in codemods' texts are data: ``codemods.toml`` beside this module, read by
:func:`load_builtin`; a codemod added from elsewhere builds its ``CodemodMetadata`` in code.
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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import tomllib

from codemods.catalog import methods
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

#: The references ``codemods.toml`` names.
REFERENCES = {"none-error": NONE_ERROR_REFERENCE, "pp-error": PP_ERROR_REFERENCE}


@dataclass(frozen=True)
class PolicyChoice:
    """One value of a codemod's policy option."""

    name: str
    #: What the rewritten code does, as a clause ("the hook is not called when ...").
    meaning: str
    #: The per-call-site change, with ``{hook}``, ``{ids}`` and ``{hint}`` placeholders.
    change: str
    #: What a reviewer checks where this change was made ("" when nothing particular).
    review: str = ""


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

    #: ``vendor:language/name``.
    id: str
    #: The action value marked on the call sites it rewrites.
    action: str
    #: One line, for ``--help`` and headings.
    summary: str
    #: What it changes and what it leaves alone.
    description: str
    #: What a reviewer of the rewritten code should check.
    review_guidance: str
    #: Links for the reader.
    references: tuple[Reference, ...]
    #: The option that picks how it rewrites.
    policy: PolicyOption
    #: The call-site risks (:class:`~codemods.callers.records.Risk` values) it answers: a site
    #: with one of them that it left alone is reported as unfixed under this codemod.
    addresses: tuple[str, ...] = ()
    #: Why a call site was rewritten (``{ids}``: the ids expression); the summary when empty.
    why: str = ""
    #: The same where the code needs the capture (``{reasons}``: where it does).
    why_required: str = ""
    #: The policy applied where the code needs the capture, whatever the run's ("": the run's).
    required_policy: str = ""
    #: Which of the hooks a call may reach the change covers: ``"all"``, or ``"rejects-none"``
    #: (the hooks that reject ``None``; one that accepts it, EAGLE3, is exempt at run time).
    covers: str = "all"
    #: Said of the hooks a change exempts (``{hook}``: their names, ``{meaning}``: what
    #: ``None`` means for them).
    exempt: str = ""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> CodemodMetadata:
        """A record from one table of ``codemods.toml``."""
        policy = data["policy"]
        return cls(
            id=data["id"],
            action=data["action"],
            summary=data["summary"],
            description=data["description"].format_map(REGISTRY_WORDS),
            review_guidance=data["review_guidance"],
            references=tuple(REFERENCES[name] for name in data.get("references", ())),
            policy=PolicyOption(
                flag=policy["flag"],
                help=policy["help"],
                choices=tuple(
                    PolicyChoice(c["name"], c["meaning"], c["change"], c.get("review", ""))
                    for c in policy["choices"]
                ),
                default=policy["default"],
            ),
            addresses=tuple(data.get("addresses", ())),
            why=data.get("why", ""),
            why_required=data.get("why_required", ""),
            required_policy=data.get("required_policy", ""),
            covers=data.get("covers", "all"),
            exempt=data.get("exempt", ""),
        )

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

    def applied_policy(self, policy: str, required: bool) -> str:
        """The policy this codemod applied at a call site: the run's ``policy``, or its
        :attr:`required_policy` where the code needs the capture (``required``)."""
        return self.required_policy if required and self.required_policy else policy

    def change_description(
        self, policy: str, hook: str, ids: str | None, hint: str = "run with --pp-size 1"
    ) -> str:
        """What this codemod did at one call site under ``policy`` (the policy it applied
        there: :meth:`applied_policy`); ``hint``: what a re-raised error tells the user."""
        template = self.policy.choice(policy).change
        return template.format(
            hook=hook, ids=ids if ids is not None else "the layer ids", hint=hint
        )

    def why_rewritten(self, ids: str, required: str | None = None) -> str:
        """Why this codemod rewrote a call site: ``ids`` is the ids expression as shown,
        ``required`` where the code needs the capture (None: it does not)."""
        if required is not None and self.why_required:
            return self.why_required.format(ids=ids, reasons=required)
        return self.why.format(ids=ids) if self.why else self.summary


def spoken_list(rows: tuple[methods.CaptureMethod, ...]) -> str:
    """The methods' names as a sentence lists them: ``A, B and C``."""
    names = [row.name for row in rows]
    return " and ".join(filter(None, (", ".join(names[:-1]), names[-1]))) if names else ""


#: The capture methods a description in ``codemods.toml`` names, from the registry.
REGISTRY_WORDS = {
    "rejecting": spoken_list(methods.rejecting_none()),
    "rejecting_hook": methods.rejecting_none()[0].hook,
    "accepting": spoken_list(methods.accepting_none()),
    "native_hook": methods.NATIVE.hook,
    "native": methods.NATIVE.name,
}

HOOK_OPTION_HELP = "Also treat NAME as a capture hook that rejects None (repeatable)."


@cache
def _builtin_tables() -> dict[str, Any]:
    text = resources.files(__package__).joinpath("codemods.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def load_builtin(name: str) -> CodemodMetadata:
    """The metadata of the built-in codemod ``name`` (a table of ``codemods.toml``)."""
    return CodemodMetadata.from_mapping(_builtin_tables()[name])
