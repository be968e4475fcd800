"""isort-order import insertion and black-style call layout used by the upstream rewriters."""

from __future__ import annotations

import libcst as cst

from codemods.upstream.edit.imports import add_from_import
from codemods.upstream.edit.pyformat import Call, lines_to_text, parse_statements, render_call

MOD = "sglang.srt.distributed.pp_aux_transport"
NAMES = ("validate_layer_ids", "PPAuxTransport", "AuxCapturePlan")


def _add(source: str) -> str:
    return add_from_import(cst.parse_module(source), MOD, NAMES).code


def test_placed_between_sglang_imports_in_module_order():
    source = (
        "import torch\n\n"
        "from sglang.srt.configs import X\n"
        "from sglang.srt.distributed import get_pp_group\n"
        "from sglang.srt.layers.utils import PPMissingLayer\n"
    )
    assert _add(source) == (
        "import torch\n\n"
        "from sglang.srt.configs import X\n"
        "from sglang.srt.distributed import get_pp_group\n"
        "from sglang.srt.distributed.pp_aux_transport import (\n"
        "    AuxCapturePlan,\n"
        "    PPAuxTransport,\n"
        "    validate_layer_ids,\n"
        ")\n"
        "from sglang.srt.layers.utils import PPMissingLayer\n"
    )


def test_after_last_sglang_import_and_comments_stay_put():
    source = "from sglang.srt.a import b\n# keep me\nfrom sglang.srt.b import c\n\nx = 1\n"
    out = _add(source)
    assert out.index("pp_aux_transport") > out.index("from sglang.srt.b import c")
    assert "# keep me\nfrom sglang.srt.b import c\n" in out
    assert out.endswith("\nx = 1\n")


def test_new_section_without_sglang_imports():
    assert _add("import os\n\nx = 1\n").startswith("import os\n\nfrom sglang.srt.distributed")


def test_existing_statement_is_extended_and_second_run_is_a_no_op():
    source = f"from {MOD} import PPAuxTransport\n"
    once = _add(source)
    assert once == (
        f"from {MOD} import (\n    AuxCapturePlan,\n    PPAuxTransport,\n"
        "    validate_layer_ids,\n)\n"
    )
    assert _add(once) == once


def test_render_call_tiers():
    short = Call("f", ("a", "b"))
    assert render_call("    ", "x = ", short) == ["    x = f(a, b)"]
    long_args = tuple(f"long_argument_number_{i}" for i in range(3))
    assert render_call(" " * 8, "value = ", Call("function", long_args)) == [
        "        value = function(",
        "            long_argument_number_0, long_argument_number_1, long_argument_number_2",
        "        )",
    ]
    many = tuple(f"argument_number_{i}" for i in range(6))
    lines = render_call(" " * 8, "", Call("function", many))
    assert lines[0] == "        function(" and lines[-1] == "        )"
    assert all(line.endswith(",") for line in lines[1:-1]) and len(lines) == 8
    assert all(len(line) <= 88 for line in lines)


def test_parse_statements_renders_at_its_indentation():
    text = lines_to_text(render_call(" " * 8, "y = ", Call("g", tuple("x" * 30 for _ in "ab"))))
    (stmt,) = parse_statements(text, " " * 8)
    module = cst.parse_module("class A:\n    def f(self):\n        pass\n")
    func = module.body[0].body.body[0]
    new = module.with_deep_changes(func.body, body=[stmt])
    assert new.code == "class A:\n    def f(self):\n" + text


def test_first_in_its_section_it_takes_over_the_gap_above_the_section():
    source = (
        "import torch\n"
        "from torch import nn\n\n"
        "# layers\n"
        "from sglang.srt.layers.utils import PPMissingLayer\n"
    )
    assert _add(source) == (
        "import torch\n"
        "from torch import nn\n\n"
        "from sglang.srt.distributed.pp_aux_transport import (\n"
        "    AuxCapturePlan,\n"
        "    PPAuxTransport,\n"
        "    validate_layer_ids,\n"
        ")\n"
        "# layers\n"
        "from sglang.srt.layers.utils import PPMissingLayer\n"
    )


def test_a_standard_library_import_joins_the_standard_library_section():
    source = (
        '"""Doc."""\n\n'
        "from __future__ import annotations\n\n"
        "import os\n"
        "from typing import List\n\n"
        "import torch\n\n"
        "from sglang.srt.a import b\n"
    )
    out = add_from_import(cst.parse_module(source), "dataclasses", ["dataclass"]).code
    assert out == source.replace(
        "from typing import List\n", "from dataclasses import dataclass\nfrom typing import List\n"
    )
    # After every from-import of the section when none sorts after it.
    out = add_from_import(cst.parse_module(source), "uuid", ["uuid4"]).code
    assert out == source.replace(
        "from typing import List\n", "from typing import List\nfrom uuid import uuid4\n"
    )
    # First in the section, it takes over the gap below ``from __future__``.
    first = source.replace("import os\n", "")
    out = add_from_import(cst.parse_module(first), "dataclasses", ["dataclass"]).code
    assert out == first.replace(
        "from typing import List\n", "from dataclasses import dataclass\nfrom typing import List\n"
    )
