import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Triton kernels (the batch-invariant attention) run on the CPU through Triton's interpreter; read when triton
# is imported, so set before anything imports it. Only tests call those kernels on the CPU.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def tiny():
    """2-layer random-weight Llama with the default model's real tokenizer and a padded lm_head."""
    from typedlm.testing import tiny_engine

    return tiny_engine()


@pytest.fixture
def no_prefix_cache(tiny):
    """The tiny engine's prefix cache off for one test (tests that count or fail the forwards of a prefill)."""
    cache = tiny.runner.prefix_cache
    limit = cache.limit_bytes
    cache.set_limit(0)
    yield
    cache.set_limit(limit)


@pytest.fixture(scope="session")
def real():
    """The embedded default model (SmolLM2-135M-Instruct). Use only in tests marked real_model."""
    from typedlm.engine import load_engine

    return load_engine("default", progress=False)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, tiny):
    """The tiny model saved as a HF directory (for load_engine / --model paths)."""
    from typedlm.testing import save_tiny

    d = tmp_path_factory.mktemp("tiny-model")
    save_tiny(d, tiny)
    return d


def pytest_collection_modifyitems(config, items):
    """`make test-fast` deselects real_model: a test on the real model must carry the marker."""
    unmarked = [i.nodeid for i in items if "real" in getattr(i, "fixturenames", ()) and not i.get_closest_marker("real_model")]
    if unmarked:
        raise pytest.UsageError(f"tests use the 'real' fixture without @pytest.mark.real_model: {unmarked}")


@pytest.fixture(scope="module")
def tiny_url(tiny):
    """A live server (loopback) on the tiny model, ``max_tokens_cap`` 256: its base URL."""
    from typedlm.server.app import create_app
    from typedlm.server.state import ServerConfig
    from typedlm.server.testing import live_server

    with live_server(create_app(tiny, ServerConfig(max_batch=4, max_queue=32, max_tokens_cap=256))) as url:
        yield url


@pytest.fixture(scope="module")
def model(tiny):
    """The served model's name, as clients send it."""
    return tiny.name


@pytest.fixture(scope="module")
def tiny_client(tiny_url):
    """The official openai client on ``tiny_url`` (no retries)."""
    import openai

    return openai.OpenAI(base_url=tiny_url + "/v1", api_key="unused", max_retries=0, timeout=120)
