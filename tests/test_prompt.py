"""``morl prompt``: the mixture-of-prompts backend (soft prompts on a frozen encoder + MosT).

Checks: the generated task's domain rule and the JSONL/CSV loader; the batched m-prompt forward
against one prompt at a time; the closed-form head Gramian against autograd; the MosT step
(marginals, non-trivial assignment, descent of the Γ-weighted loss); the dispatcher routing;
end-to-end CLI runs on a tiny random BERT and on the packaged MiniLM; one-line errors.
"""

import json
from pathlib import Path

import pytest
import torch

from morl.agents.prompts.dispatcher import Dispatcher, assignment_targets
from morl.agents.prompts.encoder import load_encoder, tokenize
from morl.agents.prompts.soft_prompts import PromptMixture, head_gramian, per_instance_losses
from morl.agents.prompts.trainer import MixtureTrainer
from morl.envs.data.text import generate_domain_flip, load_text_file
from morl.most import MosT
from morl.runners.checkpoint import torch_load
from morl.runners.cli import main as morl

CONFIGS = Path(__file__).resolve().parents[1] / "configs"




@pytest.fixture(scope="module")
def tiny():
    return load_encoder("tiny", seed=0)


def morl_prompt(*argv):
    return morl(["prompt", *argv, "--no-progress"])


def test_generated_task_flips_the_attribute_rule_between_domains():
    a, b = generate_domain_flip(seed=3), generate_domain_flip(seed=3)
    assert a.texts == b.texts and a.labels == b.labels
    words = {0: {}, 1: {}}
    for text, y, d in zip(a.texts["train"], a.labels["train"], a.domains["train"]):
        if d in words:
            for w in ("long", "short", "hot", "cold"):
                if f" {w}" in text:
                    words[d].setdefault(w, set()).add(y)
    # every attribute word has one label per domain, and the opposite one in the other domain
    for w in ("long", "short", "hot", "cold"):
        assert len(words[0][w]) == 1 and words[0][w] == {1 - y for y in words[1][w]}
    assert 0.4 < sum(a.labels["test"]) / len(a.labels["test"]) < 0.6


def test_file_loader_reads_jsonl_and_csv_and_rejects_bad_files(tmp_path):
    rows = [{"text": f"sentence number {k}", "label": "pos" if k % 2 else "neg"} for k in range(40)]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    data = load_text_file(str(tmp_path / "d.jsonl"), seed=0)
    assert data.label_names == ["neg", "pos"]
    assert sum(len(data.texts[s]) for s in data.texts) == 40 and len(data.texts["test"]) == 6
    (tmp_path / "d.csv").write_text("text,label\n" + "".join(f"row {k},{k % 3}\n" for k in range(30)))
    assert load_text_file(str(tmp_path / "d.csv")).num_classes == 3
    (tmp_path / "bad.csv").write_text("sentence,label\nhello,1\n")
    for path, match in ((tmp_path / "missing.jsonl", "does not exist"), (tmp_path / "bad.csv", "lacks a 'text'")):
        with pytest.raises(ValueError, match=match) as err:
            load_text_file(str(path))
        assert "\n" not in str(err.value)


def test_batched_forward_equals_one_prompt_at_a_time(tiny):
    enc, tok = tiny
    mix = PromptMixture(enc, 3, 4, 2, torch.Generator().manual_seed(0))
    ids, mask = tokenize(tok, ["the queue was long.", "honestly, the coffee is hot today, i think."], 32)
    logits, feats = mix(ids, mask)
    for j in range(3):
        one = PromptMixture(enc, 1, 4, 2)
        with torch.no_grad():
            one.prompts.copy_(mix.prompts[j:j + 1])
            one.head_weight.copy_(mix.head_weight[j:j + 1])
            one.head_bias.copy_(mix.head_bias[j:j + 1])
        lj, _ = one(ids, mask)
        torch.testing.assert_close(lj[0], logits[j], rtol=1e-5, atol=1e-5)
    assert feats.shape == (3, 2, enc.config.hidden_size)


@pytest.mark.parametrize("shared", [False, True])
def test_head_gramian_matches_autograd(tiny, shared):
    enc, tok = tiny
    mix = PromptMixture(enc, 2, 3, 3, torch.Generator().manual_seed(1), shared_head=shared)
    assert mix.head_weight.shape[0] == (1 if shared else 2)
    ids, mask = tokenize(tok, [f"text {w} here" for w in ("one", "two", "three", "four", "five")], 16)
    y = torch.tensor([0, 1, 2, 1, 0])
    logits, feats = mix(ids, mask)
    losses = per_instance_losses(logits, y)
    gram = head_gramian(feats, logits, y)
    for j in range(2):
        rows = []
        for i in range(5):
            gw, gb = torch.autograd.grad(losses[j, i], [mix.head_weight, mix.head_bias], retain_graph=True)
            h = 0 if shared else j
            rows.append(torch.cat([gw[h].flatten(), gb[h]]))
        jac = torch.stack(rows)
        torch.testing.assert_close(gram[j], jac @ jac.T, rtol=1e-4, atol=1e-6)


def _thirty_instances(enc, tok, seed):
    """30 generated training sentences (ids, mask, labels) and a fresh 3-prompt mixture."""
    data = generate_domain_flip(train=64, val=8, test=8, seed=seed)
    ids, mask = tokenize(tok, data.texts["train"][:30], 32)
    y = torch.tensor(data.labels["train"][:30])
    return ids, mask, y, PromptMixture(enc, 3, 4, 2, torch.Generator().manual_seed(0))


def test_most_step_respects_marginals_and_descends_the_assigned_loss(tiny):
    enc, tok = tiny
    ids, mask, y, mix = _thirty_instances(enc, tok, seed=0)
    most = MosT(3, warm_start=False)
    trainer = MixtureTrainer(mix, "most", torch.optim.SGD(mix.parameters(), lr=0.5), most)
    out = trainer.step(ids, mask, y)
    gamma = out["gamma"]
    torch.testing.assert_close(gamma.sum(1), torch.full((30,), 1 / 30, dtype=gamma.dtype), atol=1e-6, rtol=0)
    torch.testing.assert_close(gamma.sum(0), torch.full((3,), 1 / 3, dtype=gamma.dtype), atol=1e-6, rtol=0)
    # non-trivial assignment: every prompt owns instances, and its weights vanish off its support
    owner = gamma.argmax(1)
    assert torch.bincount(owner, minlength=3).min() >= 5
    assert (out["weights"][gamma.T <= 1e-8 * gamma.sum()] == 0).all()
    # the step descends the plan's objective Σ_ij Γ_ij L_i(θ_j) (the weighted MGDA guarantee)
    before = (gamma.T * out["losses"]).sum()
    with torch.no_grad():
        after = (gamma.T * per_instance_losses(mix(ids, mask)[0], y)).sum()
    assert after < before


def test_dispatcher_learns_to_route_clustered_instances():
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(3, 16, generator=g) * 3
    owner = torch.randint(0, 3, (300,), generator=g)
    x = centres[owner] + torch.randn(300, 16, generator=g)
    keys = torch.randn(3, 16, generator=g)
    # costs: each instance is cheap on its own cluster's prompt; targets come from the OT plan
    losses = 1.0 + torch.rand(3, 300, generator=g)
    losses[owner, torch.arange(300)] = 0.1
    targets = assignment_targets(losses, "ot")
    assert (targets.argmax(1) == owner).float().mean() > 0.95
    torch.manual_seed(0)
    disp = Dispatcher(16, 32, 3)
    disp.fit(x[:200], keys, targets[:200], steps=200, lr=0.02)
    assert (disp.route(x[200:], keys) == owner[200:]).float().mean() > 0.95


def test_cli_trains_end_to_end_on_a_tiny_encoder(tmp_path):
    rc = morl_prompt(str(CONFIGS / "prompt_most.yaml"), "encoder=tiny", "steps=6", "batch_size=24", "eval_every=3",
                     "checkpoint_every=3", "data.options={train: 96, val: 32, test: 48}", "dispatcher.steps=50",
                     f"out_dir={tmp_path}")
    assert rc == 0
    (run,) = tmp_path.iterdir()
    final = json.loads((run / "final_metrics.json").read_text())
    assert final["method"] == "most" and len(final["test"]["prompt_acc"]) == 3
    assert min(final["train"]["assignment_share"]) > 0.2  # balanced, non-trivial mixture
    assert 0.0 <= final["test"]["routed_acc"] <= final["test"]["oracle_acc"] <= 1.0
    assert sum(final["test"]["route_share"]) == pytest.approx(1.0)
    state = torch_load(run / "checkpoints" / "last.pt")
    assert state["step"] == 6 and state["mixture"]["prompts"].shape == (3, 4, 32) and "dispatcher" in state
    assert list((run / "tb").glob("events.out.tfevents.*"))
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "eval"] == [3, 6]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4, 5, 6]  # log_every = 1


@pytest.mark.parametrize("method", ["mgda", "linear"])
def test_cli_baselines_run(tmp_path, method):
    rc = morl_prompt(str(CONFIGS / f"prompt_{method}.yaml"), "encoder=tiny", "steps=2", "batch_size=16",
                     "data.options={train: 48, val: 16, test: 16}", "dispatcher.steps=10", f"out_dir={tmp_path}")
    assert rc == 0
    (run,) = tmp_path.iterdir()
    assert json.loads((run / "final_metrics.json").read_text())["method"] == method


def test_cli_trains_with_the_packaged_minilm(tmp_path):
    rc = morl_prompt(str(CONFIGS / "prompt_most.yaml"), "steps=2", "batch_size=12", "eval_every=2",
                     "data.options={train: 36, val: 12, test: 12}", "dispatcher.steps=10", "max_length=16",
                     f"out_dir={tmp_path}")
    assert rc == 0
    (run,) = tmp_path.iterdir()
    state = torch_load(run / "checkpoints" / "last.pt")
    assert state["mixture"]["prompts"].shape == (3, 4, 384)  # MiniLM's hidden size


@pytest.mark.parametrize("override,match", [
    ("encoder=/no/such/model", "encoder '/no/such/model' is not a local folder"),
    ("data.name=file", "must be file paths, got 240"),
    ("data.options={train: /no/such.jsonl}", "does not exist"),
    ("method=adam", "method"),
    ("batch_size=100000", "exceeds"),
])
def test_bad_input_gives_one_line_error_and_writes_nothing(tmp_path, capsys, override, match):
    extra = ["data.name=file"] if override.startswith("data.options") else []
    rc = morl_prompt(str(CONFIGS / "prompt_most.yaml"), "encoder=tiny", override, *extra, f"out_dir={tmp_path}")
    err = capsys.readouterr().err.strip()
    assert rc == 2 and match in err and len(err.splitlines()) == 1 and err.startswith("morl: error:")
    assert not any(tmp_path.iterdir())


def test_most_prompts_specialise_on_their_assigned_instances(tiny):
    # Separation by construction: 10 sentences, each given all 3 labels (instance (g, i) has label
    # (i + g) mod 3). A prompt is a function of the text, so it can fit at most one label of a
    # sentence; a mixture fits all 30 instances only if Γ hands the 3 copies of every sentence to
    # 3 different prompts, and then each prompt's loss on the others' instances is large (they are
    # the labels it does not predict). This holds whichever consistent split MosT finds, so the
    # outcome does not hinge on a chaotic trajectory (on the generated domain task the own/others
    # ratio of the weakest prompt swung between 0.14 and 0.78 under 1-ulp weight changes).
    # Measured over encoder seeds 0..19, prompt-init seeds 0..19 and sentence seeds 0..19, each
    # under ATEN_CPU_CAPABILITY=avx2 and =default (and encoder seeds with 2 threads): every draw
    # gives a consistent split with 10 instances per prompt; worst own/others loss ratio 0.18
    # (threshold 0.5); worst best-of-m loss after/before 0.47 (threshold 0.75).
    enc, tok = tiny
    texts = generate_domain_flip(train=10, val=1, test=1, seed=1).texts["train"]
    ids, mask = tokenize(tok, texts * 3, 32)
    y = (torch.arange(10).repeat(3) + torch.arange(3).repeat_interleave(10)) % 3
    mix = PromptMixture(enc, 3, 4, 3, torch.Generator().manual_seed(0))
    trainer = MixtureTrainer(mix, "most", torch.optim.Adam(mix.parameters(), lr=0.05), MosT(3, warm_start=False))
    first = trainer.step(ids, mask, y)
    for _ in range(14):
        out = trainer.step(ids, mask, y)
    owner = out["gamma"].argmax(1)
    # every sentence's three labels went to three different prompts (so 10 instances each)
    assert (owner.view(3, 10).sort(0).values == torch.arange(3).unsqueeze(1)).all()
    owned = torch.nn.functional.one_hot(owner, 3).T.bool()  # [m, n]: where Γ puts each row
    losses = out["losses"]
    mine = (losses * owned).sum(1) / owned.sum(1)
    others = (losses * ~owned).sum(1) / (~owned).sum(1)
    assert (mine < 0.5 * others).all()  # each prompt is an expert for its own instances
    # the mixture covers every instance better than it did at the start (best-of-m loss)
    assert losses.min(0).values.mean() < 0.75 * first["losses"].min(0).values.mean()
