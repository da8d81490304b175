"""Ray for seq2onnx (the `ray` extra): bulk translation on Ray Data (dataset.py, `seq2onnx translate-dataset`:
cli.py) and the server of `seq2onnx serve` as a Ray Serve deployment (serve.py)."""
