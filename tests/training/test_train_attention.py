"""Packed attention: documents laid end to end in one sample must not see each other."""

import pytest
import torch

from training.config import ModelSettings
from training.loss import IGNORE_INDEX, token_loss_sum, token_losses
from training.model import ShardSetInfo, build_model
from training.packed_attention import attention_inputs, block_causal_mask, varlen_kwargs

SHARDS = ShardSetInfo(seq_len=32, vocab_size=101, pad_id=0, eos_id=1, bos_id=None)
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}


def _tiny(model_type: str, attn: str) -> torch.nn.Module:
    overrides = dict(TINY, intermediate_size=128) if model_type == "llama" else TINY
    model = build_model(ModelSettings(model_type=model_type, attn_implementation=attn, overrides=overrides),
                        SHARDS, seed=0)
    return model.eval()


def _packed_sample(docs: list[torch.Tensor], seq_len: int) -> dict[str, torch.Tensor]:
    """One packed sample the way the loader collates it: segments end to end, then padding."""
    used = sum(len(d) for d in docs)
    pad = seq_len - used
    ids = torch.cat([*docs, torch.full((pad,), SHARDS.pad_id)])
    segment_ids = torch.cat([torch.full((len(d),), i + 1) for i, d in enumerate(docs)] + [torch.zeros(pad)])
    position_ids = torch.cat([torch.arange(len(d)) for d in docs] + [torch.zeros(pad, dtype=torch.long)])
    labels = torch.full((seq_len,), IGNORE_INDEX)
    start = 0
    for d in docs:  # labels[t] = ids[t+1] inside a segment; the segment's last position has none
        labels[start:start + len(d) - 1] = d[1:]
        start += len(d)
    return {"input_ids": ids[None], "segment_ids": segment_ids.long()[None], "position_ids": position_ids[None],
            "labels": labels[None]}


@pytest.mark.parametrize(("model_type", "attn"), [("llama", "sdpa"), ("llama", "eager"), ("gpt2", "sdpa")])
def test_packed_batch_gives_each_document_its_separate_loss(model_type, attn):
    model = _tiny(model_type, attn)
    gen = torch.Generator().manual_seed(7)
    docs = [torch.randint(2, SHARDS.vocab_size, (n,), generator=gen) for n in (11, 9, 5)]
    sample = _packed_sample(docs, SHARDS.seq_len)  # 25 tokens + 7 padding
    with torch.no_grad():
        packed_logits = model(input_ids=sample["input_ids"], position_ids=sample["position_ids"],
                              **attention_inputs(sample["segment_ids"], attn)).logits
        packed = token_losses(packed_logits, sample["labels"])[0]
        start = 0
        for d in docs:
            alone = token_losses(model(input_ids=d[None]).logits[:, :-1], d[None, 1:])[0]
            torch.testing.assert_close(packed[start:start + len(d) - 1], alone, rtol=1e-5, atol=1e-5)
            start += len(d)
    assert torch.isfinite(packed_logits).all()  # padding rows attend to padding only: no NaN


def test_without_isolation_later_documents_see_earlier_ones():
    """The control that makes the test above meaningful: plain causal attention over the whole packed
    sample (one continuous position range) changes the second document's losses."""
    model = _tiny("llama", "sdpa")
    gen = torch.Generator().manual_seed(7)
    docs = [torch.randint(2, SHARDS.vocab_size, (n,), generator=gen) for n in (11, 9)]
    sample = _packed_sample(docs, SHARDS.seq_len)
    with torch.no_grad():
        leaky = token_losses(model(input_ids=sample["input_ids"]).logits, sample["labels"])[0]
        alone = token_losses(model(input_ids=docs[1][None]).logits[:, :-1], docs[1][None, 1:])[0]
    assert (leaky[11:19] - alone).abs().max() > 1e-3


def test_block_causal_mask_structure():
    seg = torch.tensor([[1, 1, 2, 2, 2, 0, 0]])
    mask = block_causal_mask(seg)[0, 0]
    expected = torch.tensor([
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [0, 0, 1, 0, 0, 0, 0],
        [0, 0, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 1, 0, 0],
        [0, 0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 0, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(mask, expected)
    eager = attention_inputs(seg, "eager")["attention_mask"]
    assert eager.dtype == torch.float32
    assert torch.equal(eager[0, 0] == 0, expected)
    assert eager.min() == torch.finfo(torch.float32).min


def test_varlen_cu_seqlens_cover_the_flattened_batch_run_by_run():
    seg = torch.tensor([[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 1, 1]])
    kw = varlen_kwargs(seg)
    assert kw["cu_seq_lens_q"].tolist() == [0, 3, 5, 6, 12]
    assert kw["cu_seq_lens_q"].dtype == torch.int32
    assert kw["max_length_q"] == 6
    assert set(attention_inputs(seg, "flash_attention_2")) == {"cu_seq_lens_q", "cu_seq_lens_k", "max_length_q",
                                                               "max_length_k"}


def test_unknown_attention_implementation_is_refused():
    with pytest.raises(ValueError, match="flex_attention"):
        attention_inputs(torch.ones(1, 4, dtype=torch.long), "flex_attention")


def test_loss_sum_counts_only_labelled_positions():
    logits = torch.zeros(1, 4, 8)  # uniform: every counted position costs ln(8)
    labels = torch.tensor([[3, IGNORE_INDEX, 5, IGNORE_INDEX]])
    assert token_loss_sum(logits, labels).item() == pytest.approx(2 * torch.log(torch.tensor(8.0)).item())
