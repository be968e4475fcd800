"""Expose a caller codemod as a LibCST ``VisitorBasedCodemodCommand``, built on first use.

The codemods' logic lives in plain ``libcst.CSTTransformer`` classes (``GuardTransformer``,
``FallbackTransformer``), because importing ``libcst.codemod`` (which pulls in
``libcst.matchers``) costs more than a whole fast run of ``auxcap migrate``.  LibCST's own
codemod CLI (``python -m libcst.tool codemod -x codemods.callers.rewrite.guard.GuardCommand PATH``) and
``CodemodTest`` need command classes; each codemod module builds its command here, lazily,
from its module ``__getattr__``, so only those users pay for the import.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def command_class(name: str, module: str, transformer: Callable[..., Any], metadata: Any) -> type:
    """A ``VisitorBasedCodemodCommand`` subclass named ``module.name`` that runs ``transformer``.

    ``transformer(filename, *args, **kwargs)`` receives the command's own arguments (the
    codemod's options), so ``Command(context, "raise")`` means what it always meant.
    """
    import libcst as cst
    from libcst.codemod import CodemodContext, VisitorBasedCodemodCommand

    class Command(VisitorBasedCodemodCommand):
        DESCRIPTION = metadata.libcst_description

        def __init__(self, context: CodemodContext, *args: Any, **kwargs: Any) -> None:
            super().__init__(context)
            self._args, self._kwargs = args, kwargs
            transformer("<string>", *args, **kwargs)  # reject bad options now, not per file

        @staticmethod
        def add_args(arg_parser: Any) -> None:
            metadata.add_args(arg_parser)

        def transform_module(self, tree: cst.Module) -> cst.Module:
            filename = self.context.filename or "<string>"
            return transformer(filename, *self._args, **self._kwargs).transform_module(tree)

        def transform_module_impl(self, tree: cst.Module) -> cst.Module:
            return self.transform_module(tree)

    Command.__name__ = Command.__qualname__ = name
    Command.__module__ = module
    Command.__doc__ = transformer.__doc__
    return Command


def lazy_command(module: str, name: str, transformer: type, metadata: Any) -> Callable[[str], type]:
    """The ``__getattr__`` of codemod module ``module``: builds its command ``name`` (see
    :func:`command_class`) on first use and keeps it in the module."""

    def module_getattr(attribute: str) -> type:
        if attribute != name:
            raise AttributeError(f"module {module!r} has no attribute {attribute!r}")
        command = command_class(name, module, transformer, metadata)
        setattr(sys.modules[module], name, command)
        return command

    module_getattr.__doc__ = f"``{name}``: the LibCST codemod command, built on first use."
    return module_getattr
