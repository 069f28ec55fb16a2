"""dropout-alpha (Li & Gal 2017): the objective's limits, the masks, folding, training."""
import math

import pytest
import torch
import torch.nn.functional as F

import uncertain_agents as ua
from uncertain_agents.objectives import alpha_dropout_loss
from uncertain_agents.posteriors import Batch

ALPHAS = [-1.0, 0.0, 0.25, 0.5, 1.0, 2.0]


def make(likelihood="gaussian", out_dim=1, **kw):
    return ua.make_posterior("dropout-alpha", in_dim=3, out_dim=out_dim, hidden=(16, 8),
                             likelihood=likelihood, seed=0, **kw)


def loglik_table(k=10, b=32, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return -3.0 * torch.rand(k, b, generator=g, dtype=dtype) - torch.randn(k, b, generator=g, dtype=dtype).abs()


def batch_of(post, x, y, n_data=1000):
    return Batch(x, y, None, torch.arange(x.shape[0]), n_data, x)


# ------------------------------------------------------------------ the objective
@pytest.mark.parametrize("alpha", ALPHAS)
def test_one_sample_gives_plain_loss_for_any_alpha(alpha):
    ll = loglik_table(k=1)
    assert torch.allclose(alpha_dropout_loss(ll, alpha), -ll.mean(), atol=1e-12)


def test_alpha_to_zero_gives_mean_nll_over_samples():
    ll = loglik_table()
    mc_dropout = -ll.mean()
    assert alpha_dropout_loss(ll, 0.0) == mc_dropout
    gaps = [float((alpha_dropout_loss(ll, a) - mc_dropout).abs()) for a in (1e-2, 1e-4, 1e-6)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-6  # O(α) convergence
    # the cancellation-free form is accurate in float32 too (the naive form is not)
    ll32 = ll.float()
    assert abs(float(alpha_dropout_loss(ll32, 1e-6) - (-ll32.mean()))) < 1e-4


def test_alpha_one_is_minus_log_mean_likelihood():
    ll = loglik_table()
    expected = -torch.log(ll.exp().mean(0)).mean()
    assert torch.allclose(alpha_dropout_loss(ll, 1.0), expected, atol=1e-12)


def test_loss_matches_definition_and_stays_finite_for_large_loglik():
    ll = loglik_table() * 200.0  # exp(ll) underflows: a log of a mean of exps would be -inf
    for alpha in (0.5, 1.0, 3.0):
        expected = -((torch.logsumexp(alpha * ll, 0) - math.log(ll.shape[0])) / alpha).mean()
        value = alpha_dropout_loss(ll.float(), alpha)
        assert torch.isfinite(value) and torch.allclose(value.double(), expected, rtol=1e-5)


def test_loss_is_non_increasing_in_alpha_for_fixed_masks(regression_data):
    x, y = regression_data
    post = make()
    batch = batch_of(post, x, y)
    losses = []
    for alpha in [-2.0, -1.0, -0.5, 0.0, 1e-3, 0.25, 0.5, 1.0, 2.0, 4.0]:
        post.alpha = alpha
        with torch.no_grad():
            losses.append(float(post.loss(batch, torch.Generator().manual_seed(7))))
    assert all(a >= b - 1e-6 for a, b in zip(losses, losses[1:]))
    assert losses[0] > losses[-1]  # strictly, as the K passes differ


def test_one_pass_classification_is_cross_entropy_plus_weight_decay(regression_data):
    x, _ = regression_data
    labels = (x[:, 0] > 0).long()
    post = make("categorical", out_dim=2, train_samples=1)
    batch = Batch(x, labels, None, torch.arange(64), 500, x)
    for alpha in (0.0, 0.5, 1.0):
        post.alpha = alpha
        loss = post.loss(batch, torch.Generator().manual_seed(3))
        keep = post.draw_keep((1, 64), torch.Generator().manual_seed(3))
        logits = post.masked_forward(x, keep)[0]
        expected = F.cross_entropy(logits, labels) + post.weight_decay(500)
        assert torch.allclose(loss, expected, atol=1e-6)


def test_weight_decay_follows_length_scale():
    post = make(dropout=0.2, input_dropout=0.1, prior_std=0.5)
    n = 300
    expected = 0.0
    for (w, b), p in zip(post.spec.unflatten(post.params.unsqueeze(0)), (0.1, 0.2, 0.2)):
        expected += (1.0 / 0.5) ** 2 * (1 - p) / (2 * n) * w.square().sum()  # l = 1/prior_std
    assert torch.allclose(post.weight_decay(n), expected)
    with torch.no_grad():  # biases are not decayed
        for _, b in post.spec.unflatten(post.params.unsqueeze(0)):
            b.add_(5.0)
    assert torch.allclose(post.weight_decay(n), expected)


# --------------------------------------------------------------------- masks
def test_masks_are_inverted_dropout_with_the_configured_rates():
    post = make(dropout=0.3, input_dropout=0.1)
    masks = post.draw_masks((200, 50), torch.Generator().manual_seed(0))
    for m, p in zip(masks, (0.1, 0.3, 0.3)):
        values = torch.unique(m)
        assert torch.allclose(values, torch.tensor([0.0, 1.0 / (1 - p)]))
        assert abs(float((m == 0).float().mean()) - p) < 0.01
    assert make(input_dropout=0.0).draw_masks((2, 3), torch.Generator())[0] is None


@pytest.mark.parametrize("input_dropout", [0.1, 0.0])  # 0: the first layer runs once for all masks
def test_batched_passes_equal_one_pass_per_mask(input_dropout, regression_data):
    x, _ = regression_data
    post = make(input_dropout=input_dropout)
    keep = post.draw_keep((5, 64), torch.Generator().manual_seed(1))
    batched = post.masked_forward(x, keep)
    masks = post.draw_masks((5, 64), torch.Generator().manual_seed(1))  # the same draws as factors
    for k in range(5):  # reference only: one plain pass per mask set, inverted dropout by hand
        h = x
        for i, ((w, b), m) in enumerate(zip(post.spec.unflatten(post.params.unsqueeze(0)), masks)):
            h = h if i == 0 else torch.relu(h)
            h = h @ w[0] + b[0] if m is None else (h * m[k]) @ w[0] + b[0]
        assert torch.allclose(batched[k], h, atol=1e-5)


def test_sample_is_masks_folded_into_weights(regression_data):
    x, _ = regression_data
    post = make(dropout=0.5, input_dropout=0.2)
    masks = post.draw_masks((4,), torch.Generator().manual_seed(2))
    folded = post.spec.forward(post.fold(masks), (x - post.x_loc) / post.x_scale)
    keep = post.draw_keep((4,), torch.Generator().manual_seed(2))
    direct = post.masked_forward((x - post.x_loc) / post.x_scale, [m.unsqueeze(1) for m in keep])
    assert torch.allclose(folded, direct, atol=1e-5)


def test_function_sample_is_fixed_and_functions_differ(regression_data):
    x, y = regression_data
    post = make(dropout=0.2)
    post.fit(x, y, steps=20)
    fs = post.sample(6, generator=torch.Generator().manual_seed(0))
    first = fs(x)
    assert torch.equal(first, fs(x)) and torch.allclose(first[:, 5:9], fs(x[5:9]), atol=1e-6)
    assert not torch.allclose(first[0], first[1])
    again = post.sample(6, generator=torch.Generator().manual_seed(0))(x)
    assert torch.equal(first, again)


# ------------------------------------------------------------------ training
def test_fit_learns_and_predictive_has_epistemic_spread(regression_data):
    x, y = regression_data
    post = make(alpha=0.5)
    before = post.predict(x, n_samples=50, generator=torch.Generator().manual_seed(0))
    result = post.fit(x, y, steps=150, batch_size=32, lr=1e-2)
    after = post.predict(x, n_samples=50, generator=torch.Generator().manual_seed(0))
    assert result.losses[-30:].mean() < result.losses[:30].mean()
    assert after.log_prob(y).mean() > before.log_prob(y).mean()
    assert bool((after.epistemic_variance > 0).all())


def test_fixed_noise_is_not_learned(regression_data):
    x, y = regression_data
    post = make(noise_std=0.3)
    assert all(p is not post.likelihood.log_noise_std for p in post.parameters())
    post.fit(x, y * 4.0, steps=5)
    assert torch.allclose(post.sample(3).noise_std, torch.full((3, 1), 0.3))


def test_save_load_keeps_options(regression_data, tmp_path):
    x, y = regression_data
    post = make(alpha=1.0, dropout=0.25, input_dropout=0.0, train_samples=3)
    post.fit(x, y, steps=5)
    post.save(tmp_path / "d.pt")
    same = ua.load_posterior(tmp_path / "d.pt")
    assert (same.alpha, same.rates, same.train_samples) == (1.0, (0.0, 0.25, 0.25), 3)
    g = lambda: torch.Generator().manual_seed(4)
    assert torch.equal(post.sample(3, generator=g())(x), same.sample(3, generator=g())(x))


@pytest.mark.parametrize("option, value, match", [
    ("alpha", float("nan"), "alpha"), ("alpha", "half", "alpha"), ("dropout", 1.0, "dropout"),
    ("dropout", -0.1, "dropout"), ("input_dropout", 1.5, "input_dropout"),
    ("train_samples", 0, "train_samples"), ("prior_std", -1.0, "prior_std"),
])
def test_bad_options_are_named(option, value, match):
    with pytest.raises(ValueError, match=match):
        make(**{option: value})


def test_defaults_documented():
    post = ua.make_posterior("dropout-alpha", in_dim=13, out_dim=1, hidden=(50,), alpha=0.5)
    assert post.train_samples == 10 and post.rates == (post.input_dropout, post.dropout)
    assert torch.allclose(post.prior_std, 1 / post.spec.fan_in_per_param().sqrt())


# ------------------------------------------------------------------ keep masks
@pytest.mark.parametrize("keep,bits", [(0.5, 1), (0.75, 2), (0.9375, 4), (0.5 + 1 / 256, 8), (0.95, 16), (0.9, 16)])
def test_keep_masks_use_the_fewest_bits_and_the_right_rate(keep, bits):
    from uncertain_agents.posteriors.masks import bits_per_mask, keep_masks
    assert bits_per_mask(keep) == bits
    g = torch.Generator().manual_seed(0)
    m = keep_masks((400, 1001), keep, g)                     # 400,400 entries: s.e. of the rate < 8e-4
    assert m.dtype == torch.bool and m.shape == (400, 1001)
    assert abs(m.float().mean().item() - keep) < 4e-3
    # entries are independent: neighbours agree as often as two independent draws would
    agree = (m[:, 1:] == m[:, :-1]).float().mean().item()
    assert abs(agree - (keep**2 + (1 - keep) ** 2)) < 5e-3
    again = keep_masks((400, 1001), keep, torch.Generator().manual_seed(0))
    assert torch.equal(m, again)                             # seeded


def test_keep_masks_edges_and_bad_rates():
    from uncertain_agents.posteriors.masks import keep_masks
    g = torch.Generator().manual_seed(0)
    assert keep_masks((3, 5), 1.0, g).all()
    assert keep_masks((0, 5), 0.5, g).shape == (0, 5)
    assert keep_masks((7,), 0.3, g).shape == (7,)
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="keep"):
            keep_masks((3,), bad, g)


@pytest.mark.parametrize("keep", [0.95, 0.9, 0.999, 0.88, 1 - 3 / 256, 1 - 1e-4])  # 16 and 8 bits; float64 gaps
def test_long_masks_with_low_drop_rates_are_drawn_by_skipping_with_the_right_law(keep, monkeypatch):
    import uncertain_agents.posteriors.masks as masks

    drop, n = 1.0 - keep, 2_000_000
    calls = []
    real = masks._keep_masks_by_skipping
    monkeypatch.setattr(masks, "_keep_masks_by_skipping", lambda *a: calls.append(a) or real(*a))
    m = masks.keep_masks((40, n // 40), keep, torch.Generator().manual_seed(0))
    assert calls and m.dtype == torch.bool and m.shape == (40, n // 40)
    flat = m.reshape(-1)
    se = (drop * keep / n) ** 0.5
    assert abs((~flat).float().mean().item() - drop) < 5 * se            # the drop rate
    dropped = (~flat).nonzero().flatten()
    gaps = (dropped[1:] - dropped[:-1]).double()
    # gaps between drops are geometric: P(gap = 1) = p, mean 1/p (neighbours independent)
    n_gaps = len(gaps)
    assert abs((gaps == 1).double().mean().item() - drop) < 5 * (drop * keep / n_gaps) ** 0.5
    assert abs(gaps.mean().item() - 1 / drop) < 5 * (keep ** 0.5 / drop) / n_gaps ** 0.5
    again = masks.keep_masks((40, n // 40), keep, torch.Generator().manual_seed(0), dtype=torch.float32)
    assert again.dtype == torch.float32 and torch.equal(again, m.float())  # seeded; floats are the same draws


def test_skipped_masks_drop_their_first_and_last_entries_at_the_rate():
    from uncertain_agents.posteriors.masks import SKIP_MIN_ENTRIES, keep_masks

    drop, n_masks = 0.1, 1500
    g = torch.Generator().manual_seed(6)
    ends = torch.stack([~keep_masks((SKIP_MIN_ENTRIES,), 1 - drop, g)[[0, 1, -1]] for _ in range(n_masks)])
    se = (drop * (1 - drop) / n_masks) ** 0.5                               # 0.0077
    for rate in ends.double().mean(0).tolist():                            # entries 0, 1 and the last
        assert abs(rate - drop) < 5 * se


def test_skipping_continues_where_a_round_of_gaps_ends(monkeypatch):
    import uncertain_agents.posteriors.masks as masks

    n, keep = 400_000, 0.95
    whole = masks.keep_masks((n,), keep, torch.Generator().manual_seed(3))
    # 8 gaps a round use 4 random words each, the same words one long round uses: the same mask
    monkeypatch.setattr(masks, "gaps_per_round", lambda remaining, drop: 8)
    in_rounds = masks.keep_masks((n,), keep, torch.Generator().manual_seed(3))
    assert torch.equal(in_rounds, whole) and int((~whole).sum()) > 19_000


def test_skipping_honours_tiny_drop_rates_that_16_bits_would_round(monkeypatch):
    import uncertain_agents.posteriors.masks as masks

    calls = []
    real = masks._keep_masks_by_skipping
    monkeypatch.setattr(masks, "_keep_masks_by_skipping", lambda *a: calls.append(a) or real(*a))
    drop, n = 5e-6, 4_000_000   # below 2⁻¹⁷: the 16-bit comparison would keep every entry
    g = torch.Generator().manual_seed(5)
    dropped = sum(int((~masks.keep_masks((n,), 1 - drop, g)).sum()) for _ in range(5))
    assert len(calls) == 5 and abs(dropped - 5 * n * drop) < 5 * (5 * n * drop) ** 0.5   # 100 ± 10
    # the smallest rate below 1: gaps of ~10¹⁶ entries (clipped at the mask's end before they are summed);
    # a drop among 4 million entries has probability 4·10⁻¹⁰
    extreme = masks.keep_masks((n,), 1 - 2**-53, g)
    assert extreme.shape == (n,) and bool(extreme.all())


def test_dropped_relu_matches_autograd_of_the_plain_expression():
    from uncertain_agents.posteriors.dropout_alpha import _DroppedReLU
    g = torch.Generator().manual_seed(0)
    z = torch.randn(3, 7, 5, generator=g, dtype=torch.float64, requires_grad=True)
    keep = torch.rand(3, 7, 5, generator=g) < 0.7
    upstream = torch.randn(3, 7, 5, generator=g, dtype=torch.float64)
    out = _DroppedReLU.apply(z, keep.double())
    (grad,) = torch.autograd.grad((out * upstream).sum(), z)
    ref = torch.where(keep, torch.relu(z), 0.0)
    (ref_grad,) = torch.autograd.grad((ref * upstream).sum(), z)
    assert torch.equal(out, ref) and torch.equal(grad, ref_grad)
    assert torch.autograd.gradcheck(lambda t: _DroppedReLU.apply(t, keep.double()), (z,))
