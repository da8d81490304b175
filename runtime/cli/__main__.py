"""`python -m seq2onnx.runtime.cli`: the `seq2onnx` command."""
import sys

from .main import main

sys.exit(main())
