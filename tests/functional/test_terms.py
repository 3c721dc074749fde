"""compat.functional against hand-computed values and explicit Python loops (never the same
tensor formula): HOC's two variants, BCT's influence and kd terms, regression, KD, contrastive,
UniBCT's prototypes, the d-Simplex."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from compat import functional as CF
from compat.models.heads import create_head

E = math.e


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def lse(values):
    return math.log(sum(math.exp(v) for v in values))


def hoc_loop(new, old, labels, mu, variant):
    """HOC's loss row by row: the reference code's and InfoNCE with same-class negatives masked."""
    new, old = [unit(r) for r in new], [unit(r) for r in old]
    total = 0.0
    for i in range(len(labels)):
        s = [mu * dot(old[i], new[j]) for j in range(len(labels))]
        if variant == "reference":
            kept = [0.0 if labels[j] == labels[i] else s[j] for j in range(len(labels))]
        else:
            kept = [s[j] for j in range(len(labels)) if j == i or labels[j] != labels[i]]
        total += -s[i] + lse(kept)
    return total / len(labels)


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


# -- hoc ---------------------------------------------------------------------------------------

NEW = [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
OLD = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
LABELS = [0, 0, 1]
# S = <old_i, new_j> (mu = 1) = [[1, 0, 0], [1, 0, 0], [0, 1, 1]], rows 0 and 1 of class 0.
# reference: S' = [[0, 0, 0], [0, 0, 0], [0, 1, 0]]; L_i = -S_ii + log sum_j exp(S'_ij)
HAND_REFERENCE = ((math.log(3) - 1) + math.log(3) + (math.log(2 + E) - 1)) / 3
# standard: row 0 keeps j in {0, 2}, row 1 keeps {1, 2}, row 2 keeps {0, 1, 2}
HAND_STANDARD = ((math.log(E + 1) - 1) + math.log(2) + (math.log(1 + 2 * E) - 1)) / 3


@pytest.mark.parametrize(
    ("variant", "hand"), [("reference", HAND_REFERENCE), ("standard", HAND_STANDARD)]
)
def test_hoc_variants_by_hand(variant, hand):
    got = CF.hoc_infonce(t(NEW), t(OLD), torch.tensor(LABELS), mu=1.0, variant=variant)
    assert got.item() == pytest.approx(hand, rel=1e-6)  # float32
    assert hoc_loop(NEW, OLD, LABELS, 1.0, variant) == pytest.approx(hand, rel=1e-12)


def test_hoc_reference_keeps_the_positive_out_of_the_denominator():
    # one image per class, new = old: S = mu I. reference: -mu + log(n e^0); standard keeps e^mu
    n, mu = 3, 10.0
    eye = torch.eye(n, dtype=torch.float64)
    ref = CF.hoc_infonce(eye, eye, torch.arange(n), mu=mu)  # default variant: reference
    assert ref.item() == pytest.approx(-mu + math.log(n), rel=1e-6)  # the diagonal became 0
    std = CF.hoc_infonce(eye, eye, torch.arange(n), mu=mu, variant="standard")
    assert std.item() == pytest.approx(-mu + math.log(math.exp(mu) + n - 1), abs=1e-6)


def test_hoc_matches_the_loop_on_random_batches_and_normalises():
    g = torch.Generator().manual_seed(0)
    new = torch.randn(7, 4, generator=g, dtype=torch.float64) * 3
    old = torch.randn(7, 4, generator=g, dtype=torch.float64)
    labels = torch.tensor([0, 1, 0, 2, 1, 1, 3])
    for variant in ("reference", "standard"):
        got = CF.hoc_infonce(new, old, labels, mu=10.0, variant=variant).item()
        want = hoc_loop(new.tolist(), old.tolist(), labels.tolist(), 10.0, variant)
        assert got == pytest.approx(want, rel=1e-6)


# -- bct ---------------------------------------------------------------------------------------

W = [[1.0, 0.0], [0.0, 2.0]]
B = [0.5, -0.5]


def ce(logits, target):
    return -logits[target] + lse(logits)


def test_bct_influence_with_a_weight_matrix_a_linear_and_a_head():
    new = torch.tensor([[1.0, 1.0, 9.0], [2.0, -1.0, 9.0], [0.0, 1.0, 9.0]])  # 3rd coord: cut
    labels = torch.tensor([0, 1, -1])  # the last sample's class has no old row: dropped
    hand = (ce([1.0, 2.0], 0) + ce([2.0, -2.0], 1)) / 2
    got = CF.bct_influence(new, labels, torch.tensor(W))
    assert got.item() == pytest.approx(hand, rel=1e-6)
    fc = nn.Linear(2, 2)
    with torch.no_grad():
        fc.weight.copy_(torch.tensor(W))
        fc.bias.copy_(torch.tensor(B))
    hand_b = (ce([1.5, 1.5], 0) + ce([2.5, -2.5], 1)) / 2
    assert CF.bct_influence(new, labels, fc).item() == pytest.approx(hand_b, rel=1e-6)
    assert CF.bct_influence(new, labels, torch.tensor(W), bias=torch.tensor(B)).item() == (
        pytest.approx(hand_b, rel=1e-6)
    )
    cos = create_head("cosface", 2, 2, s=2.0, m=0.5)  # a margin head keeps its margin
    with torch.no_grad():
        cos.weight.copy_(torch.eye(2))
    r = math.sqrt(0.5)
    hand_c = (
        ce([2 * (r - 0.5), 2 * r], 0) + ce([2 * 2 / math.sqrt(5), 2 * (-1 / 5**0.5 - 0.5)], 1)
    ) / 2
    assert CF.bct_influence(new, labels, cos).item() == pytest.approx(hand_c, rel=1e-5)
    none = CF.bct_influence(new[2:], labels[2:], torch.tensor(W))
    assert none.item() == 0.0
    past = CF.bct_influence(new, torch.tensor([0, 1, 7]), torch.tensor(W))  # 7: no such row
    assert past.item() == pytest.approx(hand, rel=1e-6)


def kl(p_logits, q_logits, temp=1.0):
    zp, zq = lse([v / temp for v in p_logits]), lse([v / temp for v in q_logits])
    p = [math.exp(v / temp - zp) for v in p_logits]
    return temp**2 * sum(
        pi * ((a / temp - zp) - (b / temp - zq))
        for pi, a, b in zip(p, p_logits, q_logits, strict=True)
    )


def test_bct_kd_influence_for_old_classes_and_kd_for_new_ones():
    new = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    old = torch.tensor([[0.0, 0.0], [1.0, 0.0]])
    labels = torch.tensor([1, 5])  # 5: a new class, not a row of the 2-row classifier
    for temp in (1.0, 3.0):
        got = CF.bct_kd(new, old, labels, torch.tensor(W), temperature=temp)
        hand = (ce([1.0, 2.0], 1) + kl([1.0, 0.0], [0.0, 2.0], temp)) / 2
        assert got.item() == pytest.approx(hand, rel=1e-6)
    # old_classes: rows at and past it are new classes (synthesized or pre-allocated rows)
    only_kd = CF.bct_kd(new, old, torch.tensor([1, 1]), torch.tensor(W), old_classes=1)
    assert only_kd.item() == pytest.approx(
        (kl([0.0, 0.0], [1.0, 2.0]) + kl([1.0, 0.0], [0.0, 2.0])) / 2, rel=1e-6
    )
    teacher = torch.tensor([[0.0, 0.0], [1.0, 0.0]])  # precomputed teacher logits
    same = CF.bct_kd(new, None, torch.tensor([-1, -1]), torch.tensor(W), teacher_logits=teacher)
    assert same.item() == pytest.approx(only_kd.item(), rel=1e-6)


def test_synthesized_rows_are_normalised_class_means():
    old = torch.tensor([[2.0, 0.0], [0.0, 3.0], [0.0, -1.0]])
    rows = CF.synthesized_rows(old, torch.tensor([0, 0, 1]), 2, norm=2.0)
    r = math.sqrt(0.5)
    assert torch.allclose(rows, torch.tensor([[2 * r, 2 * r], [0.0, -2.0]]), atol=1e-6)


# -- regression, kd, contrastive ----------------------------------------------------------------


def test_l2_and_kd_by_hand():
    assert CF.l2(t([[2.0, 0.0]]), t([[0.0, 3.0]])).item() == pytest.approx(1.0)
    assert CF.l2(t([[2.0, 0.0]]), t([[0.0, 3.0]]), normalize=False).item() == pytest.approx(6.5)
    assert CF.l2(t([[1.0, 0.0, 7.0]]), t([[1.0, 0.0]])).item() == pytest.approx(0.0)
    got = CF.kd(t([[0.0, 2.0]]), t([[2.0, 0.0]]), temperature=2.0)
    assert got.item() == pytest.approx(kl([2.0, 0.0], [0.0, 2.0], 2.0), rel=1e-6)


def test_contrastive_by_hand():
    new = t([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    old = t([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    labels = torch.tensor([0, 1, 0])
    tau = 0.5
    # row i: anchor new_i against old_j, j = i or another class; logits <n_i, o_j> / tau
    rows = [
        -2.0 + lse([2.0, 2.0]),  # j in {0, 1}; j = 2 (same class) masked
        -0.0 + lse([0.0, 0.0, 2.0]),  # every j: row 1 is the only class-1 sample
        -0.0 + lse([2.0, 0.0]),  # j in {1, 2}
    ]
    got = CF.contrastive(new, old, labels, tau=tau)
    assert got.item() == pytest.approx(sum(rows) / 3, rel=1e-6)


# -- prototypes ---------------------------------------------------------------------------------


def test_unibct_prototypes_vanilla_and_refined():
    old = t([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    labels = torch.tensor([0, 0, 0, 0, 1])
    vanilla = CF.unibct_prototypes(old, labels, 3, refine=False)
    assert torch.allclose(vanilla[0], t([3.0, 1.0]) / math.sqrt(10))
    assert torch.allclose(vanilla[1], t([0.0, 1.0]))
    assert torch.equal(vanilla[2], t([0.0, 0.0]))  # absent class
    # the new model places the 4th sample of class 0 far from the others: it weighs less
    new = t([[1.0, 0.0], [1.0, 0.05], [1.0, -0.05], [0.0, 1.0], [0.0, 1.0]])
    refined = CF.unibct_prototypes(old, labels, 3, new=new, lambda_r=0.9, tau=0.05)
    assert refined[0][1] / refined[0][0] < 0.5 * (vanilla[0][1] / vanilla[0][0])
    assert torch.allclose(refined[1], t([0.0, 1.0]))


# -- d-Simplex ----------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 5])
def test_dsimplex_vertices_and_logits(k):
    v = CF.dsimplex_vertices(k, dtype=torch.float64)
    assert v.shape == (k, k - 1)
    for i in range(k):
        assert math.isclose(dot(v[i].tolist(), v[i].tolist()), 1.0, rel_tol=1e-9)
        for j in range(i + 1, k):
            assert math.isclose(dot(v[i].tolist(), v[j].tolist()), -1 / (k - 1), rel_tol=1e-6)
    z = 3.0 * v[:1].float()  # unnormalised: logits scale with |z|
    logits = CF.dsimplex_logits(z)
    assert logits.shape == (1, k)
    assert logits[0, 0].item() == pytest.approx(3.0, rel=1e-6)
    assert logits[0, 1:].tolist() == pytest.approx([-3.0 / (k - 1)] * (k - 1), rel=1e-5)
    # the head's default form computes the same logits
    head = create_head("dsimplex", k - 1, k)
    assert torch.allclose(head(z), logits)
