import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny():
    """2-layer random-weight Llama with the default model's real tokenizer and a padded lm_head."""
    from typedlm.testing import tiny_engine

    return tiny_engine()


@pytest.fixture(scope="session")
def real():
    """The embedded default model (SmolLM2-135M-Instruct). Use only in tests marked real_model."""
    from typedlm.engine import load_engine

    return load_engine("default", progress=False)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, tiny):
    """The tiny model saved as a HF directory (for load_engine / --model paths)."""
    d = tmp_path_factory.mktemp("tiny-model")
    tiny.model.save_pretrained(d)
    tiny.tokenizer.save_pretrained(d)
    return d
