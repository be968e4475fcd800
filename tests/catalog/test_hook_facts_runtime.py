"""Run the real setters of each release against stand-in objects and compare what they do with
the statically derived facts in codemods/catalog/hook_facts.json.

Each setter that does not delegate is compiled on its own from the release's model file and
called with a stand-in ``self`` (a PP group of size 2, non-last or last rank; or PP size 1 and
``None`` ids). Attributes the setter reads but the stand-in does not set are falsy stand-ins,
as the derivation takes an undecidable test as false. A setter that needs a module-level name
the stand-in globals do not provide is counted as not runnable; the test requires that every
setter raising under PP ran, and most of the others.
"""

from __future__ import annotations

import ast
import copy
from types import SimpleNamespace

import pytest

from codemods.catalog import derive
from codemods.catalog import hook_facts as hf

pytestmark = [pytest.mark.slow, pytest.mark.sglang]

NUM_LAYERS = 8


class Stand:
    """Any attribute, item or call gives another stand-in; writes and calls are logged."""

    def __init__(self, log: list, name: str):
        object.__setattr__(self, "_log", log)
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        child = Stand(self._log, f"{self._name}.{attr}")
        object.__setattr__(self, attr, child)
        return child

    def __setattr__(self, attr, value):
        self._log.append(f"{self._name}.{attr} =")
        object.__setattr__(self, attr, value)

    def __call__(self, *args, **kwargs):
        self._log.append(f"{self._name}()")
        return Stand(self._log, f"{self._name}()")

    def __getitem__(self, key):
        return Stand(self._log, f"{self._name}[{key!r}]")

    def __len__(self):
        return NUM_LAYERS

    def __iter__(self):
        return iter([Stand(self._log, f"{self._name}[{i}]") for i in range(NUM_LAYERS)])

    def __bool__(self):
        return False


def _stand_self(world_size: int, last_rank: bool) -> tuple[Stand, list, SimpleNamespace]:
    log: list = []
    group = SimpleNamespace(
        world_size=world_size,
        is_last_rank=last_rank,
        is_first_rank=not last_rank,
        rank_in_group=0 if not last_rank else 1,
    )
    me = Stand(log, "self")
    for holder in (me, me.model, me.model.model, me.language_model):
        object.__setattr__(holder, "pp_group", group)
    for config in (me.config, me.config.text_config):
        object.__setattr__(config, "num_hidden_layers", NUM_LAYERS)
    for owner in (me, me.model, me.model.model, me.model.language_model):
        object.__setattr__(owner, "layers", [Stand(log, f"layer{i}") for i in range(NUM_LAYERS)])
    return me, log, group


def _compile(func: ast.FunctionDef, filename: str):
    func = copy.deepcopy(func)
    func.decorator_list = []
    func.returns = None
    for arg in func.args.posonlyargs + func.args.args + func.args.kwonlyargs:
        arg.annotation = None
    module = ast.fix_missing_locations(ast.Module(body=[func], type_ignores=[]))
    return compile(module, filename, "exec")


def _run(code, name: str, world_size: int, last_rank: bool, ids):
    me, log, group = _stand_self(world_size, last_rank)
    namespace = {
        "get_pp_group": lambda: group,
        "get_parallel": lambda: SimpleNamespace(pp_group=group),
    }
    exec(code, namespace)  # a setter of the release, compiled alone
    del log[:]
    try:
        namespace[name](me, ids)
    except NameError:
        return ("not runnable", None, None)
    except Exception as exc:  # noqa: BLE001 - the outcome under test
        return ("raised", type(exc).__name__, str(exc))
    return ("worked" if log else "quiet", None, None)


@pytest.mark.parametrize("release", derive.RELEASES)
def test_setters_behave_as_the_derived_facts_say(release, sglang_release):
    index = derive.ModelIndex.from_tree(sglang_release(release))
    ran = skipped = 0
    mismatches = []
    for hook in hf.hooks():
        for facts in hf.setters(hook, release, registered_only=False):
            if facts.via or facts.unresolved:
                continue
            file, cls = facts.setter.split("::")
            found = index.method((file, cls), hook)
            assert found is not None, facts.setter
            code = _compile(found[1], f"{release}/{file}")
            non_last = _run(code, hook, 2, False, [1, 2])
            last = _run(code, hook, 2, True, [1, 2])
            with_none = _run(code, hook, 1, True, None)
            if "not runnable" in (non_last[0], last[0], with_none[0]):
                assert facts.pp != hf.PP_RAISES, f"{facts.setter} raises under PP but did not run"
                skipped += 1
                continue
            ran += 1
            if facts.pp == hf.PP_RAISES:
                raised = [r for r in (non_last, last) if r[0] == "raised"]
                ok = bool(raised) and raised[0][1:] == (facts.pp_raise.type, facts.pp_raise.message)
            elif facts.pp == hf.PP_SKIPS:
                ok = non_last[0] == "quiet" and last[0] != "quiet"
            else:
                ok = non_last[0] == "worked"
            if facts.none == hf.NONE_REJECTED:
                ok = (
                    ok
                    and with_none[:2] == ("raised", facts.none_raise.type)
                    and (
                        facts.none_raise.message is None
                        or facts.none_raise.message.startswith("f")
                        or with_none[2] == facts.none_raise.message
                    )
                )
            elif facts.none == hf.NONE_DEFAULT:
                ok = ok and with_none[0] == "worked"
            elif facts.none == hf.NONE_IGNORED:
                ok = ok and with_none[0] == "quiet"
            elif facts.none == hf.NONE_UNCHECKED:
                ok = ok and (with_none[0] != "raised" or with_none[1] == "TypeError")
            if not ok:
                mismatches.append(
                    (hook, facts.setter, facts.pp, facts.none, non_last, last, with_none)
                )
    assert not mismatches, "\n".join(map(str, mismatches))
    assert ran >= 4 * skipped and ran >= 20, (ran, skipped)
