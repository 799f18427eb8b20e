"""Fixtures of the gateway tests: the tiny model behind the `hf` policy, and a gateway served on loopback."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the example harness (harness_keydoor.py)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from agentgym.train.tiny import build_tiny

    return build_tiny(tmp_path_factory.mktemp("gateway") / "tiny")


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_dir):
    """(policy, chat format) of the tiny random Llama: a real model, generating on the CPU."""
    from agentgym.policy import load_policy

    policy = load_policy(f"hf:{tiny_model_dir}")
    return policy, policy.chat_format()


@pytest.fixture()
def serve():
    """serve(policy, chat, **GatewayConfig fields) -> (gateway, base URL); stopped after the test."""
    pytest.importorskip("uvicorn")
    pytest.importorskip("starlette")
    from agentgym.train.gateway import Gateway, GatewayConfig, GatewayServer

    with contextlib.ExitStack() as stack:
        def start(policy, chat, **config):
            gateway = Gateway(policy, chat, GatewayConfig(**config))
            stack.callback(gateway.close)
            server = stack.enter_context(GatewayServer(gateway))
            return gateway, server.url

        yield start
