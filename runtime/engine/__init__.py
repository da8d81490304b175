"""The engines the decoding loop runs on: onnxruntime sessions of a package's graphs (session.py), the CPU engine's
cache in memory (cache_memory.py, cache_inplace.py), the CUDA engine (cuda.py) and its small graphs built here
(gather_graph.py), and the device choice (devices.py)."""
