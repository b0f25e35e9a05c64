"""Fixtures shared by the unit tests of one stage and another."""

import pytest
from gpt2_tokenizer import GPT2_JSON

from platform_assets.tokenize.settings import TokenizerSettings
from platform_assets.tokenize.tokenizer_artifact import TokenizerArtifact
from platform_assets.tokenize.tokenizer_build import load_pretrained, make_artifact


@pytest.fixture(scope="module")
def gpt2() -> TokenizerArtifact:
    """GPT-2's bare tokenizer.json: pad = eos, ChatML tokens added as 50257 and 50258."""
    if not GPT2_JSON.is_file():
        pytest.skip(f"{GPT2_JSON} not present")
    tok, declared = load_pretrained(str(GPT2_JSON))
    return make_artifact(tok, TokenizerSettings(source="pretrained", path=str(GPT2_JSON)), declared)
