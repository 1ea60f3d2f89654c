"""Frozen text encoders loaded from local folders only (morl/agents/prompts/encoder.py): frozen and
in eval mode, padding to the longest text, and one line for each folder that is not a model."""

import pytest
import torch

from morl.agents.prompts.encoder import load_encoder, tokenize


def test_the_encoder_is_frozen_in_eval_mode(tiny):
    model, _ = tiny
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_tokenize_pads_to_the_longest_text_and_masks_the_padding(tiny):
    _, tokenizer = tiny
    ids, mask = tokenize(tokenizer, ["a b c d e", "a"], max_length=64)
    assert ids.shape == mask.shape and ids.shape[0] == 2
    assert mask[0].all() and int(mask[1].sum()) < ids.shape[1]  # [CLS] a [SEP], then padding
    assert (ids[1][~mask[1].bool()] == tokenizer.pad_token_id).all()
    ids, _ = tokenize(tokenizer, ["word " * 100], max_length=16)
    assert ids.shape == (1, 16)  # truncated at max_length


def test_the_same_seed_builds_the_same_tiny():
    a, _ = load_encoder("tiny", seed=3)
    b, _ = load_encoder("tiny", seed=3)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda tmp: str(tmp / "absent"), "is not a local folder"),
        (lambda tmp: str(tmp), "has no config.json"),
        (lambda tmp: (tmp / "config.json").write_text("{}") and str(tmp), "could not be loaded"),
    ],
)
def test_a_folder_that_is_not_a_model_is_one_line(make, words, tmp_path):
    with pytest.raises(ValueError) as err:
        load_encoder(make(tmp_path))
    assert words in str(err.value) and len(str(err.value).splitlines()) == 1
