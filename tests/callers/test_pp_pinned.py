"""No ``pp-silent`` risk where the module pins ``pp_size`` to the literal 1."""

from __future__ import annotations

import libcst as cst
import pytest
from click.testing import CliRunner

from codemods.callers.analyse.pp_pinned import pins_pp_size_one
from codemods.callers.records import Risk
from codemods.callers.transform import TransformOptions, scan_source
from codemods.cli.commands import cli

CALL = "def capture(model):\n    model.set_eagle3_layers_to_capture([1, 2])\n"


def risks(source: str) -> tuple[Risk, ...]:
    (site,) = scan_source(source.encode(), "m.py", TransformOptions()).call_sites
    return site.risks


def nodes(source: str):
    from codemods.callers.analyse import analyse

    return analyse(cst.parse_module(source)).parents


@pytest.mark.parametrize(
    "pin",
    [
        "engine = Engine(model_path='x', pp_size=1)\n",
        "pp_size = 1\n",
        "args.pp_size = 1\n",
        "PP: int = 1\npp_size: int = 1\n",
        "CONFIG = {'pp_size': 1}\n",
        "ARGV = ['--model', 'x', '--pp-size', '1']\n",
        "ARGV = ('--pp-size=1',)\n",
        "ARGV = ['--pp-size', 1]\n",
        "a = ServerArgs(pp_size=1)\nb = ServerArgs(pp_size=1, tp_size=2)\n",
    ],
)
def test_a_literal_1_pins_pp_off(pin):
    assert Risk.PP_SILENT in risks(CALL)  # the control: an EAGLE3 call is at risk
    assert pins_pp_size_one(nodes(pin + CALL))
    assert Risk.PP_SILENT not in risks(pin + CALL)


@pytest.mark.parametrize(
    "pin",
    [
        "",
        "engine = Engine(pp_size=2)\n",
        "engine = Engine(pp_size=args.pp)\n",
        "pp_size = 1\nother = Engine(pp_size=4)\n",
        "pp_size = 1\npp_size += 1\n",
        "def main(pp_size=1):\n    pass\n",
        "ARGV = ['--pp-size', '2']\n",
        "ARGV = ['--pp-size', str(n)]\n",
        "ARGV = ['--pp-size']\n",
        "tp_size = 1\n",
    ],
)
def test_anything_else_keeps_the_risk(pin):
    assert not pins_pp_size_one(nodes(pin + CALL))
    assert Risk.PP_SILENT in risks(pin + CALL)


#: A call migrate rewrites (its ids may be None): the scan's risk line counts only those.
REWRITTEN_CALL = "def capture(model, ids=None):\n    model.set_dspark_layers_to_capture(ids)\n"


def test_scan_risk_line_leaves_out_a_pinned_module(tmp_path):
    (tmp_path / "pinned.py").write_text("pp_size = 1\n" + REWRITTEN_CALL)
    (tmp_path / "free.py").write_text(REWRITTEN_CALL)
    result = CliRunner().invoke(cli, ["scan", str(tmp_path)])
    assert "2 to change" in result.stderr
    assert "risk: 1 call site may lose their captures silently" in result.stderr
    pinned = next(line for line in result.stdout.splitlines() if "pinned.py" in line)
    assert "pp-silent" not in pinned
