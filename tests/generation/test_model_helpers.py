"""What generation needs from the model: `reconfigure` keeps the weights."""

from __future__ import annotations

import numpy as np
import pytest

from partf.generation import reconfigure
from tests.generation.helpers import full_pass_log_probs


def test_reconfigure_keeps_weights_and_refuses_shape_changes(relative_model, tokens):
    longer = reconfigure(relative_model, mem_len=64, batch_size=1)
    assert longer.config.mem_len == 64
    np.testing.assert_allclose(
        full_pass_log_probs(longer, tokens), full_pass_log_probs(relative_model, tokens), atol=1e-5
    )
    with pytest.raises(ValueError, match="weights"):
        reconfigure(relative_model, d_ffn=64)
