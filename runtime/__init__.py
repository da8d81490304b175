"""seq2onnx.runtime: torch-free decoding with numpy + onnxruntime + tokenizers."""
__version__ = "0.1.0"
