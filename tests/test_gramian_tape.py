"""GramianTape / streamed_gramian: the K×K Gramian the tape gives (layer inputs and output
gradients, never the weight gradients), in one batched backward or in chunks of ``rows``
objectives (K not a multiple of the chunk), against J Jᵀ built from K separate
``torch.autograd.grad`` calls, in float64; and the one error each misuse gets."""

import pytest
import torch
from torch import nn

import morl
import morl.gramian_tape as gt
from morl.aggregators import build
from morl.gramian_tape import GramianTape, streamed_gramian
from tests.test_gradients import _LargestTensor


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


# None: all K objectives in one batched backward; else chunks of 1, 2 and K - 1 (-1 below)
CHUNKS = [None, 1, 2, -1]


def _check(model, forward, folded, expected_layers, params=None, rows=None):
    """The tape's G (``rows`` objectives per backward pass, -1: K - 1) equals the reference, it is
    not diagonal-dominated trivia (some G_kl < 0), and every recorded layer in ``expected_layers``
    went through the tape's formulas (once; in chunks, once per chunk or once at the end)."""
    params = list(model.parameters()) if params is None else params
    tape = GramianTape(model)
    with tape:
        losses = forward()
    k = losses.shape[0]
    tape.rows = k - 1 if rows == -1 else rows
    assert tape.rows in (None, 1) or k % tape.rows, "K must not be a multiple of the chunk"
    gram = streamed_gramian(losses, params, tape)
    expected = _reference(losses, params)
    assert bool((expected < 0).any()), "the case needs conflicting objectives to see a sign"
    torch.testing.assert_close(gram, expected, rtol=1e-10, atol=1e-12 * float(expected.abs().max()))
    assert set(folded) == set(expected_layers)
    assert len(folded) == len(expected_layers) if rows is None else len(folded) >= len(expected_layers)


def _mse(out):
    return (out - torch.linspace(-1.0, 1.0, out.shape[-1], dtype=out.dtype)).pow(2).mean(0)


@pytest.mark.parametrize("rows", CHUNKS)
@pytest.mark.parametrize("kernel", [True, False], ids=["a-a-kernel", "output-slices"])
@pytest.mark.parametrize("k", [3, 17])
def test_mlp_with_biases_either_linear_formula(k, kernel, rows, folded, monkeypatch):
    """⟨a aᵀ, Δ_k Δ_lᵀ⟩ (tasks in chunks of K/8) and the weight rows in slices of output units
    (17 tasks: ragged chunks and slices), both forced on the same MLP. In chunks the middle
    layer's Δ (9 × 8 per task) is kept, the others' weight rows (smaller than 9 × out)."""
    monkeypatch.setattr(gt, "_kernel_is_cheaper", lambda *shape: kernel)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, k)).double()
    x = torch.randn(9, 6, dtype=torch.float64)
    _check(model, lambda: _mse(model(x)), folded, [model[4], model[2], model[0]], rows=rows)


def test_large_batch_takes_the_output_slices(folded, monkeypatch):
    """N = 600 rows against a 8 → 6 layer: the weight-row slices are the cheaper product, and exact."""
    chosen, real = [], gt._kernel_is_cheaper
    monkeypatch.setattr(gt, "_kernel_is_cheaper", lambda *shape: chosen.append(real(*shape)) or chosen[-1])
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 4)).double()
    x = torch.randn(600, 8, dtype=torch.float64)
    _check(model, lambda: _mse(model(x)), folded, [model[2], model[0]])
    assert chosen == [False, False]


@pytest.mark.parametrize("rows", CHUNKS)
def test_conv2d_groups_stride_padding_dilation(rows, folded):
    """A grouped convolution (the whole weight at once) with asymmetric stride, padding and
    dilation, then an ungrouped one whose 5 output channels split into ragged slices for K = 3.
    In chunks the first keeps its weight rows (72 < 576 Δ entries per task), the second its Δ."""
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
    _check(model, lambda: _mse(model(x) @ head), folded, [model[2], model[0]], rows=rows)


@pytest.mark.parametrize("rows", CHUNKS)
def test_conv1d_without_bias(rows, folded):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Conv1d(3, 4, 5, stride=2, padding=2, bias=False), nn.Tanh(), nn.Flatten()).double()
    x = torch.randn(5, 3, 11, dtype=torch.float64)
    head = torch.randn(4 * 6, 5, dtype=torch.float64)
    _check(model, lambda: _mse(model(x) @ head), folded, [model[0]], rows=rows)


@pytest.mark.parametrize("rows", CHUNKS)
def test_a_layer_called_twice_in_one_forward(rows, folded):
    """A Linear applied to its own output, and a convolution applied at two input sizes: each
    layer's calls add up in the weight's gradient, so their cross terms are in G."""
    torch.manual_seed(4)
    lin, conv = nn.Linear(5, 5).double(), nn.Conv2d(2, 4, 3, padding=1).double()
    model = nn.ModuleList([lin, conv])
    x, small, big = (torch.randn(*s, dtype=torch.float64) for s in ((6, 5), (2, 2, 4, 4), (2, 2, 6, 6)))

    def forward():
        z = lin(torch.tanh(lin(x)))
        c = conv(small).mean((2, 3)) + conv(big)[..., 1:5, 1:5].mean((2, 3))  # [2, 4]
        return torch.cat([_mse(z), _mse(c)])

    _check(model, forward, folded, [conv, lin], rows=rows)


@pytest.mark.parametrize("rows", CHUNKS)
def test_a_call_the_losses_do_not_use_adds_nothing(rows, folded):
    """Two forwards inside one ``with tape:``, the losses built from the second only."""
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).double()
    x1, x2 = torch.randn(2, 7, 4, dtype=torch.float64)

    def forward():
        model(x1)
        return _mse(model(x2))

    _check(model, forward, folded, [model[2], model[0]], rows=rows)


@pytest.mark.parametrize("rows", CHUNKS)
def test_parameters_outside_recorded_layers_go_through_blocks(rows, folded):
    """LayerNorm's weight and bias and a loose scale are not recorded: their [K, p] blocks join
    the recorded layers' terms."""
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(5, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 5)).double()
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.normal_()
    scale = nn.Parameter(torch.tensor([0.7, -1.3, 0.4, 2.0, -0.6], dtype=torch.float64))
    x = torch.randn(6, 5, dtype=torch.float64)
    params = [*model.parameters(), scale]
    _check(model, lambda: _mse(model(x) * scale), folded, [model[3], model[0]], params=params, rows=rows)


def _tied_net():
    torch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3)).double()


@pytest.mark.parametrize("rows", [None, 2])
def test_a_weight_used_outside_its_layer_is_refused_and_gramian_true_is_exact(rows):
    model = _tied_net()
    x = torch.randn(5, 4, dtype=torch.float64)
    tape = GramianTape(model, rows=rows)
    with tape:
        losses = _mse(model(x) + x @ model[0].weight[:3].T)  # the first weight used again by hand
    with pytest.raises(ValueError, match=r"^gramian=tape: the losses use the weight or bias of layer 0 \(Linear\)"):
        morl.backward(losses, model, build("upgrad"), gramian=tape)
    assert all(p.grad is None for p in model.parameters())
    params = list(model.parameters())
    torch.testing.assert_close(streamed_gramian(losses, params), _reference(losses, params), rtol=1e-10, atol=0)


@pytest.mark.parametrize("rows", [None, 2])
def test_two_layers_sharing_one_weight_are_refused(rows):
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)).double()
    model[2].weight = model[0].weight
    tape = GramianTape(model, rows=rows)
    with tape:
        losses = _mse(model(torch.randn(5, 4, dtype=torch.float64)))
    with pytest.raises(ValueError, match="outside the calls recorded in the latest `with tape:`"):
        streamed_gramian(losses, list(model.parameters()), tape)


@pytest.mark.parametrize("rows", [None, 2])
def test_misuse_gets_one_error_naming_the_fix(rows):
    model = _tied_net()
    x = torch.randn(5, 4, dtype=torch.float64)
    agg = build("mgda")
    never_entered = GramianTape(model, rows=rows)
    with pytest.raises(ValueError, match=r"recorded no call .* inside `with tape:`, or pass gramian=True$"):
        morl.backward(_mse(model(x)), model, agg, gramian=never_entered)
    tape = GramianTape(model, rows=rows)
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


@pytest.mark.parametrize("rows", [0, -3, 2.0, "4", True])
def test_rows_must_be_a_positive_int_or_none(rows):
    with pytest.raises(ValueError, match=r"^GramianTape: rows must be an int >= 1 .* or None, got "):
        GramianTape(nn.Linear(2, 2), rows=rows)


def test_chunks_hold_the_output_gradients_of_c_objectives_not_k():
    """Memory, counted as the largest tensor created: a convolution whose output gradient per
    objective (4 × 8 × 16 × 16) is larger than its weight. One pass holds it for all K = 7
    objectives; chunks of 2 for two at a time, and keep its weight rows [K, 144] across chunks."""
    torch.manual_seed(8)
    k, delta = 7, 4 * 8 * 16 * 16
    model = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 256, k)).double()
    x = torch.randn(4, 2, 16, 16, dtype=torch.float64)
    largest = {}
    for rows in (None, 2):
        tape = GramianTape(model, rows=rows)
        with tape:
            losses = _mse(model(x))
        with _LargestTensor() as seen:
            gram = streamed_gramian(losses, list(model.parameters()), tape)
        largest[rows] = seen.largest
        params = list(model.parameters())
        torch.testing.assert_close(gram, _reference(losses, params), rtol=1e-10, atol=0)
    assert largest[None] == k * delta
    assert largest[2] <= max(2 * delta, model[3].weight.numel())


def test_morl_backward_in_chunks_gives_the_rows_path_direction():
    """``morl.backward(..., gramian=GramianTape(model, rows=2))`` writes the [K, D] path's UPGrad
    direction into ``.grad``."""
    torch.manual_seed(9)
    model = nn.Sequential(nn.Conv1d(2, 3, 3, padding=1), nn.Tanh(), nn.Flatten(), nn.Linear(3 * 6, 5)).double()
    x = torch.randn(4, 2, 6, dtype=torch.float64)
    expected = morl.backward(_mse(model(x)), model, build("upgrad"))
    model.zero_grad(set_to_none=True)
    tape = GramianTape(model, rows=2)
    with tape:
        losses = _mse(model(x))
    direction = morl.backward(losses, model, build("upgrad"), gramian=tape)
    assert float(expected.abs().max()) > 1e-3
    torch.testing.assert_close(direction, expected, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(torch.cat([p.grad.reshape(-1) for p in model.parameters()]), expected)
