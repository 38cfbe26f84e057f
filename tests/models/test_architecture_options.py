"""Per-mechanism attention options, and the Primal KSVD term in the training logs."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from partf.models import ModelConfig, PARTransformerXL

TINY = dict(vocab_size=40, d_model=8, num_heads=2, d_ffn=16, mem_len=4, cutoffs=(), batch_size=2)


def test_per_mechanism_options_reach_their_own_layers():
    """--attn_window_size serves every mechanism that takes it; --attn_eva_window_size
    and --attn_diag_window_size set one mechanism each and win over it."""
    options = {"window_size": 8, "eva_window_size": 4, "diag_window_size": 2, "chunk_size": 2}
    config = ModelConfig(
        **TINY, num_layers=4, architecture="diag local eva D", attention_options=options
    )
    config.check_attention_options()
    model = PARTransformerXL(config)
    diag, local, eva = (block.sublayers[0] for block in model.blocks[:3])
    assert (diag.window_size, local.window_size, eva.window_size) == (2, 8, 4)
    assert eva.chunk_size == 2


@pytest.mark.parametrize(
    "fields,message",
    [
        (
            dict(attention_options={"num_features": 8}),
            "'num_features' \\(--attn_num_features\\) is taken by none of the chosen "
            "mechanisms \\(relative\\); options they take: attention_dropout_rate",
        ),
        (
            dict(architecture="diag D", num_layers=2, attention_options={"eva_window_size": 4}),
            "'eva_window_size' .* none of the chosen mechanisms \\(diag\\)",
        ),
        (
            dict(attention="eva", attention_options={"eva_window": 4}),
            "'eva_window' .* options they take: .*eva_window_size",
        ),
    ],
)
def test_an_option_no_chosen_mechanism_takes_is_an_error(fields, message):
    config = ModelConfig(**TINY, **fields)
    with pytest.raises(ValueError, match=message):
        config.check_attention_options()


def test_primal_ksvd_term_is_logged_on_its_own():
    """fit's logs hold `ksvd_loss`: eta * J of the Primal layer in the step's loss,
    the value its forward pass adds (dropout off, fixed architecture)."""
    keras.utils.set_random_seed(3)
    config = ModelConfig(
        **TINY,
        num_layers=2,
        architecture="primal D",
        dropout_rate=0.0,
        attention_options={"low_rank": 3, "eta": 0.5},
    )
    model = PARTransformerXL(config)
    x = np.random.default_rng(0).integers(1, 40, size=(2, 7)).astype("int32")
    model.forward(x, model.initial_state(2), training=True)
    (primal,) = model.loss_attentions
    want = float(np.asarray(primal.losses[0]))
    model.compile(optimizer=keras.optimizers.SGD(0.0))
    history = model.fit(x, x, batch_size=2, epochs=1, verbose=0)
    assert want > 0
    np.testing.assert_allclose(history.history["ksvd_loss"][0], want, rtol=1e-5)
    plain = PARTransformerXL(config.replace(architecture="linear D"))
    plain.compile(optimizer=keras.optimizers.SGD(0.0))
    assert "ksvd_loss" not in plain.fit(x, x, batch_size=2, verbose=0).history
