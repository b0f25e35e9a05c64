"""Where the real GPT-2 tokenizer lives for the tests that use it: ../shared beside the checkout
(the shared data of this workplace). Tests that need it skip, saying so, where it is absent."""

from pathlib import Path

GPT2_JSON = Path(__file__).resolve().parents[3] / "shared" / "data" / "tokenizers" / "gpt2" / "tokenizer.json"
