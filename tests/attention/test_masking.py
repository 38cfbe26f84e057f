"""The masked softmax shared by the softmax-based mechanisms."""

import numpy as np

from partf.attention.masking import masked_softmax
from tests.attention.helpers import to_np


def test_masked_softmax_ignores_masked_entries_and_empty_rows():
    logits = np.array([[1.0, 2.0, 50.0], [3.0, 4.0, 5.0]], "float32")
    valid = np.array([[True, True, False], [False, False, False]])
    probs = to_np(masked_softmax(logits, valid))
    np.testing.assert_allclose(probs[0], [1 / (1 + np.e), np.e / (1 + np.e), 0.0], rtol=1e-6)
    np.testing.assert_array_equal(probs[1], 0.0)
