"""A model package read and checked: the folder's files (files.py), manifest.json (manifest.py, with its fields and
records: manifest_fields.py, manifest_records.py), the model's shape (config.py), the tokenizers (tokenizer.py), the
graphs' names (graph_io.py), their bytes and external data (onnx_bytes.py, external_data.py), the language codes its
records name and the codes and names LibreTranslate's API uses for them (languages.py), and the packages shipped in the
wheel (shipped_models.py). Nothing here runs a graph."""
