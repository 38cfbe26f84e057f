"""Every mechanism of the zoo declares its options the way the command line reads them."""

import inspect

import pytest

from partf.attention import attention_names, create_attention, get_attention_class

ZOO = ["softmax", "local", "linear", "performer", "fastformer", "norm", "diag", "primal", "eva"]


@pytest.mark.parametrize("name", ZOO + ["lara"])
def test_options_are_constructor_arguments_with_their_defaults(name):
    cls = get_attention_class(name)
    assert name in attention_names()
    parameters = inspect.signature(cls.__init__).parameters
    assert cls.options, name
    for option, (default, help_text) in cls.options.items():
        assert option in parameters, (name, option)
        assert parameters[option].default == default, (name, option)
        assert isinstance(help_text, str) and help_text, (name, option)


def test_shared_option_names_share_their_type():
    seen = {}
    for name in ZOO + ["lara"]:
        for option, (default, _) in get_attention_class(name).options.items():
            seen.setdefault(option, type(default))
            assert seen[option] is type(default), option


@pytest.mark.parametrize("name", ZOO)
def test_one_set_of_flags_serves_every_mechanism(name):
    """create_attention drops the options a mechanism does not take."""
    flags = dict(
        mem_len=4, window_size=4, chunk_size=2, num_features=8, eta=0.2, mem_chunks=2, low_rank=3
    )
    layer = create_attention(name, 8, 2, **flags)
    config = layer.get_config()
    for option in type(layer).options:
        if option in flags:
            assert config[option] == flags[option], (name, option)
