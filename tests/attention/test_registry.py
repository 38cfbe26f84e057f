import pytest

from partf.attention import Attention, attention_names, get_attention_class, register_attention


def test_unknown_name_lists_valid_ones():
    with pytest.raises(ValueError, match="unknown attention 'nope'; valid names: .*relative"):
        get_attention_class("nope")


def test_register_rejects_non_attention():
    with pytest.raises(TypeError, match="must subclass"):
        register_attention("bogus")(object)


def test_base_validates_heads():
    class Dummy(Attention):
        pass

    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        Dummy(d_model=8, num_heads=3)


def test_every_table_name_is_listed():
    assert {"relative", "softmax", "performer", "lara"} <= set(attention_names())
