"""Ray for seq2onnx (the `ray` extra): bulk translation on Ray Data (dataset.py, `seq2onnx translate-dataset`:
cli.py) and the server of `seq2onnx serve` as a Ray Serve deployment (serve.py)."""
from __future__ import annotations

import logging
from typing import Optional

# Ray's notice, on every cluster that ray.init starts (RAY_AUTH_MODE unset), that it turned token authentication
# on: its default, and the secure state, so a command's user has nothing to do about it. Its warning that token
# authentication is off (anyone who reaches the cluster can run code on it) is another message, and still shows.
_TOKEN_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_TOKEN_AUTH_ON = "Token authentication is enabled"


def _not_the_token_auth_notice(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith(_TOKEN_AUTH_ON)


def connect(address: Optional[str]) -> None:
    """ray.init for a command (`translate-dataset`, `ray-serve`): the cluster at `address` ("auto", HOST:PORT;
    None: Ray's rule, RAY_ADDRESS, else the cluster this machine runs, else a new one for this process), Ray's
    own log lines from WARNING up, less the token authentication notice."""
    import ray

    token_auth = logging.getLogger(_TOKEN_AUTH_LOGGER)
    if _not_the_token_auth_notice not in token_auth.filters:
        token_auth.addFilter(_not_the_token_auth_notice)
    # ray.init annotates logging_level as an int, but takes a level's name too (its own default is "info")
    ray.init(address=address, logging_level="WARNING", configure_logging=True)  # type: ignore[arg-type]
