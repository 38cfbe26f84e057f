"""PARTransformerXL: causality, memory, state variables, architecture, training, saving."""

import io
import json
import re
import zipfile

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from partf.models import ModelConfig, PARTransformerXL
from partf.serialization import FORMAT_VERSION, FormatError
from tests.layer_checks import assert_close, assert_config_round_trip

V, B = 60, 2
CONFIG = ModelConfig(
    vocab_size=V,
    d_model=16,
    num_heads=2,
    d_ffn=32,
    num_layers=2,
    mem_len=5,
    cutoffs=(10, 30),
    dropout_rate=0.1,
    eval_mode="expected",
    tau_steps=100,
    batch_size=B,
)


def tokens(length, seed=0, batch=B):
    return np.random.default_rng(seed).integers(1, V, size=(batch, length)).astype("int32")


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    net = PARTransformerXL(CONFIG)
    # Distinct logits per block so "expected" weights are not uniform.
    net.arch_variables[0].assign([1.0, 0.2, -0.5])
    net.arch_variables[1].assign([0.3, 0.8, -0.2])
    return net


def test_kwargs_construction_and_errors():
    net = PARTransformerXL(vocab_size=V, cutoffs=(), d_model=8, num_heads=2, num_layers=1, name="m")
    assert net.config.d_model == 8 and net.name == "m"
    assert PARTransformerXL(CONFIG, mem_len=0).config.mem_len == 0
    with pytest.raises(ValueError, match="sorted and unique"):
        PARTransformerXL(vocab_size=V, cutoffs=(20, 10))


@pytest.mark.parametrize("with_memory", [False, True])
def test_causal(model, with_memory):
    states = model.initial_state(B)
    if with_memory:
        _, states = model.forward(tokens(4, seed=1), states)
    x = tokens(6, seed=2)
    hidden, _ = model.forward(x, states)
    for t in (0, 2, 5):
        changed = x.copy()
        changed[:, t] = changed[:, t] % (V - 1) + 1
        hidden_2, _ = model.forward(changed, states)
        assert_close(hidden_2[:, :t], hidden[:, :t], atol=1e-5)
        assert not np.allclose(np.asarray(hidden_2[:, t]), np.asarray(hidden[:, t]))


def test_memory_equals_one_pass(model):
    # Segment A then B with memory == A + B in one call, for B's positions.
    a, b = tokens(4, seed=3), tokens(3, seed=4)
    full, _ = model.forward(np.concatenate([a, b], 1), model.initial_state(B))
    _, states = model.forward(a, model.initial_state(B))
    hidden_b, _ = model.forward(b, states)
    assert_close(hidden_b, full[:, 4:], atol=1e-5)
    # The same through the stateful call and the evaluation memory.
    model.reset_state("eval")
    model(a, training=False)
    assert_close(model(b, training=False), full[:, 4:], atol=1e-5)
    # Without memory the context is lost.
    alone, _ = model.forward(b, model.initial_state(B))
    assert not np.allclose(np.asarray(alone), np.asarray(full[:, 4:]), atol=1e-3)


def test_train_and_eval_state_sets(model):
    model.reset_state()
    step = int(model.step.numpy())
    train_vars = model.state_variables[: len(model.state_variables) // 2]
    eval_vars = model.state_variables[len(model.state_variables) // 2 :]
    assert len(train_vars) == CONFIG.num_layers * 2  # memory and its mask per block
    model(tokens(3), training=False)
    assert int(model.step.numpy()) == step
    assert all(not np.any(v.numpy()) for v in train_vars)
    assert all(np.any(v.numpy()) for v in eval_vars)
    model.reset_state("eval")
    model(tokens(3), training=True)
    assert int(model.step.numpy()) == step + 1
    assert all(np.any(v.numpy()) for v in train_vars)
    assert all(not np.any(v.numpy()) for v in eval_vars)
    model.reset_state("train")
    assert all(not np.any(v.numpy()) for v in model.state_variables)
    model.step.assign(step)
    with pytest.raises(ValueError, match="which='both'"):
        model.reset_state("both")


def test_batch_must_match_memory(model):
    with pytest.raises(ValueError, match="batch of 3 rows but the memory holds"):
        model(tokens(4, batch=3))
    hidden, _ = model.forward(tokens(4, batch=3), model.initial_state(3))  # pure form: fine
    assert hidden.shape == (3, 4, CONFIG.d_model)


#: Every causal mechanism, with options small enough for these short streams.
CAUSAL = ["relative", "softmax", "local", "linear", "performer", "fastformer", "norm", "diag"]
CAUSAL += ["primal", "eva"]
SMALL = dict(window_size=4, chunk_size=2, num_features=8, mem_chunks=2, low_rank=3)


@pytest.mark.parametrize("attention", CAUSAL)
def test_pads_inside_and_at_the_end_are_never_attended(attention):
    """Pads (token 0) inside a segment and at its end, then a second segment reading the
    memory they left: no real token's hidden state depends on what a pad holds. The pad
    embedding is changed to show it; the pads' own states do change, so the change
    reaches the network."""
    keras.utils.set_random_seed(17)
    net = PARTransformerXL(
        CONFIG, attention=attention, attention_options=SMALL, architecture="A D A D",
        num_layers=4,
    )  # fmt: skip
    first, second = tokens(6, seed=5), tokens(4, seed=6)
    first[0, 2] = 0  # inside the segment
    first[1, 4:] = 0  # at its end, as in the final partial batch

    def run():
        hidden_1, states = net.forward(first, net.initial_state(B))
        hidden_2, _ = net.forward(second, states)
        return np.asarray(hidden_1), np.asarray(hidden_2), states

    before_1, before_2, states = run()
    table = net.embedding.embeddings
    table.assign(ops.scatter_update(table, [[0]], keras.random.normal((1, CONFIG.d_model))))
    after_1, after_2, _ = run()
    real = first != 0
    np.testing.assert_allclose(after_1[real], before_1[real], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after_2, before_2, rtol=1e-5, atol=1e-6)
    assert np.abs(after_1[~real] - before_1[~real]).max() > 1e-3
    if attention == "relative":  # the memory marks the pads it holds
        mask = np.asarray(states[0][0]["memory_mask"])
        np.testing.assert_array_equal(mask, [[1, 0, 1, 1, 1], [1, 1, 1, 0, 0]])


def test_pads_cost_nothing_in_the_loss(model):
    x = tokens(6, seed=5)
    x[0, 2] = 0
    x[1, 4:] = 0
    hidden, _ = model.forward(x, model.initial_state(B))
    nll = np.asarray(model.token_nll(hidden, x))
    assert np.all(nll[x == 0] == 0) and np.all(nll[x != 0] > 0)
    loss = float(model.compute_loss(x=None, y=x, y_pred=hidden))
    assert loss == pytest.approx(nll.sum() / (x != 0).sum(), rel=1e-5)
    log_probs = np.asarray(model.log_probs(hidden))
    np.testing.assert_allclose(np.exp(log_probs).sum(-1), 1.0, rtol=1e-5)


def test_architecture_api_and_fixed_model(model):
    assert model.candidate_names == ["attention", "dense", "identity"]
    assert all("arch_logits" in v.path for v in model.arch_variables)
    pi = model.pi()
    np.testing.assert_allclose(pi.sum(1), 1.0, rtol=1e-6)
    assert model.architecture_string() == "A D"

    fixed = PARTransformerXL(CONFIG, architecture=model.architecture_string(), eval_mode="argmax")
    assert fixed.arch_variables == []
    assert fixed.architecture_string() == "A D"
    np.testing.assert_array_equal(fixed.pi(), [[1, 0], [0, 1]])
    # With the chosen candidates' weights, the fixed model is the stochastic
    # model's argmax evaluation.
    fixed.embedding.set_weights(model.embedding.get_weights())
    fixed.output_layer.set_weights(model.output_layer.get_weights())
    for fixed_block, block, chosen in zip(fixed.blocks, model.blocks, (0, 1), strict=True):
        fixed_block.sublayers[0].set_weights(block.sublayers[chosen].get_weights())
        fixed_block.norms[0].set_weights(block.norms[chosen].get_weights())
    x = tokens(5, seed=6)
    expected, _ = model.forward(x, model.initial_state(B), mode="argmax")
    got, _ = fixed.forward(x, fixed.initial_state(B))
    assert_close(got, expected, atol=1e-5)


def test_forward_with_fixed_choices(model):
    states = model.initial_state(B)
    _, states = model.forward(tokens(3, seed=8), states)  # some memory to read
    x = tokens(5, seed=9)
    argmax = (0, 1)  # the fixture's logits: attention in block 0, dense in block 1

    def full_pass(eval_modes):
        # Blocks of different modes: each block's own setting (one `mode` is for all).
        for block, mode in zip(model.blocks, eval_modes, strict=True):
            block.eval_mode = mode
        try:
            return model.forward(x, states)
        finally:
            for block in model.blocks:
                block.eval_mode = "expected"

    expected, expected_states = model.forward(x, states, mode="argmax")
    got, new_states = model.forward(x, states, choices=argmax)
    assert_close(got, expected, atol=1e-6)
    # The chosen attention's memory moves on; the skipped one's is carried unchanged.
    assert_close(new_states[0][0]["memory"], expected_states[0][0]["memory"], atol=1e-6)
    assert new_states[1][0] is states[1][0]
    # None runs the whole mixed block.
    expected, _ = full_pass(["expected", "argmax"])
    got, _ = model.forward(x, states, choices=(None, 1))
    assert_close(got, expected, atol=1e-6)
    with pytest.raises(ValueError, match="one per block"):
        model.forward(x, states, choices=(0,))
    with pytest.raises(ValueError, match="block 1 has 3 candidates"):
        model.forward(x, states, choices=(0, 3))


def test_variable_paths_and_the_keras_file_layout_are_format_1(tmp_path):
    # Checkpoints restore `variables` by path and .keras files store weights under
    # attribute paths, here with an identity candidate before the others: a change that
    # moves a weight in either list is a new partf.serialization.FORMAT_VERSION.
    net = PARTransformerXL(
        vocab_size=30,
        d_model=8,
        num_heads=2,
        d_ffn=16,
        num_layers=1,
        mem_len=2,
        cutoffs=(),
        batch_size=1,
        candidates=("identity", "relative", "dense"),
        name="pin",
    )
    seed = "seed_generator/seed_generator_state"
    relative, dense = "pin/backbone/block_0/relative_1", "pin/backbone/block_0/dense_2"
    expected = [
        ("pin/step", ()),
        ("pin/train_state_0_1_memory", (1, 2, 8)),
        ("pin/train_state_0_1_memory_mask", (1, 2)),
        ("pin/eval_state_0_1_memory", (1, 2, 8)),
        ("pin/eval_state_0_1_memory_mask", (1, 2)),
        ("pin/backbone/embedding/embeddings", (30, 8)),
        (seed, (2,)),
        ("block_0/arch_logits", (3,)),
        (seed, (2,)),
        (f"{relative}/content_bias", (2, 4)),
        (f"{relative}/position_bias", (2, 4)),
        (f"{relative}/query/kernel", (8, 2, 4)),
        (f"{relative}/key/kernel", (8, 2, 4)),
        (f"{relative}/value/kernel", (8, 2, 4)),
        (f"{relative}/output/kernel", (2, 4, 8)),
        (f"{relative}/{seed}", (2,)),
        (f"{relative}/position/kernel", (8, 2, 4)),
        ("pin/backbone/block_0/norm_1/gamma", (8,)),
        ("pin/backbone/block_0/norm_1/beta", (8,)),
        (f"{dense}/inner/kernel", (8, 16)),
        (f"{dense}/inner/bias", (16,)),
        (f"{dense}/outer/kernel", (16, 8)),
        (f"{dense}/outer/bias", (8,)),
        (seed, (2,)),
        ("pin/backbone/block_0/norm_2/gamma", (8,)),
        ("pin/backbone/block_0/norm_2/beta", (8,)),
        ("pin/adaptive_softmax/head/kernel", (8, 30)),
        ("pin/adaptive_softmax/head/bias", (30,)),
    ]
    got = [
        (re.sub(r"seed_generator_\d+", "seed_generator", v.path), tuple(v.shape))
        for v in net.variables
    ]
    assert sorted(got) == sorted(expected)

    net.save(tmp_path / "pin.keras")
    with zipfile.ZipFile(tmp_path / "pin.keras") as archive:
        weights = h5py.File(io.BytesIO(archive.read("model.weights.h5")), "r")
        stored = []
        weights.visititems(
            lambda name, item: stored.append(name) if isinstance(item, h5py.Dataset) else None
        )
    block = "backbone/blocks/stochastic_block"
    attention = f"{block}/sublayers/relative_attention"
    layout = [
        f"{block}/norms/layer_normalization/vars/0",
        f"{block}/norms/layer_normalization/vars/1",
        f"{block}/norms/layer_normalization_1/vars/0",
        f"{block}/norms/layer_normalization_1/vars/1",
        *(
            f"{block}/sublayers/feed_forward/{name}/vars/{i}"
            for name in ("inner", "outer")
            for i in (0, 1)
        ),
        *(
            f"{attention}/{name}_dense/vars/0"
            for name in ("key", "output", "position", "query", "value")
        ),
        f"{attention}/vars/0",
        f"{attention}/vars/1",
        f"{block}/vars/0",
        "backbone/embedding/vars/0",
        "layers/adaptive_softmax/head/vars/0",
        "layers/adaptive_softmax/head/vars/1",
        *(f"vars/{i}" for i in range(5)),
    ]
    assert stored == layout


def _saved_and_changed(tmp_path, change):
    """A tiny model's .keras file with `change` applied to its saved config: (the config
    as saved, the changed file's path)."""
    net = PARTransformerXL(
        vocab_size=30, d_model=8, num_heads=2, d_ffn=16, num_layers=1, mem_len=2,
        cutoffs=(), batch_size=1,
    )  # fmt: skip
    net.save(tmp_path / "new.keras")
    with zipfile.ZipFile(tmp_path / "new.keras") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    config = json.loads(members["config.json"])
    saved = json.loads(json.dumps(config["config"]))
    change(config["config"])
    members["config.json"] = json.dumps(config).encode("utf-8")
    path = tmp_path / "other.keras"
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return saved, path


@pytest.mark.parametrize(
    ("found", "said"),
    [
        (None, "an earlier partf (format none;"),
        (
            FORMAT_VERSION - 1,
            f"an earlier partf (format {FORMAT_VERSION - 1}; "
            f"this partf reads format {FORMAT_VERSION})",
        ),
        (FORMAT_VERSION + 1, f"a newer partf (format {FORMAT_VERSION + 1};"),
    ],
    ids=["none", "earlier", "newer"],
)
def test_a_keras_file_of_another_format_is_refused_in_one_line(tmp_path, found, said):
    """A .keras file's config holds the format; one of another is refused, by Keras's
    loader and by partf-generate's and partf-evaluate's, saying which and what to do."""
    from partf.cli.loading import RuntimeExit, load_model

    saved, path = _saved_and_changed(tmp_path, lambda config: config.update(format=found))
    assert saved["format"] == FORMAT_VERSION
    with pytest.raises(FormatError) as caught:
        keras.saving.load_model(path)
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"the saved PARTransformerXL was written by {said}")
    with pytest.raises(RuntimeExit) as caught:
        load_model(path)
    assert str(caught.value).startswith(f"cannot load {path}: the saved PARTransformerXL was")
    assert "\n" not in str(caught.value)


def test_a_keras_file_lacking_a_setting_is_refused_not_defaulted(tmp_path):
    """A .keras file of this format without a model setting is refused in one line naming
    the file, the setting and the fix, rather than built with today's default."""
    from partf.cli.loading import RuntimeExit, load_model

    saved, path = _saved_and_changed(tmp_path, lambda config: config["config"].pop("position"))
    assert saved["config"]["position"] == "none"
    with pytest.raises(RuntimeExit) as caught:
        load_model(path)
    assert str(caught.value).startswith(
        f"cannot load {path}: the saved PARTransformerXL's config lacks position, which every "
        f"format {FORMAT_VERSION} file holds: add them to it with the values its run used "
        """(this partf's defaults: {"position": "none"})"""
    )
    assert "\n" not in str(caught.value)


def test_config_round_trip_non_default():
    config = ModelConfig(
        vocab_size=V,
        d_model=12,
        num_heads=3,
        d_ffn=20,
        num_layers=3,
        mem_len=4,
        dropout_rate=0.2,
        cutoffs=(),
        proj_factor=2,
        proj_dims=None,
        tie_embeddings=True,
        straight_through=True,
        clamp_len=6,
        attention="relative",
        attention_options={"head_dim": 6},
        candidates=("attention", "relative", "dense"),
        architecture=None,
        eval_mode="sample",
        sample_per_example=True,
        tau_start=2.0,
        tau_end=0.5,
        tau_schedule="cosine",
        tau_steps=300,
        tau_is_trainable=True,
        batch_size=3,
    )
    net = PARTransformerXL(config, name="par")
    clone = assert_config_round_trip(net)
    assert clone.config == config
    assert net.get_config()["config"] == config.to_dict()
    # Tied output: the adaptive softmax keeps only a bias.
    assert [w.name for w in net.output_layer.weights] == ["head_bias"]
    hidden = net(tokens(4, batch=3), training=True)
    np.testing.assert_allclose(np.exp(np.asarray(net.log_probs(hidden))).sum(-1), 1.0, rtol=1e-5)


@pytest.fixture(scope="module")
def trained():
    """A model fitted a few epochs on a repeated random sequence, and its history."""
    keras.utils.set_random_seed(11)
    net = PARTransformerXL(CONFIG, dropout_rate=0.0)
    stream = np.random.default_rng(12).integers(1, V, size=(B, 6 * 7 + 1)).astype("int32")
    # Context batching: row b is one continuous stream, cut into segments of 6.
    x = np.concatenate([stream[:, i * 6 : i * 6 + 6] for i in range(7)])
    y = np.concatenate([stream[:, i * 6 + 1 : i * 6 + 7] for i in range(7)])
    net.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=False)
    logits_before = [v.numpy().copy() for v in net.arch_variables]
    history = net.fit(x, y, batch_size=B, epochs=6, shuffle=False, verbose=0)
    return net, history.history["loss"], logits_before, (x, y)


def test_fit_reduces_loss_and_trains_architecture(trained):
    net, losses, logits_before, _ = trained
    assert losses[-1] < losses[0] - 0.3, losses
    assert int(net.step.numpy()) == 6 * 7
    assert any(
        not np.allclose(v.numpy(), before)
        for v, before in zip(net.arch_variables, logits_before, strict=True)
    )
    assert all(np.any(v.numpy()) for v in net.state_variables[:4])  # training memory filled


def test_keras_round_trip_is_exact_and_trains_on(trained, tmp_path):
    net, _, _, (x, y) = trained
    path = tmp_path / "par.keras"
    net.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, PARTransformerXL) and loaded.config == net.config
    for original, restored in zip(net.weights, loaded.weights, strict=True):
        np.testing.assert_array_equal(original.numpy(), restored.numpy())
    # Identical outputs, memory included (the stateful call uses the saved memory).
    assert_close(loaded(x[:B], training=False), net(x[:B], training=False), rtol=0, atol=0)
    step = int(loaded.step.numpy())
    history = loaded.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert int(loaded.step.numpy()) == step + len(x) // B


def test_mixed_precision_keeps_state_and_loss_in_float32():
    net = PARTransformerXL(CONFIG, dtype="mixed_bfloat16")
    x = tokens(4)
    hidden = net(x, training=True)
    assert hidden.dtype == "bfloat16"
    assert {v.dtype for v in net.state_variables} == {"float32", "int32"}
    assert all(v.dtype == "float32" for v in net.arch_variables)
    nll = net.token_nll(hidden, x)
    assert nll.dtype == "float32" and np.all(np.isfinite(np.asarray(nll)))
    assert net.log_probs(hidden).dtype == "float32"


@pytest.mark.compile
def test_jit_compiled_stateful_call_equals_eager():
    keras.utils.set_random_seed(13)
    net = PARTransformerXL(CONFIG)
    a, b = tokens(4, seed=8), tokens(4, seed=9)
    eager = [net(a, training=False), net(b, training=False)]
    eager_memory = [v.numpy() for v in net.state_variables]
    net.reset_state()
    step = tf.function(lambda x: net(x, training=False), jit_compile=True)
    compiled = [step(a), step(b)]
    for got, want in zip(compiled, eager, strict=True):
        assert_close(got, want, atol=1e-5)
    for var, want in zip(net.state_variables, eager_memory, strict=True):
        assert_close(var.numpy(), want, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("setting", ["fixed", "par"])
def test_jit_fit_with_dropout_and_sampling_matches_eager(setting):
    """fit with XLA and two steps per execution reproduces eager training from the same
    seeds, with dropout on (0.1) and, for the PAR model, Gumbel-sampled block weights:
    the random draws must be the same numbers compiled or not."""
    config = CONFIG.replace(dropout_rate=0.1)
    if setting == "fixed":
        config = config.replace(architecture="A D")
    stream = np.random.default_rng(14).integers(1, V, size=(4 * B, 6)).astype("int32")
    results = []
    for jit, steps in ((False, 1), (True, 2)):
        keras.utils.set_random_seed(15)
        net = PARTransformerXL(config)
        net.compile(optimizer="adam", jit_compile=jit, steps_per_execution=steps)
        net.fit(stream, stream, batch_size=B, epochs=1, shuffle=False, verbose=0)
        results.append([v.numpy() for v in net.weights])
    for got, want in zip(results[1], results[0], strict=True):
        assert_close(got, want, rtol=1e-4, atol=1e-5)
