"""The runtime's step limit of each sentence (runtime/decode/decoding.py `step_limits`: max_decoding_length,
the relative max_length_a * src_len + max_length_b, max_positions) as the PyTorch reference takes it:
training/reference.py accepts one max_length per source."""
from __future__ import annotations

from typing import Any, List, Sequence

from seq2onnx.runtime.decode.decoding import step_limits
from seq2onnx.runtime.options import DecodingOptions


def reference_max_length(config: Any, sources: Sequence[Sequence[int]], **options: Any) -> List[int]:
    """The reference's max_length for `sources` decoded with DecodingOptions(**options)."""
    return step_limits(sources, DecodingOptions(**options), config).tolist()
