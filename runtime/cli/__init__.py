"""The `seq2onnx` command (main.py) and the runtime's subcommands: translate and score (commands.py), info (info.py),
translate-file (translate_file.py), their files and streams (cli_io.py) and attention plots (attention_plot.py). `python -m seq2onnx.runtime.cli` runs it."""
