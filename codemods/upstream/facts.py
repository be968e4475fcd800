"""What a part tells the parts after it and the readers of the result, typed.

A part answers a :class:`~codemods.upstream.part.Decision` whose ``facts`` is one value of
the type its key names here; a later part reads it with ``plan.facts(KEY)``, a text or
delivery module with ``result.facts(KEY)``, and both get that type (or ``None``: the part
did not run or left nothing), checked when read.  One key per part that has facts: the
readers need no part's module to know what they get.

Before::

    guard = result.facts("runtime guard")   # Any
    sites = getattr(guard, "sites", ())

After::

    guard = result.facts(GUARD)             # GuardResult | None
    sites = guard.sites if guard is not None else ()
"""

from __future__ import annotations

from codemods.upstream.family.plan import FamilyPlan
from codemods.upstream.part import FactsKey
from codemods.upstream.validation.relax import ValidationResult
from codemods.upstream.validation.runtime_guard import GuardResult

#: The capture-hook family's plan.
FAMILY = FactsKey("family", FamilyPlan)
#: The tests the family ships (file name -> text).
SHIPPED_TESTS: FactsKey[dict[str, str]] = FactsKey("shipped_tests", dict)
#: Where the runtime guard goes and which calls pass ``pp_size``.
GUARD = FactsKey("runtime guard", GuardResult)
#: What the server-argument validation part decided.
VALIDATION = FactsKey("validation", ValidationResult)
