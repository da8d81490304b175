"""`seq2onnx serve`: translations over HTTP (the `serve` extra: Starlette on uvicorn, prometheus-client).

scheduler.py: the queue and worker of each model, and the request / dynamic batching policies (continuous.py:
continuous batching); app.py: the Starlette app (the /v1 API, health, metrics) over service.py (what every route
shares: settings, admission, errors), with LibreTranslate's contract (libretranslate.py, files.py); cli.py: the
command. `import seq2onnx.runtime` never imports this subpackage.
"""
