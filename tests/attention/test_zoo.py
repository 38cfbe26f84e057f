"""Every mechanism of the zoo declares its options the way the command line reads them."""

import inspect

import keras
import numpy as np
import pytest

from partf.attention import attention_names, create_attention, get_attention_class
from partf.models import ModelConfig, PARTransformerXL

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


def test_shared_option_names_share_their_type_and_help():
    """One --attn_<option> flag serves several mechanisms: one type, one help text."""
    seen = {}
    for name in ZOO + ["lara"]:
        for option, (default, help_text) in get_attention_class(name).options.items():
            seen.setdefault(option, (type(default), help_text))
            assert seen[option] == (type(default), help_text), (name, option)


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


# ---------------------------------------------------------------- in models
V, B, T = 40, 2, 6
TINY = dict(window_size=4, chunk_size=4, num_features=8, mem_chunks=2, low_rank=3)


def random_stream(steps, seed=0):
    stream = np.random.default_rng(seed).integers(1, V, size=(B, steps * T + 1)).astype("int32")
    x = np.concatenate([stream[:, i * T : i * T + T] for i in range(steps)])
    y = np.concatenate([stream[:, i * T + 1 : i * T + T + 1] for i in range(steps)])
    return x, y


def fit_briefly(config, steps=2):
    keras.utils.set_random_seed(3)
    model = PARTransformerXL(config)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    before = [w.numpy().copy() for w in model.trainable_weights]
    x, y = random_stream(steps)
    history = model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    return model, history.history["loss"], before


@pytest.mark.parametrize("name", ZOO)
def test_trains_inside_the_stochastic_block(name):
    config = ModelConfig(
        vocab_size=V,
        d_model=8,
        num_heads=2,
        d_ffn=16,
        num_layers=1,
        mem_len=4,
        cutoffs=(),
        dropout_rate=0.1,
        batch_size=B,
        attention=name,
        attention_options=TINY,
    )
    model, losses, before = fit_briefly(config)
    assert np.isfinite(losses).all(), losses
    attention = model.blocks[0].sublayers[0]
    assert attention.registry_name == name
    changed = [
        not np.allclose(w.numpy(), b)
        for w, b in zip(model.trainable_weights, before, strict=True)
        if w.path.startswith(attention.path)
    ]
    assert changed and all(changed), name
    states = model.state_variables
    assert all(np.isfinite(v.numpy()).all() for v in states)


def test_every_mechanism_trains_in_one_plain_transformer():
    """A fixed (non-PAR) stack using each mechanism once, with the primal KSVD loss."""
    architecture = " ".join(f"{name} D" for name in ZOO)
    config = ModelConfig(
        vocab_size=V,
        d_model=8,
        num_heads=2,
        d_ffn=16,
        num_layers=2 * len(ZOO),
        mem_len=4,
        cutoffs=(),
        dropout_rate=0.0,
        batch_size=B,
        architecture=architecture,
        attention_options=TINY,
    )
    model, losses, _ = fit_briefly(config, steps=1)
    assert np.isfinite(losses).all(), losses
    assert any(layer.losses for layer in model._flatten_layers() if layer.name.startswith("primal"))


def _xla_cases():
    for name in ["relative", *ZOO]:
        yield pytest.param(name, False, id=f"{name}-evaluation")
        yield pytest.param(name, True, id=f"{name}-training")


@pytest.mark.slow
@pytest.mark.parametrize(("name", "training"), list(_xla_cases()))
def test_xla_compiled_step_equals_eager(name, training):
    """One forward and backward pass compiled by XLA equals eager, outputs, state and
    gradients: in evaluation, and in training with dropout (on the attention weights
    and the output) and the mechanism's own sampling on, from the same seed state."""
    import tensorflow as tf

    options = dict(TINY, dropout_rate=0.2 if training else 0.0)
    if name == "relative":
        options.update(mem_len=4, attention_dropout_rate=0.2 if training else 0.0)
    layer = create_attention(name, 8, 2, **options)
    x = np.random.default_rng(0).normal(size=(2, 11, 8)).astype("float32")
    layer(x[:, :3])
    seeds = [v for v in layer.variables if "seed_generator" in v.path]
    start = [v.numpy().copy() for v in seeds]

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, state = layer(x, training=training)
            loss = tf.reduce_sum(tf.square(y)) + sum(layer.losses)
        return y, state, tape.gradient(loss, [x] + layer.trainable_weights)

    eager = step(tf.constant(x))
    for variable, value in zip(seeds, start, strict=True):
        variable.assign(value)
    compiled = tf.function(step, jit_compile=True)(tf.constant(x))
    for got, want in zip(tf.nest.flatten(compiled), tf.nest.flatten(eager), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5)
    if training:  # the draws happened: training is not evaluation
        evaluated, _ = layer(x, training=False)
        assert not np.allclose(np.asarray(evaluated), np.asarray(eager[0]))


def test_graph_mode_with_unknown_length_equals_eager():
    """Traced with a None time axis (a tf.data pipeline without fixed shapes)."""
    import tensorflow as tf

    x = np.random.default_rng(0).normal(size=(2, 11, 8)).astype("float32")
    spec = [tf.TensorSpec([2, None, 8], tf.float32)]
    for name in ZOO:
        layer = create_attention(name, 8, 2, **TINY)
        eager, _ = layer(x)
        traced = tf.function(lambda x, layer=layer: layer(x)[0], input_signature=spec)
        np.testing.assert_allclose(traced(x).numpy(), eager.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ on fixture data
CAUSAL = ["relative", *ZOO]
#: Mechanisms trained in the default run; the others are marked slow.
FAST_ON_FIXTURE = {"relative"}
ROWS, SEGMENTS = 4, 3


@pytest.fixture(scope="module")
def fixture_segments(original_artifacts):
    """The first SEGMENTS records of the original validation data, rows 0..ROWS-1
    (each row continues the same row of the previous record): int32 [n, ROWS, 33]."""
    import sentencepiece as spm

    from partf.data import load_tfrecords

    batches = [
        np.concatenate([x.numpy()[:ROWS], y.numpy()[:ROWS, -1:]], axis=1)
        for x, y in load_tfrecords(original_artifacts / "tfrecords_valid").take(SEGMENTS)
    ]
    vocab = spm.SentencePieceProcessor(
        model_file=str(original_artifacts / "tokenizer/wiki2_12k.model")
    ).get_piece_size()
    return np.stack(batches), vocab


def _mean_nll(model, segments):
    """Mean NLL over the segments in stream order, memory starting empty (no update)."""
    states, total = model.initial_state(ROWS), 0.0
    for segment in segments:
        hidden, states = model.forward(segment[:, :-1], states, training=False)
        total += float(np.mean(keras.ops.convert_to_numpy(model.token_nll(hidden, segment[:, 1:]))))
    return total / len(segments)


@pytest.mark.parametrize(
    "name",
    [n if n in FAST_ON_FIXTURE else pytest.param(n, marks=pytest.mark.slow) for n in CAUSAL],
)
@pytest.mark.parametrize("setting", ["par", "plain"])
def test_trains_on_fixture_data(fixture_segments, name, setting):
    """Each causal mechanism trains end to end on real text: as the attention candidate
    of a PAR block, and in a plain fixed Transformer (attention, feed-forward)."""
    segments, vocab = fixture_segments
    keras.utils.set_random_seed(7)
    model = PARTransformerXL(
        vocab_size=vocab,
        d_model=16,
        num_heads=2,
        d_ffn=32,
        num_layers=2,
        mem_len=8,
        cutoffs=(250, 2500),
        dropout_rate=0.0,
        batch_size=ROWS,
        attention=name,
        attention_options=TINY,
        architecture="A D" if setting == "plain" else None,
    )
    assert model.config.is_stochastic == (setting == "par")
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=False, run_eagerly=True)
    before = _mean_nll(model, segments)
    x, y = segments[:, :, :-1], segments[:, :, 1:]
    history = model.fit(
        x.reshape(-1, x.shape[-1]),
        y.reshape(-1, y.shape[-1]),
        batch_size=ROWS,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    after = _mean_nll(model, segments)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and np.isfinite(after), (losses, after)
    assert after < before - 0.1, (name, setting, before, after)
    assert all(np.isfinite(v.numpy()).all() for v in model.state_variables)
