"""Benchmark of seq2onnx against CTranslate2, HuggingFace transformers and Optimum (see README.md).

Not part of the installed package: run it from the repository with `python bench/run.py`.
"""
