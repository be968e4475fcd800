"""The prefilter never drops a file in which discovery finds a call site.

Discovery with the prefilter off (every file parsed) is the reference; each stage of the
prefilter must keep every file the reference finds a call site in, and runs with the prefilter
on and off must report identical findings: over every fixture, a generated corpus of all call
shapes and of spellings meant to fool a text search, and the real SGLang tree when it is
cached (there: the prefilter on over the whole tree, discovery without it over the model
folder, every file whose text names the hook suffix and every twentieth other file).
"""

from __future__ import annotations

import json
import os
import tokenize
from pathlib import Path

import pytest

from codemods.callers import engine
from codemods.callers.options import TransformOptions
from codemods.callers.transform import scan_source
from codemods.sources.prefilter import Prefilter

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
DSPARK = "set_dspark_layers_to_capture"
EXTRA = ("set_medusa_layers_to_capture", "enable_capture")

#: name -> (source, whether discovery finds a call site in it).  Sources are bytes so that
#: encodings and line endings are exactly what the test says.
CORPUS: dict[str, tuple[bytes, bool]] = {
    "direct": (b"def f(m, ids=None):\n    m.set_dspark_layers_to_capture(ids)\n", True),
    "unbound": (b"def f(m, ids):\n    Model.set_eagle3_layers_to_capture(m, ids)\n", True),
    "getattr": (b"def f(m, ids):\n    getattr(m, 'set_msd_layers_to_capture')(ids)\n", True),
    "getattr_empty_piece": (
        b"def f(m, ids):\n    getattr(m, '' \"set_msd_layers_to_capture\")(ids)\n",
        True,
    ),
    "variable": (
        b"def f(m, ids=None):\n    s = m.set_dflash_layers_to_capture\n    s(ids)\n",
        True,
    ),
    "module_dict": (
        b"HOOKS = {'dspark': 'set_dspark_layers_to_capture'}\n\n"
        b"def f(m, kind, ids=None):\n    getattr(m, HOOKS[kind])(ids)\n",
        True,
    ),
    "module_loop_names": (
        b"NAMES = ('set_eagle3_layers_to_capture', 'set_dspark_layers_to_capture')\n"
        b"def f(m, ids=None):\n    for name in NAMES:\n        getattr(m, name)(ids)\n",
        True,
    ),
    "custom_hook_form": (b"def f(m, ids=None):\n    m.set_medusa_layers_to_capture(ids)\n", True),
    "custom_hook_plain": (b"def f(m, ids=None):\n    m.enable_capture(ids)\n", True),
    "crlf": (b"def f(m, ids=None):\r\n    m.set_dspark_layers_to_capture(ids)\r\n", True),
    "bom_latin1_cookie": (
        b"# -*- coding: latin-1 -*-\n# caf\xe9\ndef f(m, ids=None):\n"
        b"    m.set_dspark_layers_to_capture(ids)\n",
        True,
    ),
    # UTF-7 spells "_" as "+AF8-": the bytes never hold the name, the text does.
    "utf7_cookie": (
        b"# coding: utf-7\ndef f(m, ids=None):\n"
        b"    m.set+AF8-dspark+AF8-layers+AF8-to+AF8-capture(ids)\n",
        True,
    ),
    # f-string getattr names: discovery matches them against every hook whose tail they spell
    # out; an f-string without the "_layers_to_capture" tail names no hook.
    "fstring_getattr": (
        b"def f(m, kind, ids=None):\n    getattr(m, f'set_{kind}_layers_to_capture')(ids)\n",
        True,
    ),
    "fstring_any_attribute": (b"def f(obj, attr, x):\n    getattr(obj, f'{attr}')(x)\n", False),
    "fstring_family_tail": (
        b'def f(m, kind, ids=None):\n    getattr(m, f"{kind}_layers_to_capture")(ids)\n',
        True,
    ),
    "fstring_tail_with_format_spec": (
        b"def f(m, kind, ids=None):\n    getattr(m, f'set_{kind!s:>1}_layers_to_capture')(ids)\n",
        True,
    ),
    "fstring_assigned_then_getattr": (
        b"def f(m, kind, ids=None):\n    name = rf'set_{kind}_layers_to_capture'\n"
        b"    getattr(m.model(), name)(ids)\n",
        True,
    ),
    "fstring_getattr_multiline_with_strings": (
        b"def f(m, k, x):\n    getattr(\n        m.get('a,b'),\n        f'{k}',\n    )(x)\n",
        False,
    ),
    "fstring_parenthesised": (
        b"def f(m, k, x):\n    getattr(m, (f'set_{k}_layers_to_capture'))(x)\n",
        True,
    ),
    "fstring_annotated_name_then_getattr": (
        b"def f(m, k, x):\n    name: str = f'set_{k}_layers_to_capture'\n"
        b"    getattr(m.get('x', 1), name)(x)\n",
        True,
    ),
    "fstring_in_assert_and_join": (
        b"import os\ndef f(m, a, b):\n    getattr(m, 'x')\n    assert a, f'{a}'\n"
        b"    return os.path.join(a, f'{a}_{b}')\n",
        False,
    ),
    "fstring_elsewhere": (
        b"def f(m, n):\n    print(f'{n}')\n    return getattr(m, f'{n}_proj')\n",
        False,
    ),
    # Hook names resolved as values: dicts of tuples, .get, loops, class constants,
    # comprehensions.
    "table_of_tuples_get_loop": (
        b"TABLE = {'dspark': ('set_dspark_layers_to_capture', 'set_dflash_layers_to_capture'),"
        b" 'eagle3': ('set_eagle3_layers_to_capture',)}\n"
        b"def f(m, k, ids=None):\n    for n in TABLE.get(k, ()):\n"
        b"        s = getattr(m, n, None)\n        s(ids)\n",
        True,
    ),
    "class_constant_through_self": (
        b"class B:\n    NAMES = ['set_dflash_layers_to_capture']\n"
        b"    def go(self, m, ids=None):\n        for n in self.NAMES:\n"
        b"            getattr(m, n)(ids)\n",
        True,
    ),
    "comprehension_of_names": (
        b"G = [('set_dspark_layers_to_capture',)]\n"
        b"def f(m, ids=None):\n    for n in [x for g in G for x in g]:\n"
        b"        getattr(m, n)(ids)\n",
        True,
    ),
    # A hasattr literal is inert even inside a table the resolver follows.
    "table_of_hasattr_results": (
        b"def f(m, ids=None):\n    t = {'k': hasattr(m, 'set_dspark_layers_to_capture')}\n"
        b"    getattr(m, t['k'] or 'x')(ids)\n",
        False,
    ),
    # Inert mentions only: stage two drops these.
    "definition_only": (
        b"class M:\n    def set_dspark_layers_to_capture(self, ids):\n        self.ids = ids\n",
        False,
    ),
    "comment_only": (b"x = 1  # calls set_dspark_layers_to_capture later\n", False),
    "self_delegation": (
        b"class W:\n    def set_dspark_layers_to_capture(\n        self, ids\n    ) -> None:\n"
        b'        """Forward."""\n        self.inner.set_dspark_layers_to_capture(ids)\n',
        False,
    ),
    "self_delegation_one_line": (
        b"class W:\n    def set_eagle3_layers_to_capture(self, ids=None): "
        b"self.m.set_eagle3_layers_to_capture(ids)\n",
        False,
    ),
    "delegation_guarded_by_hasattr": (
        b"class W:\n    def set_dflash_layers_to_capture(self, ids):\n"
        b"        if not hasattr(self.m, 'set_dflash_layers_to_capture'):\n"
        b"            raise AttributeError('no')\n"
        b"        self.m.set_dflash_layers_to_capture(ids)\n",
        False,
    ),
    "docstring_mention": (b'def f():\n    """See set_dspark_layers_to_capture."""\n', False),
    "mock_assertion": (
        b"def test(m):\n    m.set_dspark_layers_to_capture.assert_called_once_with([1])\n",
        False,
    ),
    "split_concatenation": (
        b"def f(m, ids):\n    getattr(m, 'set_dspark_' 'layers_to_capture')(ids)\n",
        False,
    ),
    "escaped_name": (
        b"def f(m, ids):\n    getattr(m, 'set_dspark_layers\\x5fto_capture')(ids)\n",
        False,
    ),
    "hasattr_only": (
        b"def f(m):\n    if hasattr(\n        m, 'set_dspark_layers_to_capture'\n    ):\n"
        b"        pass\n",
        False,
    ),
    # A hook stored inside its own definition and called elsewhere: a call site.
    "hook_stored_in_its_definition": (
        b"class W:\n    def set_dspark_layers_to_capture(self, ids):\n"
        b"        self._fn = self.inner.set_dspark_layers_to_capture\n\n"
        b"    def later(self, ids=None):\n        self._fn(ids)\n",
        True,
    ),
    # Spellings that a careless text rule would drop, but discovery reports.
    "call_in_other_function_after_definition": (
        b"class W:\n    def set_dspark_layers_to_capture(self, ids):\n        pass\n\n"
        b"def use(m, ids=None):\n    m.set_dspark_layers_to_capture(ids)\n",
        True,
    ),
    "lambda_inside_hook": (
        b"class W:\n    def set_dspark_layers_to_capture(self, ids=None):\n"
        b"        run = lambda: self.m.set_eagle3_layers_to_capture(ids)\n"
        b"        (lambda: self.m.set_dspark_layers_to_capture(ids))()\n",
        True,
    ),
    "nested_function_inside_hook": (
        b"class W:\n    def set_dspark_layers_to_capture(self, ids=None):\n"
        b"        def later():\n            self.m.set_dspark_layers_to_capture(ids)\n"
        b"        return later\n",
        True,
    ),
    "nested_class_inside_hook": (
        b"def set_dspark_layers_to_capture(ids=None):\n    class Later:\n"
        b"        def go(self, m):\n            m.set_dspark_layers_to_capture(ids)\n",
        True,
    ),
    # Discovery treats any call inside a hook's definition as forwarding; the prefilter only
    # drops same-name forwarding, so it parses this one.
    "other_hook_inside_hook": (
        b"class W:\n    def set_eagle3_layers_to_capture(self, ids=None):\n"
        b"        self.m.set_dspark_layers_to_capture(ids)\n",
        False,
    ),
    "fake_definition_in_string": (
        b'def real(m, ids=None):\n    text = """\ndef set_dspark_layers_to_capture(self):"""\n'
        b"    getattr(m, 'set_dspark_layers_to_capture')(ids)\n",
        True,
    ),
    "hash_in_string_before_call": (
        b"def f(m, ids=None):\n    tag = '#'; m.set_dspark_layers_to_capture(ids)\n",
        True,
    ),
    "comment_then_string_closing": (
        b'def f(m, ids=None):\n    x = """\n#"""; m.set_dspark_layers_to_capture(ids)\n',
        True,
    ),
    "old_mac_line_breaks": (
        b"class W:\r    def set_dspark_layers_to_capture(self, ids):\r        pass\r"
        b"def use(m, ids=None):\r    m.set_dspark_layers_to_capture(ids)\r",
        True,
    ),
    "continuation_line_at_lower_indent": (
        b"def set_dspark_layers_to_capture(ids=None):\n    pass\nx = foo(\n"
        b"    getattr(m, 'set_dspark_layers_to_capture')(ids))\n",
        True,
    ),
    "multiline_string_between": (
        b"class W:\n    def set_dspark_layers_to_capture(self, ids=None):\n"
        b'        """Doc\n    """\n        pass\n'
        b"def use(m, ids=None):\n    m.set_dspark_layers_to_capture(ids)\n",
        True,
    ),
}


def _options() -> TransformOptions:
    return TransformOptions(extra_hooks=EXTRA)


def _reference(source: bytes, path: str, options: TransformOptions):
    return scan_source(source, path, options, prefilter=False).call_sites


def _fixture_files() -> list[tuple[Path, TransformOptions]]:
    found = []
    for path in sorted(FIXTURES.rglob("*.py")):
        options_file = path.parent / "options.json"
        extra = ()
        if options_file.exists():
            extra = tuple(json.loads(options_file.read_text()).get("extra_hooks", ()))
        found.append((path, TransformOptions(extra_hooks=extra)))
    return found


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_generated_corpus_both_stages_keep_every_file_with_a_call_site(name):
    source, has_site = CORPUS[name]
    options = _options()
    sites = _reference(source, f"{name}.py", options)
    assert bool(sites) is has_site, "the corpus entry no longer says what discovery does"
    for sharp in (False, True):
        if sites:
            assert Prefilter.for_names(EXTRA, sharp=sharp).needs_parse(source), (name, sharp)


def test_stage_two_drops_the_inert_mentions_and_stage_one_does_not():
    inert = [
        "definition_only",
        "comment_only",
        "self_delegation",
        "self_delegation_one_line",
        "delegation_guarded_by_hasattr",
        "hasattr_only",
    ]
    for name in inert:
        source = CORPUS[name][0]
        assert Prefilter.for_names(EXTRA, sharp=False).needs_parse(source), name
        assert not Prefilter.for_names(EXTRA, sharp=True).needs_parse(source), name
    stored = CORPUS["hook_stored_in_its_definition"][0]
    assert Prefilter.for_names(EXTRA, sharp=True).needs_parse(stored)
    assert not Prefilter().needs_parse(CORPUS["fstring_elsewhere"][0])
    assert not Prefilter().needs_parse(CORPUS["fstring_in_assert_and_join"][0])
    plain = b"import os\nprint(os.sep)\n"
    assert not Prefilter.for_names(EXTRA, sharp=False).needs_parse(plain)


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (
            b"\x89PNG\r\n\x1a\n\xff\xfe#model.set_eagle3_layers_to_capture(ids)\n\x01",
            b"PNG = 1\n#model.set_eagle3_layers_to_capture(ids)\n",
        ),
        (
            b"x = 1  # \xff model.set_eagle3_layers_to_capture(ids)\n",
            b"x = 1  # model.set_eagle3_layers_to_capture(ids)\n",
        ),
        (
            b"\x00\x01#model.set_eagle3_layers_to_capture(ids)\n",
            b"#model.set_eagle3_layers_to_capture(ids)\n",
        ),
        (
            b"# -*- coding: ascii -*-\n# caf\xe9 set_eagle3_layers_to_capture\n",
            b"# -*- coding: ascii -*-\n# cafe set_eagle3_layers_to_capture\n",
        ),
    ],
    ids=["binary", "bad-utf8-before-comment", "nul-bytes", "not-ascii-under-ascii-cookie"],
)
def test_bytes_are_decided_before_comments(data, text):
    """A file that mentions a hook where stage two would see a comment, but whose bytes are
    no text Python reads, is passed so the parser names it; the same file as text is not."""
    assert Prefilter().needs_parse(data)
    result = scan_source(data, "binary.py")
    assert result.status.name == "FAILED" and result.error, result
    assert not Prefilter().needs_parse(text)


def test_user_hook_names_are_searched_too():
    source = CORPUS["custom_hook_plain"][0]
    assert not Prefilter().needs_parse(source)
    assert Prefilter.for_names(["enable_capture"]).needs_parse(source)


def test_fixtures_both_stages_keep_every_file_with_a_call_site():
    checked = 0
    for path, options in _fixture_files():
        source = path.read_bytes()
        if not _reference(source, str(path), options):
            continue
        checked += 1
        for sharp in (False, True):
            prefilter = Prefilter.for_names(options.extra_hooks, sharp=sharp)
            assert prefilter.needs_parse(source), (path, sharp)
    assert checked >= 20  # the fixtures are full of call sites: the check really ran


def _sites_by_file(results) -> dict[str, list]:
    return {result.path: [site.to_dict() for site in result.call_sites] for result in results}


def _on_and_off(tree: Path, options: TransformOptions, jobs: int = 1):
    on = list(engine.scan([tree], options, execution=engine.Execution(jobs=jobs)))
    off = list(engine.scan([tree], options, execution=engine.Execution(jobs=jobs, prefilter=False)))
    return on, off


def test_engine_findings_identical_with_prefilter_on_and_off(tmp_path):
    for name, (source, _) in CORPUS.items():
        (tmp_path / f"{name}.py").write_bytes(source)
    for index, (path, _) in enumerate(_fixture_files()):
        target = tmp_path / "fixtures" / f"{index:03d}_{path.parent.name}_{path.name}"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(path.read_bytes())
    on, off = _on_and_off(tmp_path, _options())
    assert [r.path for r in on] == [r.path for r in off]
    assert _sites_by_file(on) == _sites_by_file(off)
    assert sum(map(len, _sites_by_file(on).values())) >= 40


def _mentions_the_hook_suffix(path: Path) -> bool:
    """Whether the file's text (decoded as Python decodes it) holds ``layers_to_capture``,
    which every catalog hook name holds."""
    with tokenize.open(path) as handle:
        return "layers_to_capture" in handle.read()


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(3600)
def test_real_sglang_tree_identical_findings(sglang_release):
    """The prefilter on over the whole tree; discovery with it off over every file whose
    text names the hook suffix, the model folder and every twentieth other file: the findings
    agree on all of those, and no other file has a finding."""
    tree = sglang_release("0.5.20") / "sglang"
    options = TransformOptions()
    files = sorted(tree.rglob("*.py"))
    mentions = [path for path in files if _mentions_the_hook_suffix(path)]
    sample = sorted(set(files[::20]) | set(mentions) | set((tree / "srt" / "models").glob("*.py")))
    assert len(files) > 3000 and len(sample) >= 400 and len(mentions) >= 20
    jobs = os.cpu_count() or 1
    on = list(engine.scan([tree], options, execution=engine.Execution(jobs=jobs)))
    off = list(engine.scan(sample, options, execution=engine.Execution(jobs=jobs, prefilter=False)))
    assert len(on) == len(files) and len(off) == len(sample)
    on_sites, off_sites = _sites_by_file(on), _sites_by_file(off)
    assert {path: on_sites[path] for path in off_sites} == off_sites
    # Files outside the sample: none names a hook, so discovery has nothing to find there.
    named = {str(path) for path in mentions}
    assert {r.path for r in on if r.call_sites} <= named
    with_sites = [r.path for r in off if r.call_sites]
    assert with_sites  # SGLang's own model runner calls the hooks
    assert with_sites == [r.path for r in on if r.call_sites]
    for path in with_sites:
        source = Path(path).read_bytes()
        assert Prefilter(sharp=False).needs_parse(source), path
        assert Prefilter(sharp=True).needs_parse(source), path


@pytest.mark.slow
@pytest.mark.sglang
@pytest.mark.timeout(1800)
def test_real_sglang_stage_two_keeps_every_file_stage_one_needs(sglang_release):
    """The quicker half of the check above: stage one is a plain text search for spelled-out
    names (safe by construction), so discovery only needs to run on the files it passes."""
    tree = sglang_release("0.5.20") / "sglang"
    stage_one, stage_two = Prefilter(sharp=False), Prefilter(sharp=True)
    passed = dropped = 0
    for path in sorted(tree.rglob("*.py")):
        source = path.read_bytes()
        if not stage_one.needs_parse(source):
            continue
        passed += 1
        sites = scan_source(source, str(path), TransformOptions(), prefilter=False).call_sites
        if sites:
            assert stage_two.needs_parse(source), path
        elif not stage_two.needs_parse(source):
            dropped += 1
    assert passed >= 40 and dropped >= 30  # SGLang's model files define and forward hooks
