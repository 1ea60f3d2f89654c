"""What a ``morl prompt`` config builds: the data (a batch larger than the training set is one
line), the frozen encoder cut to ``encoder_layers``, tokenised splits, and the mixture's trainer
with MosT only for ``method: most``."""

from __future__ import annotations

import pytest
import torch

from morl.runners.config import load_config
from morl.runners.errors import UserError
from morl.runners.prompt.build import build_trainer, load_data, load_encoder, tokenized_splits
from morl.runners.prompt.config import PromptConfig

SMALL = ["encoder=tiny", "data.options={train: 12, val: 4, test: 6}", "batch_size=8", "max_length=16"]


def _cfg(*overrides):
    return load_config(PromptConfig, None, [*SMALL, *overrides])


def test_the_data_has_the_configured_split_sizes():
    data = load_data(_cfg())
    assert {s: len(t) for s, t in data.texts.items()} == {"train": 12, "val": 4, "test": 6}
    assert {s: len(y) for s, y in data.labels.items()} == {"train": 12, "val": 4, "test": 6}


def test_a_batch_larger_than_the_training_set_is_one_line():
    with pytest.raises(UserError, match=r"^batch_size=13 exceeds the 12 training instances$"):
        load_data(_cfg("batch_size=13"))
    assert len(load_data(_cfg("batch_size=12")).texts["train"]) == 12  # all of them is allowed


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["data.options={train: 12, colour: red}"], "^data: "),  # not an option of the generator
        (["data.name=file", "data.options={}"], "^data: data name 'file' needs options.train"),
    ],
)
def test_bad_data_is_one_line_naming_the_section(overrides, message):
    with pytest.raises(UserError, match=message) as err:
        load_data(_cfg(*overrides))
    assert "\n" not in str(err.value)


def test_encoder_layers_keeps_the_first_layers_of_the_encoder():
    full, _ = load_encoder(_cfg())
    cut, _ = load_encoder(_cfg("encoder_layers=1"))
    assert len(full.encoder.layer) == 2 and len(cut.encoder.layer) == 1  # the tiny test encoder has 2
    first = dict(full.encoder.layer[0].named_parameters())
    assert all(torch.equal(p, first[n]) for n, p in cut.encoder.layer[0].named_parameters())  # the same seed


@pytest.mark.parametrize("layers", [0, 3])
def test_encoder_layers_outside_the_encoder_is_one_line_naming_the_range(layers):
    with pytest.raises(UserError, match=rf"^encoder_layers must be in 1\.\.2 for this encoder .*got {layers}$"):
        load_encoder(_cfg(f"encoder_layers={layers}"))


def test_an_encoder_that_is_no_folder_is_one_line_naming_the_section(tmp_path):
    with pytest.raises(UserError, match=f"^encoder: encoder '{tmp_path / 'none'}' is not a local folder"):
        load_encoder(_cfg(f"encoder={tmp_path / 'none'}"))


def test_splits_are_tokenised_once_at_most_max_length_tokens():
    cfg = _cfg("max_length=5")
    data = load_data(cfg)
    _, tokenizer = load_encoder(cfg)
    ids, labels = tokenized_splits(cfg, data, tokenizer, torch.device("cpu"))
    for split, n in (("train", 12), ("val", 4), ("test", 6)):
        input_ids, mask = ids[split]
        assert input_ids.shape[0] == mask.shape[0] == n and input_ids.shape[1] <= 5
        assert labels[split].tolist() == list(data.labels[split])


@pytest.mark.parametrize(
    "overrides, most",
    [
        (["method=most", "most.curriculum=paper", "most.curriculum_decay=0.5"], True),
        (["method=linear"], False),
        (["method=mgda"], False),
    ],
)
def test_the_trainer_has_mos_t_only_for_method_most(overrides, most):
    cfg = _cfg(*overrides, "prompts.num=2", "prompts.length=3", "inner_steps=2")
    encoder, _ = load_encoder(cfg)
    mixture, trainer = build_trainer(cfg, 2, encoder, torch.device("cpu"))
    assert trainer.mixture is mixture and trainer.method == cfg.method and trainer.inner_steps == 2
    assert tuple(mixture.prompts.shape) == (2, 3, 32)  # m prompts x k tokens x the tiny encoder's width
    assert (trainer.most is not None) == most
    if most:  # each step sees other instances: no warm start from the last plan
        assert trainer.most.warm_start is False and trainer.most.num_models == 2
        assert trainer.most.curriculum.direction == "paper" and trainer.most.curriculum.decay == 0.5


def test_mos_t_options_it_refuses_are_one_line_naming_the_section():
    cfg = _cfg("most.tau=-1")  # validate() refuses it first when a run starts
    encoder, _ = load_encoder(cfg)
    with pytest.raises(UserError, match=r"^most: tau must be >= 0, got -1"):
        build_trainer(cfg, 2, encoder, torch.device("cpu"))
