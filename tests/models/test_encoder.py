"""The bidirectional Encoder: heads, padding, positions, refusals and a .keras round trip."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.attention import get_attention_class
from partf.layers.candidates import noncausal_attention_names
from partf.models import Encoder, ModelConfig
from partf.serialization import FORMAT_VERSION, FormatError
from tests.attention.helpers import to_np

VOCAB = 13


def small(**overrides) -> Encoder:
    settings = dict(
        vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=24, dropout_rate=0.0,
        architecture="A D A D", attention="softmax", position="sinusoidal",
    )  # fmt: skip
    settings.update(overrides)
    return Encoder(**settings)


def tokens_with_padding(seed: int = 0) -> np.ndarray:
    """int32 [2, 9]: the first row padded at the end, the second in full."""
    tokens = np.random.default_rng(seed).integers(1, VOCAB, size=(2, 9)).astype("int32")
    tokens[0, 6:] = 0
    return tokens


# Each mechanism with a non-causal form, one option set that keeps its windows short.
MECHANISMS = {
    "softmax": {},
    "relative": {},
    "linear": {},
    "norm": {},
    "performer": {"num_features": 8},
    "local": {"window_size": 2},
    "diag": {"window_size": 4},
    "fastformer": {},
    "lara": {"num_landmarks": 2},
    "eva": {"window_size": 4, "chunk_size": 2},
}


def partf_noncausal_names() -> list[str]:
    """partf's own non-causal mechanisms: not those other test modules register."""
    names = noncausal_attention_names()
    return sorted(n for n in names if get_attention_class(n).__module__.startswith("partf."))


def test_every_noncausal_mechanism_is_listed():
    assert sorted(MECHANISMS) == partf_noncausal_names()


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_hidden_states_ignore_padding(mechanism):
    """Outputs at real tokens do not change when the padding ids change (with an
    explicit mask) or when the sequence is padded further (but LARA's, whose landmarks
    are segments of the padded length); they are finite."""
    model = small(attention=mechanism, attention_options=MECHANISMS[mechanism])
    tokens = tokens_with_padding()
    mask = tokens != 0
    hidden = to_np(model({"tokens": tokens, "mask": mask}))
    assert hidden.shape == (2, 9, 16) and np.isfinite(hidden).all()
    other = np.where(mask, tokens, 5).astype("int32")  # pads hold real ids, masked
    hidden_other = to_np(model({"tokens": other, "mask": mask}))
    np.testing.assert_allclose(hidden_other[mask], hidden[mask], rtol=1e-4, atol=1e-4)
    if mechanism == "lara":
        return
    longer = np.pad(tokens, [(0, 0), (0, 4)])
    np.testing.assert_allclose(to_np(model(longer))[:, :9][mask], hidden[mask], atol=1e-4)


def test_bidirectional():
    """A later token changes an earlier token's hidden state."""
    model = small(attention="linear")
    tokens = tokens_with_padding()[1:]
    changed = tokens.copy()
    changed[0, -1] = tokens[0, -1] % (VOCAB - 1) + 1
    assert not np.allclose(to_np(model(changed))[0, 0], to_np(model(tokens))[0, 0])


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_heads(pooling):
    model = small(num_classes=10, pooling=pooling, mlm_head=True, position="learned")
    out = model(tokens_with_padding())
    assert tuple(out["classes"].shape) == (2, 10) and out["classes"].dtype == "float32"
    assert tuple(out["mlm"].shape) == (2, 9, VOCAB)
    assert tuple(small(num_classes=3)(tokens_with_padding()).shape) == (2, 3)


@pytest.mark.parametrize("mechanism", ["linear", "eva"])
def test_mixed_precision_heads_are_float32(mechanism):
    options = {"window_size": 4, "chunk_size": 2}
    model = small(
        attention=mechanism, attention_options=options, num_classes=3, mlm_head=True,
        dtype="mixed_bfloat16",
    )  # fmt: skip
    out = model(tokens_with_padding())
    for logits in out.values():
        assert logits.dtype == "float32" and np.isfinite(to_np(logits)).all()


def test_mean_pooling_reads_real_tokens_only():
    model = small(num_classes=4)
    tokens = tokens_with_padding()
    hidden = model.encode(keras.ops.convert_to_tensor(tokens), tokens != 0)
    pooled = to_np(model.pool(hidden, tokens != 0))
    np.testing.assert_allclose(pooled[0], to_np(hidden)[0, :6].mean(axis=0), rtol=1e-5, atol=1e-6)


def test_causal_only_mechanism_is_refused_in_one_line():
    for name in ("primal",):
        with pytest.raises(ValueError, match="causal only and cannot be used in an Encoder") as e:
            small(attention=name)
        assert "\n" not in str(e.value) and "linear" in str(e.value)
    with pytest.raises(ValueError, match="causal only"):
        small(architecture="A primal")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="unknown position"):
        small(position="relative")
    with pytest.raises(ValueError, match="unknown pooling"):
        small(pooling="max")
    with pytest.raises(ValueError, match="max_positions >= 9"):
        small(position="learned", max_positions=8)(tokens_with_padding())


def test_built_from_a_model_config_as_from_its_keywords():
    """`Encoder(config=ModelConfig(causal=False, ...))` is the keyword-built encoder: the
    same variables in the same order and, with its weights, the same outputs; its config
    reads back the keyword settings."""
    keywords = small(attention="linear", num_classes=3)
    config = ModelConfig(
        vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=24, dropout_rate=0.0,
        num_layers=4, architecture="A D A D", attention="linear", position="sinusoidal",
        causal=False,
    )  # fmt: skip
    assert keywords.config == config
    built = Encoder(config=config, num_classes=3)
    paths = [v.path.split("/", 1)[1] for v in built.variables]
    assert paths == [v.path.split("/", 1)[1] for v in keywords.variables]
    built.set_weights(keywords.get_weights())
    tokens = tokens_with_padding()
    np.testing.assert_array_equal(to_np(built(tokens)), to_np(keywords(tokens)))
    assert (built.config.architecture, built.config.attention, built.candidates) == (
        "A D A D",
        "linear",
        None,
    )


def test_a_model_config_must_be_non_causal_and_alone():
    config = ModelConfig(vocab_size=VOCAB, d_model=16, num_heads=2, d_ffn=24, num_layers=2,
                         architecture="A D", attention="linear", cutoffs=())  # fmt: skip
    with pytest.raises(ValueError, match="give a ModelConfig with causal=False"):
        Encoder(config=config)
    with pytest.raises(ValueError, match="causal only and cannot be used in an Encoder"):
        config.replace(causal=False, attention="primal")


def test_fit_step_and_keras_round_trip(tmp_path):
    """One fit step on classes, then save and load: same config, same outputs."""
    model = small(
        architecture="A D I diag",
        attention="local",
        attention_options={"window_size": 3},
        num_classes=4,
        position="rotary",
    )
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,  # Keras' "auto" would compile with XLA: slow, and not the point
    )
    tokens = tokens_with_padding()
    model.fit(tokens, np.array([1, 3]), epochs=1, verbose=0)
    path = tmp_path / "encoder.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, Encoder)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_allclose(to_np(loaded(tokens)), to_np(model(tokens)), rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("mechanism", ["softmax", "linear"])
def test_learns_depth_one_listops(mechanism):
    """A tiny encoder learns one-operator ListOps well above chance (10%) and above the
    most frequent class in 300 steps of plain `fit` (about 5 s on 2 CPU cores; it
    reached 63% with softmax and 54% with linear attention when written)."""
    from tests.benchmarks import load_benchmark

    listops = load_benchmark("listops_data")
    ListOpsSettings, generate_listops = listops.ListOpsSettings, listops.generate_listops

    keras.utils.set_random_seed(0)
    settings = ListOpsSettings(max_depth=1, max_args=6, min_length=4, max_length=8)

    def arrays(count, seed):
        examples = generate_listops(count, seed, settings)
        tokens = np.zeros((count, settings.max_length), "int32")
        for i, (ids, _) in enumerate(examples):
            tokens[i, : len(ids)] = ids
        return tokens, np.array([label for _, label in examples], "int32")

    train_x, train_y = arrays(9600, seed=0)
    test_x, test_y = arrays(1000, seed=1)
    model = Encoder(
        vocab_size=16, d_model=32, num_heads=2, d_ffn=64, architecture="A D A D",
        attention=mechanism, dropout_rate=0.0, num_classes=10,
    )  # fmt: skip
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=False,
    )
    model.fit(train_x, train_y, batch_size=32, epochs=1, verbose=0)
    _, accuracy = model.evaluate(test_x, test_y, verbose=0)
    majority = np.bincount(test_y).max() / len(test_y)
    assert accuracy > max(0.3, majority + 0.15), (accuracy, majority)


def test_built_on_construction_so_xla_fit_creates_no_variable():
    """Keras builds an unbuilt model inside the first traced step, where Performer's
    random features (an initial value drawn from a seed) cannot be created under XLA:
    the encoder is built when constructed, and an XLA-compiled fit step runs."""
    model = small(attention="performer", attention_options={"num_features": 4}, num_classes=2)
    assert model.built and any("projection" in w.path for w in model.weights)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    model.fit(tokens_with_padding(), np.array([0, 1]), epochs=1, verbose=0)


def test_a_config_of_another_format_is_refused():
    config = small().get_config()
    assert config["format"] == FORMAT_VERSION
    for found in (None, FORMAT_VERSION - 1, FORMAT_VERSION + 1):
        with pytest.raises(FormatError, match=r"^the saved Encoder was written by .* \(format"):
            Encoder.from_config({**config, "format": found})


def test_a_config_lacking_a_head_setting_is_refused_not_defaulted():
    config = small(num_classes=2).get_config()
    del config["pooling"]
    with pytest.raises(FormatError, match=r"^the saved Encoder lacks pooling, which every format"):
        Encoder.from_config(config)


def test_a_saved_config_is_the_model_config_and_the_heads():
    """The saved config is the ModelConfig whole (`to_dict`) and the Encoder's own
    settings, once: loading it builds the same encoder."""
    model = small(attention="diag", attention_options={"block_size": 4}, num_classes=3, seed=2)
    config = model.get_config()
    assert config["config"] == model.config.to_dict()
    assert (config["num_classes"], config["pooling"], config["mlm_head"]) == (3, "mean", False)
    loaded = Encoder.from_config(config)
    assert loaded.config == model.config and loaded.seed == 2
