"""TransNormer's NormAttention and DiagAttention against independent references."""

import numpy as np
import pytest

from partf.attention import create_attention, get_attention_class
from partf.attention.transnormer import DiagAttention, NormAttention
from partf.models.config import ModelConfig
from tests.attention import references
from tests.attention.helpers import (
    assert_causal,
    assert_finite_on_large_inputs,
    assert_segments_equal_one_call,
    check_attend,
    gradients,
    random_heads,
    random_state,
    random_tokens,
    to_np,
)
from tests.layer_checks import assert_config_round_trip


def settings(layer):
    """The reference's config and the output normalisation's weights (layer norm)."""
    config = {"norm_type": layer.norm_type, "rms_form": layer.rms_form}
    weights = {}
    if layer.norm_type == "layer":
        config["norm_epsilon"] = layer.output_norm.epsilon
        rng = np.random.default_rng(4)
        shape = layer.output_norm.gamma.shape
        layer.output_norm.gamma.assign(rng.normal(size=shape).astype("float32") + 1.0)
        layer.output_norm.beta.assign(rng.normal(size=shape).astype("float32"))
        weights = {"norm_gamma": layer.output_norm.gamma, "norm_beta": layer.output_norm.beta}
    return config, weights


@pytest.mark.parametrize(
    "batch,length,heads,dim,chunk,feature_map,norm_type,rms_form",
    [
        (1, 7, 1, 4, 4, "elu", "simple_rms", "authors"),
        (2, 9, 2, 3, 4, "elu+1", "simple_rms", "partf"),
        (2, 23, 3, 4, 8, "elu+1", "layer", "authors"),
        (2, 12, 2, 3, 64, "relu", "none", "authors"),
    ],
)
def test_norm_matches_reference(batch, length, heads, dim, chunk, feature_map, norm_type, rms_form):
    layer = NormAttention(
        heads * dim,
        heads,
        chunk_size=chunk,
        feature_map=feature_map,
        norm_type=norm_type,
        rms_form=rms_form,
    )
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    config, weights = settings(layer)
    config["feature_map"] = feature_map
    check_attend(layer, references.norm, config, q, k, v, state, mask, variables=weights, rtol=2e-4)


@pytest.mark.parametrize(
    "batch,length,heads,dim,window,activation,norm_type,rms_form",
    [
        (1, 7, 1, 4, 3, "softmax", "simple_rms", "partf"),
        (2, 23, 3, 4, 8, "softmax", "layer", "authors"),
        (2, 5, 2, 3, 16, "relu", "simple_rms", "authors"),
        (2, 13, 2, 3, 4, "relu", "none", "authors"),
    ],
)
def test_diag_matches_reference(batch, length, heads, dim, window, activation, norm_type, rms_form):
    layer = DiagAttention(
        heads * dim,
        heads,
        window_size=window,
        diag_activation=activation,
        norm_type=norm_type,
        rms_form=rms_form,
    )
    layer.build((None, None, heads * dim))
    q, k, v = random_heads(batch, length, heads, dim)
    _, mask = random_tokens(batch, length, 1, seed=1)
    state = random_state(layer, batch)
    config, weights = settings(layer)
    config.update(window_size=window, diag_activation=activation)
    check_attend(layer, references.diag, config, q, k, v, state, mask, variables=weights, rtol=2e-4)


@pytest.mark.parametrize(
    "name,options", [("norm", {"chunk_size": 4}), ("diag", {"window_size": 5})]
)
def test_segments_equal_one_call(name, options):
    layer = create_attention(name, 12, 3, **options)
    x, mask = random_tokens(2, 37, 12)
    assert_segments_equal_one_call(layer, x, mask)


@pytest.mark.parametrize(
    "name,options", [("norm", {"chunk_size": 4}), ("diag", {"window_size": 4})]
)
def test_causal(name, options):
    layer = create_attention(name, 12, 3, **options)
    x, mask = random_tokens(2, 13, 12)
    assert_causal(layer, x, mask, position=6)


def test_finite_on_large_inputs():
    assert_finite_on_large_inputs("norm", {"chunk_size": 8})
    assert_finite_on_large_inputs("diag", {"window_size": 4, "diag_activation": "relu"})
    assert_finite_on_large_inputs("diag", {"window_size": 4})


def test_config_round_trip_and_validation():
    assert get_attention_class("norm") is NormAttention
    assert get_attention_class("diag") is DiagAttention
    norm = NormAttention(12, 3, chunk_size=5, feature_map="relu", norm_type="layer")
    clone = assert_config_round_trip(norm)
    assert (clone.chunk_size, clone.feature_map, clone.norm_type) == (5, "relu", "layer")
    diag = DiagAttention(12, 3, window_size=7, diag_activation="softmax", rms_form="partf")
    clone = assert_config_round_trip(diag)
    assert (clone.window_size, clone.diag_activation, clone.rms_form) == (7, "softmax", "partf")
    with pytest.raises(ValueError, match="unknown rms_form 'torch'; choose one of"):
        NormAttention(12, 3, rms_form="torch")
    with pytest.raises(ValueError, match="unknown feature_map 'tanh'; choose one of"):
        NormAttention(12, 3, feature_map="tanh")
    with pytest.raises(ValueError, match="unknown diag_activation"):
        DiagAttention(12, 3, diag_activation="gelu")


#: What each attention of the authors' two released TransNormer language models does
#: (OpenNLPLab/fairseq-evo, norm_transformer_lm.py: transnormer_t1 and transnormer_t2),
#: in the reference's terms. Their local attention skips its norm when softmax is on.
RELEASED = {
    "transnormer_t1": {
        "diag": {"diag_activation": "relu", "norm_type": "simple_rms", "rms_form": "authors"},
        "norm": {"feature_map": "elu", "norm_type": "simple_rms", "rms_form": "authors"},
    },
    "transnormer_t2": {
        "diag": {"diag_activation": "softmax", "norm_type": "none", "rms_form": "authors"},
        "norm": {"feature_map": "elu+1", "norm_type": "simple_rms", "rms_form": "authors"},
    },
}
#: The options a user sets for each released model (none: the defaults are t1).
RELEASED_OPTIONS = {
    "transnormer_t1": {"diag": {}, "norm": {}},
    "transnormer_t2": {
        "diag": {"diag_activation": "softmax", "norm_type": "none"},
        "norm": {"feature_map": "elu+1"},
    },
}
SIZES = {"diag": {"window_size": 5}, "norm": {"chunk_size": 4}}


@pytest.mark.parametrize("model", sorted(RELEASED))
@pytest.mark.parametrize("name", ["diag", "norm"])
def test_released_models_through_the_options_a_user_sets(model, name):
    """The defaults are transnormer_t1, and t2 is its options; each matches the float64
    reference set to what the authors' model does, outputs and gradients."""
    layer = create_attention(name, 8, 2, **SIZES[name], **RELEASED_OPTIONS[model][name])
    layer.build((None, None, 8))
    q, k, v = random_heads(2, 13, 2, 4)
    _, mask = random_tokens(2, 13, 1, seed=1)
    state = random_state(layer, 2)
    config = {**RELEASED[model][name], **SIZES[name]}
    reference = getattr(references, name)
    check_attend(layer, reference, config, q, k, v, state, mask, rtol=2e-4)


def test_authors_rms_norm_differs_from_partfs_where_the_rms_is_small():
    """The two forms agree on outputs of order 1 and part where the RMS is small: the
    reference tells them apart, and the layer follows the form it is given."""
    out = np.full((1, 1, 2, 2), 1e-3)
    authors = references._normalized({"norm_type": "simple_rms", "rms_form": "authors"}, {}, out)
    partf = references._normalized({"norm_type": "simple_rms", "rms_form": "partf"}, {}, out)
    assert abs(authors[0, 0, 0, 0] - 1.0) < 1e-4
    assert abs(partf[0, 0, 0, 0] - 1e-3 / np.sqrt(1e-6 + 1e-6)) < 1e-9  # 0.707
    for form, expected in (("authors", authors), ("partf", partf)):
        layer = DiagAttention(4, 2, rms_form=form)
        layer.build((None, None, 4))
        np.testing.assert_allclose(np.asarray(layer._normalize(out)), expected, rtol=1e-5)


def test_all_zero_output_has_finite_gradients():
    """relu scores all negative give an all-zero output, where sqrt has no derivative:
    the authors' norm returns zero there with finite gradients."""
    layer = DiagAttention(4, 2, window_size=2)
    layer.build((None, None, 4))
    ones = np.ones((1, 2, 2, 2), "float32")
    q, k, v = ones, -ones, ones
    state = layer.get_initial_state(1)
    out, _ = layer.attend(q, k, v, state)
    assert np.all(to_np(out) == 0.0)
    grads = gradients(lambda q, k, v: layer.attend(q, k, v, state)[0], [q, k, v])
    assert all(np.all(np.isfinite(g)) for g in grads)


def test_a_model_config_builds_transnormer_t1_and_keeps_the_options_it_sets():
    """A ModelConfig of the transnormer preset, saved and read back, builds the authors'
    transnormer_t1; an option it sets, shared or for one mechanism, is kept."""
    fields = dict(vocab_size=50, cutoffs=(), num_layers=4, architecture="transnormer")
    new = ModelConfig(**fields)
    assert new.architecture == "diag D norm D"
    assert ModelConfig.from_dict(new.to_dict()) == new

    def built(config, name):
        return create_attention(name, 8, 2, **config.attention_options)

    diag, norm = built(new, "diag"), built(new, "norm")
    assert (diag.diag_activation, diag.norm_type, diag.rms_form) == (
        "relu",
        "simple_rms",
        "authors",
    )
    assert (norm.feature_map, norm.norm_type, norm.rms_form) == ("elu", "simple_rms", "authors")

    options = {"diag_activation": "softmax", "norm_rms_form": "partf"}
    kept = ModelConfig(**fields, attention_options=options)
    kept.check_attention_options()
    diag, norm = built(kept, "diag"), built(kept, "norm")
    assert (diag.diag_activation, diag.rms_form, norm.rms_form) == ("softmax", "authors", "partf")
