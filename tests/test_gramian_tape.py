"""GramianTape / streamed_gramian: the K×K Gramian the tape gives (layer inputs and output
gradients, never the weight gradients) against J Jᵀ built from K separate ``torch.autograd.grad``
calls, in float64; and the one error each misuse gets."""

import pytest
import torch
from torch import nn

import morl
import morl.gramian_tape as gt
from morl.aggregators import build
from morl.gramian_tape import GramianTape, streamed_gramian


def _reference(losses, params):
    """J Jᵀ from K separate backward passes (a parameter a loss does not reach: zero columns)."""
    rows = []
    for k in range(losses.shape[0]):
        grads = torch.autograd.grad(losses[k], params, retain_graph=True, allow_unused=True)
        rows.append(torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params)]))
    j = torch.stack(rows).double()
    return j @ j.T


@pytest.fixture
def folded(monkeypatch):
    """The layers whose weight went through the tape's formulas (not through a [K, p] block)."""
    seen = []
    for name in ("_linear_weight", "_conv_weight"):
        real = getattr(gt, name)
        monkeypatch.setattr(gt, name, lambda stream, m, a, d, real=real: seen.append(m) or real(stream, m, a, d))
    return seen


def _check(model, forward, folded, expected_layers, params=None):
    """The tape's G equals the reference, it is not diagonal-dominated trivia (some G_kl < 0), and
    every recorded layer in ``expected_layers`` went through the tape's formulas."""
    params = list(model.parameters()) if params is None else params
    tape = GramianTape(model)
    with tape:
        losses = forward()
    gram = streamed_gramian(losses, params, tape)
    expected = _reference(losses, params)
    assert bool((expected < 0).any()), "the case needs conflicting objectives to see a sign"
    torch.testing.assert_close(gram, expected, rtol=1e-10, atol=1e-12 * float(expected.abs().max()))
    assert set(folded) == set(expected_layers) and len(folded) == len(expected_layers)


def _mse(out):
    return (out - torch.linspace(-1.0, 1.0, out.shape[-1], dtype=out.dtype)).pow(2).mean(0)


@pytest.mark.parametrize("kernel", [True, False], ids=["a-a-kernel", "output-slices"])
@pytest.mark.parametrize("k", [3, 17])
def test_mlp_with_biases_either_linear_formula(k, kernel, folded, monkeypatch):
    """⟨a aᵀ, Δ_k Δ_lᵀ⟩ (tasks in chunks of K/8) and the weight rows in slices of output units
    (17 tasks: ragged chunks and slices), both forced on the same MLP."""
    monkeypatch.setattr(gt, "_kernel_is_cheaper", lambda *shape: kernel)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, k)).double()
    x = torch.randn(9, 6, dtype=torch.float64)
    _check(model, lambda: _mse(model(x)), folded, [model[4], model[2], model[0]])


def test_large_batch_takes_the_output_slices(folded, monkeypatch):
    """N = 600 rows against a 8 → 6 layer: the weight-row slices are the cheaper product, and exact."""
    chosen, real = [], gt._kernel_is_cheaper
    monkeypatch.setattr(gt, "_kernel_is_cheaper", lambda *shape: chosen.append(real(*shape)) or chosen[-1])
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 4)).double()
    x = torch.randn(600, 8, dtype=torch.float64)
    _check(model, lambda: _mse(model(x)), folded, [model[2], model[0]])
    assert chosen == [False, False]


def test_conv2d_groups_stride_padding_dilation(folded):
    """A grouped convolution (the whole weight at once) with asymmetric stride, padding and
    dilation, then an ungrouped one whose 5 output channels split into ragged slices for K = 3."""
    torch.manual_seed(2)
    model = nn.Sequential(
        nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
        nn.Tanh(),
        nn.Conv2d(6, 5, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Flatten(),
    ).double()
    x = torch.randn(3, 4, 7, 6, dtype=torch.float64)
    head = torch.randn(5 * 2 * 4, 3, dtype=torch.float64)
    _check(model, lambda: _mse(model(x) @ head), folded, [model[2], model[0]])


def test_conv1d_without_bias(folded):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv1d(3, 4, 5, stride=2, padding=2, bias=False), nn.Tanh(), nn.Flatten()).double()
    x = torch.randn(5, 3, 11, dtype=torch.float64)
    head = torch.randn(4 * 6, 4, dtype=torch.float64)
    _check(model, lambda: _mse(model(x) @ head), folded, [model[0]])


def test_a_layer_called_twice_in_one_forward(folded):
    """A Linear applied to its own output, and a convolution applied at two input sizes: each
    layer's calls add up in the weight's gradient, so their cross terms are in G."""
    torch.manual_seed(4)
    lin, conv = nn.Linear(5, 5).double(), nn.Conv2d(2, 3, 3, padding=1).double()
    model = nn.ModuleList([lin, conv])
    x, small, big = (torch.randn(*s, dtype=torch.float64) for s in ((6, 5), (2, 2, 4, 4), (2, 2, 6, 6)))

    def forward():
        z = lin(torch.tanh(lin(x)))
        c = conv(small).mean((2, 3)) + conv(big)[..., 1:5, 1:5].mean((2, 3))  # [2, 3]
        return torch.cat([_mse(z), _mse(c)])

    _check(model, forward, folded, [conv, lin])


def test_a_call_the_losses_do_not_use_adds_nothing(folded):
    """Two forwards inside one ``with tape:``, the losses built from the second only."""
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    x1, x2 = torch.randn(2, 7, 4, dtype=torch.float64)

    def forward():
        model(x1)
        return _mse(model(x2))

    _check(model, forward, folded, [model[2], model[0]])


def test_parameters_outside_recorded_layers_go_through_blocks(folded):
    """LayerNorm's weight and bias and a loose scale are not recorded: their [K, p] blocks join
    the recorded layers' terms."""
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(5, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 4)).double()
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.normal_()
    scale = nn.Parameter(torch.tensor([0.7, -1.3, 0.4, 2.0], dtype=torch.float64))
    x = torch.randn(6, 5, dtype=torch.float64)
    params = [*model.parameters(), scale]
    _check(model, lambda: _mse(model(x) * scale), folded, [model[3], model[0]], params=params)


def _tied_net():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3)).double()


def test_a_weight_used_outside_its_layer_is_refused_and_gramian_true_is_exact():
    model = _tied_net()
    x = torch.randn(5, 4, dtype=torch.float64)
    tape = GramianTape(model)
    with tape:
        losses = _mse(model(x) + x @ model[0].weight[:3].T)  # the first weight used again by hand
    with pytest.raises(ValueError, match=r"^gramian=tape: the losses use the weight or bias of layer 0 \(Linear\)"):
        morl.backward(losses, model, build("upgrad"), gramian=tape)
    assert all(p.grad is None for p in model.parameters())
    params = list(model.parameters())
    torch.testing.assert_close(streamed_gramian(losses, params), _reference(losses, params), rtol=1e-10, atol=0)


def test_two_layers_sharing_one_weight_are_refused():
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)).double()
    model[2].weight = model[0].weight
    tape = GramianTape(model)
    with tape:
        losses = _mse(model(torch.randn(5, 4, dtype=torch.float64)))
    with pytest.raises(ValueError, match="outside the calls recorded in the latest `with tape:`"):
        streamed_gramian(losses, list(model.parameters()), tape)


def test_misuse_gets_one_error_naming_the_fix():
    model = _tied_net()
    x = torch.randn(5, 4, dtype=torch.float64)
    agg = build("mgda")
    never_entered = GramianTape(model)
    with pytest.raises(ValueError, match=r"recorded no call .* inside `with tape:`, or pass gramian=True$"):
        morl.backward(_mse(model(x)), model, agg, gramian=never_entered)
    tape = GramianTape(model)
    with tape:
        recorded = model(x)
    outside = model(2 * x)  # a forward the tape did not see
    for losses in (_mse(outside), _mse(recorded + outside)):
        with pytest.raises(ValueError, match="a forward outside or before it"):
            morl.backward(losses, model, agg, gramian=tape, retain_graph=True)
    with tape:  # a second recording: the first forward's calls are no longer on the tape
        again = model(3 * x)
    with pytest.raises(ValueError, match="a forward outside or before it"):
        morl.backward(_mse(recorded + again), model, agg, gramian=tape)
    assert all(p.grad is None for p in model.parameters())


def test_tape_takes_a_module_only():
    with pytest.raises(TypeError, match="GramianTape records an nn.Module's layers, got Tensor"):
        GramianTape(torch.ones(2))
