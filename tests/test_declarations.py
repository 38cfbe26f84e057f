"""A mechanism is declared once, on its class, and found from its source: one new module
is all it takes to be in the registry, on partf-train's command line and in saved files."""

from __future__ import annotations

import ast
import sys

import keras
import numpy as np
import pytest

from partf import declarations, keras_objects
from partf.attention import attention_names, get_attention_class, registry
from partf.cli import train
from partf.models import PARTransformerXL
from partf.training.resolve import resolve_model

#: The whole of a new mechanism: softmax attention with its queries scaled.
TOY = '''"""Toy attention: softmax attention with its queries scaled by `sharpness`."""

from typing import Any

from partf.attention.registry import register_attention
from partf.attention.softmax import SoftmaxAttention


@register_attention("toy", position="rotary")
class ToyAttention(SoftmaxAttention):
    option_help = {**SoftmaxAttention.option_help, "sharpness": "toy: the queries' scale"}

    def __init__(self, d_model: int, num_heads: int, sharpness: float = 2.0, **kwargs: Any):
        super().__init__(d_model, num_heads, **kwargs)
        self.sharpness = sharpness

    def attend(self, q, k, v, state, mask=None, training=None):
        return super().attend(q * self.sharpness, k, v, state, mask=mask, training=training)
'''


def forget_toy() -> None:
    """Undoes what importing the toy module did, as in a fresh interpreter."""
    registry._REGISTRY.pop("toy", None)
    keras.saving.get_custom_objects().pop("partf>ToyAttention", None)
    for module in ("toy_mechanisms.toy", "toy_mechanisms"):
        sys.modules.pop(module, None)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A package holding one module, toy.py, read for declarations as partf's own are."""
    package = tmp_path / "toy_mechanisms"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "toy.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    packages = [*declarations.PACKAGES, ("toy_mechanisms", package)]
    monkeypatch.setattr(declarations, "PACKAGES", packages)
    yield
    forget_toy()


def test_a_mechanism_added_by_one_module_is_in_the_registry_help_and_saved_files(toy, tmp_path):
    # Declared, and on partf-train's --help with its options and their defaults, read
    # from the source: nothing imported, nothing regenerated.
    assert declarations.declared().mechanisms["toy"] == "toy_mechanisms.toy"
    help_text = train.build_parser(train.attention_options()).format_help()
    assert "--attn_toy_sharpness" in help_text
    assert "toy: the queries' scale; toy only (defaults: toy=2.0)" in " ".join(help_text.split())
    assert "toy_mechanisms.toy" not in sys.modules

    # The registry: imported when named.
    assert "toy" in attention_names()
    cls = get_attention_class("toy")
    assert cls.__name__ == "ToyAttention" and cls.registry_name == "toy"
    assert cls.options["sharpness"] == (2.0, "toy: the queries' scale")

    # The flags.
    config, _ = train.parse_args(["--attention", "toy", "--attn_sharpness", "3"])
    assert config.model.attention == "toy"
    assert config.model.attention_options["sharpness"] == 3

    # position="auto" takes the encoding the decorator declares.
    model_config = resolve_model(
        dict(d_model=8, num_heads=2, d_ffn=16, num_layers=1, mem_len=4, cutoffs=(),
             attention="toy", position="auto", attention_options={"sharpness": 3.0}),
        objective="causal", search="par", vocab_size=30, batch_size=2, tau_steps=1,
    )  # fmt: skip
    assert model_config.position == "rotary"

    # A saved model loads again through the stand-in of its declared class.
    model = PARTransformerXL(model_config)
    tokens = np.random.default_rng(0).integers(1, 30, size=(2, 5)).astype("int32")
    want = np.asarray(model(tokens, training=False))
    model.save(tmp_path / "toy.keras")
    forget_toy()
    assert "ToyAttention" in keras_objects.register_stand_ins()
    loaded = keras.saving.load_model(tmp_path / "toy.keras")
    attentions = [a for block in loaded.backbone.blocks for _, a in block.attentions()]
    assert [type(a).__name__ for a in attentions] == ["ToyAttention"]
    assert attentions[0].sharpness == 3.0
    loaded.reset_state()
    np.testing.assert_array_equal(np.asarray(loaded(tokens, training=False)), want)


def test_a_mechanism_is_named_by_a_literal():
    source = "@register_attention(NAME)\nclass A(Attention):\n    pass\n"
    decorator = ast.parse(source).body[0].decorator_list[0]
    with pytest.raises(ValueError, match="must name the mechanism by a literal"):
        declarations.mechanism_name(decorator, "m.A")


def test_a_recommended_position_must_be_one_the_mechanism_has():
    from partf.attention.fastformer import FastformerAttention

    with pytest.raises(ValueError, match="cannot recommend position 'rotary'"):
        registry.register_attention("fast2", position="rotary")(FastformerAttention)
    assert "fast2" not in attention_names()
