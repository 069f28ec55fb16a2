"""Closed forms of refined VI against exact Gaussian conditioning (foundation of ``refined-vi``)."""
import math

import pytest
import torch

from uncertain_agents.posteriors.refinement import (RefinementSchedule, auxiliary_marginal,
                                                     conditional_posterior, gaussian_kl)


def condition(mean, cov, observed, values):
    """Exact Gaussian conditioning: the law of the unobserved coordinates given the observed."""
    n = mean.shape[0]
    hidden = [i for i in range(n) if i not in observed]
    o, h = torch.tensor(observed), torch.tensor(hidden)
    gain = cov[h][:, o] @ torch.linalg.inv(cov[o][:, o])
    return mean[h] + gain @ (values - mean[o]), cov[h][:, h] - gain @ cov[o][:, h]


def prior_conditional_of_ak(k, var_as, rest, w, a_prev):
    """p(a_k | w, a_1..a_{k-1}) from the joint prior of (a_1, ..., a_K, remainder), by conditioning.

    Returns the linear law a_k = c0 + c1 * w + N(0, var)."""
    K = len(var_as)
    variances = torch.tensor([*var_as, rest], dtype=torch.float64)
    # coordinates: (w, a_1, ..., a_K) as a linear map of the independent parts
    A = torch.zeros(K + 1, K + 1, dtype=torch.float64)
    A[0, :] = 1.0
    for j in range(K):
        A[j + 1, j] = 1.0
    cov = A @ torch.diag(variances) @ A.T
    mean = torch.zeros(K + 1, dtype=torch.float64)
    observed = [0] + list(range(1, k))  # w and a_1..a_{k-1}
    def at(wv):
        m, c = condition(mean, cov, observed, torch.tensor([wv, *a_prev], dtype=torch.float64))
        keep = [i for i in range(K + 1) if i not in observed].index(k)
        return m[keep], c[keep, keep]
    m0, var = at(0.0)
    m1, _ = at(1.0)
    return m0, m1 - m0, var


@pytest.mark.parametrize("seed", range(5))
def test_closed_forms_equal_exact_conditioning_at_every_step(seed):
    g = torch.Generator().manual_seed(seed)
    prior_var = float(torch.rand((), generator=g, dtype=torch.float64)) * 2 + 0.1
    schedule = RefinementSchedule()
    var_as = [r * prior_var for r in schedule.ratios]
    rest = prior_var * schedule.remaining()[-1]
    a_prev = []
    mean = torch.randn((), generator=g, dtype=torch.float64)
    var = torch.rand((), generator=g, dtype=torch.float64) * prior_var + 1e-3
    for k in range(1, schedule.steps + 1):
        offset = torch.tensor(sum(a_prev), dtype=torch.float64)
        r_prev = torch.tensor(prior_var * schedule.remaining()[k - 1], dtype=torch.float64)
        var_a = torch.tensor(var_as[k - 1], dtype=torch.float64)
        c0, c1, c_var = prior_conditional_of_ak(k, var_as, rest, 0.0, a_prev)
        # joint of (w, a_k) under q(w) p(a_k | w, a_<k)
        jm = torch.stack([mean, c0 + c1 * mean])
        jc = torch.tensor([[var, c1 * var], [c1 * var, c1 * c1 * var + c_var]], dtype=torch.float64)
        qa_mean, qa_var = auxiliary_marginal(mean, var, offset, r_prev, var_a)
        assert torch.allclose(qa_mean, jm[1], atol=1e-10) and torch.allclose(qa_var, jc[1, 1], atol=1e-10)
        a = qa_mean + qa_var.sqrt() * torch.randn((), generator=g, dtype=torch.float64)
        exact_mean, exact_var = condition(jm, jc, [1], a.reshape(1))
        new_mean, new_var = conditional_posterior(mean, var, a, offset, r_prev, var_a)
        assert torch.allclose(new_mean, exact_mean[0], atol=1e-10)
        assert torch.allclose(new_var, exact_var[0, 0], atol=1e-10)
        a_prev.append(float(a))
        mean, var = new_mean, new_var + 0.1 * torch.rand((), generator=g, dtype=torch.float64)  # "optimised"


def test_first_step_is_the_papers_appendix_a():
    mu, s2, sw2, sa1 = torch.tensor(0.7), torch.tensor(0.3), torch.tensor(2.0), torch.tensor(1.4)
    sa2 = sw2 - sa1
    m, v = auxiliary_marginal(mu, s2, torch.tensor(0.0), sw2, sa1)
    assert torch.allclose(m, mu * sa1 / sw2) and torch.allclose(v, s2 * sa1**2 / sw2**2 + sa1 * sa2 / sw2)
    a1 = torch.tensor(-0.4)
    m, v = conditional_posterior(mu, s2, a1, torch.tensor(0.0), sw2, sa1)
    den = s2 * sa1 + sw2 * sa2
    assert torch.allclose(m, (a1 * s2 * sw2 + mu * sa2 * sw2) / den)
    assert torch.allclose(v, s2 * sw2 * sa2 / den)


def test_closed_forms_broadcast_over_members():
    """Members [M, D] against per-weight prior variances [D]: every entry is the scalar closed form
    of its own member and weight (appendix A at step 1), no mixing across rows or columns."""
    g = torch.Generator().manual_seed(0)
    mean = torch.randn(10, 7, generator=g, dtype=torch.float64)
    var = torch.rand(10, 7, generator=g, dtype=torch.float64) + 0.1
    sw2 = torch.rand(7, generator=g, dtype=torch.float64) + 1.5       # a different prior per weight
    sa1 = 0.7 * sw2
    a1 = torch.randn(10, 7, generator=g, dtype=torch.float64)
    zero = torch.zeros(10, 7, dtype=torch.float64)
    m, v = auxiliary_marginal(mean, var, zero, sw2, sa1)
    cm, cv = conditional_posterior(mean, var, a1, zero, sw2, sa1)
    assert m.shape == v.shape == cm.shape == cv.shape == (10, 7)
    sa2 = sw2 - sa1
    assert torch.allclose(m, mean * sa1 / sw2) and torch.allclose(v, var * sa1**2 / sw2**2 + sa1 * sa2 / sw2)
    den = var * sa1 + sw2 * sa2
    assert torch.allclose(cm, (a1 * var * sw2 + mean * sa2 * sw2) / den)
    assert torch.allclose(cv, var * sw2 * sa2 / den)
    for i, j in ((0, 0), (3, 6), (9, 2)):
        one_m, one_v = auxiliary_marginal(mean[i, j], var[i, j], zero[i, j], sw2[j], sa1[j])
        assert one_m == m[i, j] and one_v == v[i, j]


def test_schedule():
    s = RefinementSchedule()
    assert s.steps == 4
    assert [round(r, 6) for r in s.remaining()] == [1.0, 0.3, 0.09, 0.027, 0.0081]
    lrs = [s.learning_rate(k) for k in range(1, 5)]
    assert [round(v, 6) for v in lrs] == [round(1e-3 * 0.3 ** (k / 2), 6) for k in range(1, 5)]
    assert math.isclose(lrs[0], 5.477e-4, rel_tol=1e-3) and math.isclose(lrs[3], 9.0e-5, rel_tol=1e-9)
    with pytest.raises(ValueError, match="sum to less than 1"):
        RefinementSchedule((0.7, 0.3))
    with pytest.raises(ValueError, match="positive"):
        RefinementSchedule((0.5, -0.1))


def test_gaussian_kl():
    q = torch.distributions.Normal(torch.tensor(0.3), torch.tensor(0.5))
    p = torch.distributions.Normal(torch.tensor(-0.2), torch.tensor(1.5))
    assert torch.allclose(gaussian_kl(q.mean, q.variance, p.mean, p.variance),
                          torch.distributions.kl_divergence(q, p))
