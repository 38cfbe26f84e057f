"""partf-train's settings and options are read from the source with `ast`; what is not
made of literals is refused with its file and line, never imported.
(tests/cli/test_quiet.py checks that what partf's own source gives equals the classes.)"""

from __future__ import annotations

import re
import sys

import pytest

from partf import declarations
from partf.cli import settings_source

#: Another module of the package: constants the mechanism imports, relatively.
WORDS = """HELP = "odd: the scale"
SCALE, SHIFT = 2, "up"
"""

#: A mechanism whose option `scale` has a default that is no literal (line 15).
ODD = """from partf.attention.registry import register_attention
from partf.attention.softmax import SoftmaxAttention

from .words import SCALE


def computed():
    return SCALE


@register_attention("odd")
class OddAttention(SoftmaxAttention):
    option_help = {"scale": "odd: the scale"}

    def __init__(self, d_model, num_heads, scale: float = computed(), **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
"""


def package(tmp_path, monkeypatch, **modules: str):
    """A package of `modules` (name -> source) read for declarations as partf's own."""
    folder = tmp_path / "odd_mechanisms"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name, text in modules.items():
        (folder / f"{name}.py").write_text(text)
    monkeypatch.setattr(
        declarations, "PACKAGES", [*declarations.PACKAGES, ("odd_mechanisms", folder)]
    )
    return folder


def test_a_default_that_is_no_literal_is_refused_with_its_file_and_line(tmp_path, monkeypatch):
    folder = package(tmp_path, monkeypatch, words=WORDS, odd=ODD)
    where = re.escape(f"{folder / 'odd.py'}:15: computed() is not made of literals")
    with pytest.raises(ValueError, match=where):
        settings_source.mechanism_options()
    assert "odd_mechanisms.odd" not in sys.modules


def test_an_option_without_a_default_is_refused(tmp_path, monkeypatch):
    source = ODD.replace("scale: float = computed()", "scale: float")
    package(tmp_path, monkeypatch, words=WORDS, odd=source)
    with pytest.raises(ValueError, match="OddAttention lists option 'scale' but no constructor"):
        settings_source.mechanism_options()


#: A mechanism whose help texts and defaults are constants of another module, one
#: help text the base class's.
RESOLVED = """from partf.attention.registry import register_attention
from partf.attention.softmax import SoftmaxAttention as Base

from .words import HELP, SCALE, SHIFT


@register_attention("odd")
class OddAttention(Base):
    option_help = {**Base.option_help, "scale": HELP, "shift": f"odd: {SHIFT}"}

    def __init__(self, d_model, num_heads, scale=-SCALE, *, shift=SHIFT, **kwargs):
        super().__init__(d_model, num_heads, **kwargs)
"""


def test_options_resolve_through_imports_bases_and_constants(tmp_path, monkeypatch):
    package(tmp_path, monkeypatch, words=WORDS, odd=RESOLVED)
    assert settings_source.mechanism_options()["odd"] == {
        "mem_len": (0, "previous tokens whose keys and values are kept as memory (0: none)"),
        "scale": (-2, "odd: the scale"),
        "shift": ("up", "odd: up"),
    }
    assert "odd_mechanisms.odd" not in sys.modules


def test_a_setting_of_a_type_no_flag_spells_is_refused(tmp_path, monkeypatch):
    source = (
        "import dataclasses\n\nfrom partf.settings import setting\n\n\n"
        "@dataclasses.dataclass\nclass Config:\n"
        '    size: int = setting(3, "a size")\n'
        '    table: dict = setting(None, "a table")\n'
    )
    package(tmp_path, monkeypatch, config=source)
    source_read = settings_source._Source(tuple(declarations.PACKAGES))
    with pytest.raises(ValueError, match=r"config\.py:9: no flag spelling .* type dict"):
        source_read.settings("odd_mechanisms.config", "Config")
