"""ragged_attention's two input kinds: plain tensors (transformers' sdpa) or RaggedKV rows."""

import pytest
import torch

from envgym.models.kv import RaggedKV, ragged_attention

pytestmark = pytest.mark.timeout(60)


def test_mixed_tensor_and_ragged_kv_is_a_clear_type_error() -> None:
    q = torch.zeros(1, 2, 1, 4)
    tensor = torch.zeros(1, 2, 3, 4)
    ragged = RaggedKV(keys=[tensor], values=[tensor], new=1)
    with pytest.raises(TypeError, match="must both be tensors or both RaggedKV"):
        ragged_attention(torch.nn.Module(), q, tensor, ragged, None)
    with pytest.raises(TypeError, match="must both be tensors or both RaggedKV"):
        ragged_attention(torch.nn.Module(), q, ragged, tensor, None)
