"""Model packages made by seq2onnx's own pipeline, shipped inside the distribution as package data.

Each sub-folder is a package folder written by `seq2onnx export` (manifest.json, ONNX graphs,
tokenizer.json) with a MODEL_CARD.md; load one by name: `Translator("numbers-en-de")`.
"""
