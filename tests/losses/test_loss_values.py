"""Every method against a hand-computed value on tiny tensors (parent embeddings known exactly)."""

from __future__ import annotations

import math

import pytest
import torch
from loss_fakes import context, fake_card, pixel_parent, pixels

from compat.errors import BadInputError, UsageError
from compat.losses import LOSSES, Step, create_loss

R = math.sqrt(0.5)
HEAD_LOSS = torch.tensor(0.25)


def step(new, targets, old=None):
    return Step(
        new=torch.tensor(new, dtype=torch.float32),
        targets=torch.tensor(targets),
        head_loss=HEAD_LOSS,
        old=None if old is None else torch.tensor(old, dtype=torch.float32),
    )


def ce(logits, target):
    return -logits[target] + math.log(sum(math.exp(v) for v in logits))


def test_catalog():
    assert LOSSES.names() == [
        "bct", "bct-kd", "bict", "contrastive", "hoc", "independent", "l2", "lwf", "unibct",
    ]  # fmt: skip
    with pytest.raises(UsageError, match="known: bct, bct-kd"):
        create_loss("bcd")
    with pytest.raises(BadInputError, match="method l2: method_params: lamda: Extra inputs"):
        create_loss("l2", {"lamda": 1.0})
    with pytest.raises(BadInputError, match="new_classes"):
        create_loss("bct", {"new_classes": "invent"})


def test_independent_is_the_head_loss():
    parts = create_loss("independent")(step([[1.0, 0.0]], [0]))
    assert parts == {"head": HEAD_LOSS}


def test_l2_normalised_and_raw():
    parts = create_loss("l2", {"lam": 2.0})(step([[2.0, 0.0]], [0], [[0.0, 3.0]]))
    assert parts["l2"].item() == pytest.approx(2.0 * 0.5 * 2.0)
    raw = create_loss("l2", {"normalize": False})(step([[2.0, 0.0]], [0], [[0.0, 3.0]]))
    assert raw["l2"].item() == pytest.approx(0.5 * 13.0)


def test_l2_dim_mismatch():
    trunc = create_loss("l2")(step([[1.0, 0.0, 7.0]], [0], [[1.0, 0.0]]))
    assert trunc["l2"].item() == pytest.approx(0.0, abs=1e-7)
    pad = create_loss("l2", {"dim_mismatch": "pad"})(step([[1.0, 0.0]], [0], [[1.0, 0.0, 1.0]]))
    assert pad["l2"].item() == pytest.approx(0.5 * ((1 - R) ** 2 + R**2), rel=1e-5)


# -- bct ------------------------------------------------------------------------------------

OLD_W = [[1.0, 0.0], [0.0, 1.0]]


def bct_setup(params, dim=2):
    parent = pixel_parent(["a", "b"], OLD_W, s=2.0, m=0.5)
    images = pixels((0, 0), (0, 0), (255, 255), (255, 255))
    ctx = context(parent, ["a", "b", "c"], images, ["a", "b", "c", "c"], dim=dim)
    loss = create_loss("bct", params)
    loss.prepare(ctx)
    return loss, parent


def test_bct_synthesizes_new_classes_from_cached_parent_means():
    loss, parent = bct_setup({"lam": 0.5, "l2": 0.0})
    w = loss.old.head.weight
    assert torch.allclose(w[2], torch.tensor([R, R]), atol=1e-6)  # normalised mean of (1, 1)
    assert loss.old.old_index.tolist() == [0, 1, 2]
    assert parent.forward_calls == 1  # one un-augmented pass, over the new class's images only
    assert len(parent._cache["bct-synthesize"]) == 2
    parts = loss(step([[1.0, 0.0], [1.0, 0.0]], [2, 0]))
    ce_c = ce([2 * 1.0, 0.0, 2 * (R - 0.5)], 2)
    ce_a = ce([2 * (1.0 - 0.5), 0.0, 2 * R], 0)
    assert parts["influence"].item() == pytest.approx(0.5 * (ce_c + ce_a) / 2, rel=1e-5)
    assert parts["head"] is HEAD_LOSS
    assert loss.describe()["method_params"]["synthesized_classes"] == 1


def test_bct_drop_leaves_new_classes_out_and_never_runs_the_parent():
    loss, parent = bct_setup({"new_classes": "drop", "l2": 0.0})
    assert parent.forward_calls == 0
    assert not loss.needs_parent_forward
    assert loss.old.old_index.tolist() == [0, 1, -1]
    parts = loss(step([[1.0, 0.0], [1.0, 0.0]], [2, 0]))
    assert parts["influence"].item() == pytest.approx(ce([2 * 0.5, 0.0], 0), rel=1e-5)
    only_new = loss(step([[1.0, 0.0]], [2]))
    assert only_new["influence"].item() == 0.0


def test_bct_dim_mismatch_truncate_and_pad():
    trunc, _ = bct_setup({"new_classes": "drop", "l2": 0.0}, dim=3)
    parts = trunc(step([[1.0, 0.0, 5.0]], [0]))
    assert parts["influence"].item() == pytest.approx(ce([2 * 0.5, 0.0], 0), rel=1e-5)
    pad, _ = bct_setup({"new_classes": "drop", "dim_mismatch": "pad", "l2": 0.0}, dim=3)
    c = 1 / math.sqrt(26)
    parts = pad(step([[1.0, 0.0, 5.0]], [0]))
    assert parts["influence"].item() == pytest.approx(ce([2 * (c - 0.5), 0.0], 0), rel=1e-5)


def test_bct_l2_alignment_term_by_hand():
    # Default weight 3: 3 * mean_i 0.5 * ||n(new_i) - n(old_i)||^2 (BCT Eq. 3, normalised).
    loss, _ = bct_setup({"new_classes": "drop"})
    assert loss.params.l2 == 3.0 and loss.needs_parent_forward
    parts = loss(step([[2.0, 0.0], [0.0, 1.0]], [0, 1], old=[[0.0, 5.0], [0.0, 1.0]]))
    assert parts["l2"].item() == pytest.approx(3.0 * (0.5 * 2.0 + 0.0) / 2, rel=1e-6)
    assert parts["influence"].item() == pytest.approx(
        (ce([2 * (1.0 - 0.5), 0.0], 0) + ce([0.0, 2 * (1.0 - 0.5)], 1)) / 2, rel=1e-5
    )
    # Widths: truncate compares the first d_old coordinates; pad zero-pads the old embedding.
    trunc, _ = bct_setup({"new_classes": "drop", "l2": 1.0}, dim=3)
    assert trunc(step([[1.0, 0.0, 9.0]], [0], old=[[1.0, 0.0]]))["l2"].item() == pytest.approx(
        0.0, abs=1e-7
    )
    pad, _ = bct_setup({"new_classes": "drop", "l2": 1.0, "dim_mismatch": "pad"}, dim=3)
    got = pad(step([[1.0, 0.0, 1.0]], [0], old=[[1.0, 0.0]]))["l2"].item()
    assert got == pytest.approx(1.0 - R, rel=1e-6)  # 0.5 ||a - b||^2 = 1 - cos(a, b)
    with pytest.raises(BadInputError, match="l2"):
        create_loss("bct", {"l2": -1.0})


def test_bct_against_dsimplex_parent_uses_preallocated_vertices():
    parent = pixel_parent(["a"], torch.zeros(3, 2), head="dsimplex", s=1.0, m=0.0)
    ctx = context(parent, ["a", "b", "c"], pixels((0, 0)), ["a"], dim=2)
    loss = create_loss("bct")
    loss.prepare(ctx)
    assert loss.old.old_index.tolist() == [0, 1, 2]
    assert parent.forward_calls == 0


@pytest.mark.parametrize("head", ["softmax", "linear"])
def test_bct_softmax_parent_synthesized_rows_match_old_norms(head):
    parent = pixel_parent(["a", "b"], [[2.0, 0.0], [0.0, 2.0]], head=head)
    ctx = context(parent, ["a", "b", "c"], pixels((255, 255)), ["c"], dim=2)
    loss = create_loss("bct")
    loss.prepare(ctx)
    assert torch.allclose(loss.old.head.fc.weight[2], torch.tensor([2 * R, 2 * R]), atol=1e-6)
    assert (loss.old.head.fc.bias is None) == (head == "linear")
    paper = create_loss("bct", {"synthesis": "mean"})
    paper.prepare(ctx)  # a bias-free head stays bias-free
    assert (paper.old.head.fc.bias is None) == (head == "linear")


def test_bct_paper_synthesis_is_the_plain_mean_with_bias_zero():
    """synthesis: mean (BCT Sec. 3.3, openBCT): the plain class mean of the parent's (unit)
    embeddings, neither re-normalised nor rescaled; a linear head's new bias is 0, not the old
    biases' mean."""
    parent = pixel_parent(["a", "b"], [[2.0, 0.0], [0.0, 2.0]], head="softmax")
    with torch.no_grad():
        parent.head.fc.bias.copy_(torch.tensor([0.5, 1.5]))
    # class c: embeddings (1, 1) / sqrt 2 and (1, -1) / sqrt 2: plain mean (R, 0); the default's
    # row is that mean normalised, (1, 0), scaled to the old rows' norm 2
    ctx = context(parent, ["a", "b", "c"], pixels((255, 255), (255, 0)), ["c", "c"], dim=2)
    paper = create_loss("bct", {"synthesis": "mean"})
    paper.prepare(ctx)
    assert torch.allclose(paper.old.head.fc.weight[2], torch.tensor([R, 0.0]), atol=1e-6)
    assert paper.old.head.fc.bias.tolist() == [0.5, 1.5, 0.0]
    default = create_loss("bct")
    default.prepare(ctx)
    assert torch.allclose(default.old.head.fc.weight[2], torch.tensor([2.0, 0.0]), atol=1e-6)
    assert default.old.head.fc.bias.tolist() == [0.5, 1.5, 1.0]
    with pytest.raises(BadInputError, match="synthesis"):
        create_loss("bct", {"synthesis": "median"})


def test_l2_on_old_classes_regresses_only_what_the_parent_was_trained_on():
    """on: old-classes (BCT Eq. 3 sums over T_old): class c is new, its sample is left out."""
    parent = pixel_parent(["a", "b"], OLD_W)
    ctx = context(parent, ["a", "b", "c"], pixels((0, 0)), ["a"])
    paper = create_loss("l2", {"on": "old-classes", "normalize": False})
    paper.prepare(ctx)
    new, old = [[2.0, 0.0], [5.0, 5.0]], [[0.0, 0.0], [0.0, 0.0]]
    parts = paper(step(new, [0, 2], old))
    assert parts["l2"].item() == pytest.approx(0.5 * 4.0)  # the class-a row alone
    everything = create_loss("l2", {"normalize": False})(step(new, [0, 2], old))
    assert everything["l2"].item() == pytest.approx(0.5 * (4.0 + 50.0) / 2)
    none = paper(step([[5.0, 5.0]], [2], [[0.0, 0.0]]))
    assert none["l2"].item() == 0.0 and none["l2"].requires_grad is False


def kl(teacher, student, t=1.0):
    """T^2 KL(softmax(teacher / T) || softmax(student / T)) by hand."""
    zt = sum(math.exp(v / t) for v in teacher)
    zs = sum(math.exp(v / t) for v in student)
    p = [math.exp(v / t) / zt for v in teacher]
    q = [math.exp(v / t) / zs for v in student]
    return t * t * sum(a * math.log(a / b) for a, b in zip(p, q, strict=True))


def bct_kd_setup(params):
    parent = pixel_parent(["a", "b"], OLD_W, s=2.0, m=0.5)
    ctx = context(parent, ["a", "b", "c"], pixels((0, 0)), ["a"])
    loss = create_loss("bct-kd", params)
    loss.prepare(ctx)
    return loss


def test_bct_kd_old_classes_take_the_influence_loss():
    loss = bct_kd_setup({"lam": 0.5})
    assert loss.old.old_index.tolist() == [0, 1, -1] and loss.old.num_parent == 2
    # class a: CE through the old cosface (s 2, m 0.5), whatever the parent's embedding says
    parts = loss(step([[0.0, 1.0]], [0], [[1.0, 0.0]]))
    assert parts["kd"].item() == pytest.approx(0.5 * ce([2 * (0.0 - 0.5), 2 * 1.0], 0), rel=1e-5)
    same = loss(step([[1.0, 0.0]], [0], [[0.0, 1.0]]))
    assert same["kd"].item() == pytest.approx(0.5 * ce([2 * 0.5, 0.0], 0), rel=1e-5)


def test_bct_kd_new_classes_are_distilled_on_the_old_softmax():
    for t in (1.0, 2.0):
        loss = bct_kd_setup({"temperature": t})
        # class c (new): KD between the old classifier's plain logits of old and new embeddings
        parts = loss(step([[0.0, 1.0]], [2], [[1.0, 0.0]]))
        assert parts["kd"].item() == pytest.approx(kl([2.0, 0.0], [0.0, 2.0], t), rel=1e-4)
        same = loss(step([[1.0, 0.0]], [2], [[1.0, 0.0]]))
        assert same["kd"].item() == pytest.approx(0.0, abs=1e-6)
    # a mixed batch is the mean of the per-sample terms
    loss = bct_kd_setup({})
    mixed = loss(step([[0.0, 1.0], [0.0, 1.0]], [0, 2], [[1.0, 0.0], [1.0, 0.0]]))
    expected = (ce([-1.0, 2.0], 0) + kl([2.0, 0.0], [0.0, 2.0])) / 2
    assert mixed["kd"].item() == pytest.approx(expected, rel=1e-5)


def test_lwf_distils_into_a_trainable_copy():
    parent = pixel_parent(["a", "b"], OLD_W, s=2.0, m=0.5)
    ctx = context(parent, ["a", "b"], pixels((0, 0)), ["a"])
    loss = create_loss("lwf", {"lam": 0.5})
    loss.prepare(ctx)
    assert all(p.requires_grad for p in loss.old_head.parameters())
    parts = loss(step([[0.0, 1.0]], [0], [[1.0, 0.0]]))
    assert parts["lwf"].item() == pytest.approx(0.5 * (0.731059 - 0.268941) * 4, rel=1e-4)
    assert loss.init_from_parent


def test_lwf_check_refuses_dim_change_with_init_from_parent():
    loss = create_loss("lwf")
    with pytest.raises(BadInputError, match="init_from_parent"):
        loss.check(fake_card(dim=4, head="cosface"), head="cosface", dim=8)


def test_unibct_vanilla_prototypes_and_arcface_form():
    parent = pixel_parent(["x"], [[1.0, 0.0]])
    images = pixels((255, 255), (255, 0), (0, 255), (0, 255))
    ctx = context(parent, ["a", "b"], images, ["a", "a", "b", "b"])
    loss = create_loss("unibct", {"prototypes": "vanilla", "s": 2.0, "m": 0.5, "lam": 0.5})
    loss.prepare(ctx)
    assert torch.allclose(loss.prototypes, torch.tensor([[1.0, 0.0], [-R, R]]), atol=1e-6)
    parts = loss(step([[1.0, 0.0]], [0]))
    expected = ce([2 * math.cos(0.5), 2 * -R], 0)
    assert parts["influence"].item() == pytest.approx(0.5 * expected, rel=1e-5)


def test_contrastive_infonce():
    loss = create_loss("contrastive", {"tau": 0.5})
    parts = loss(step([[1.0, 0.0], [0.0, 1.0]], [0, 1], [[1.0, 0.0], [1.0, 0.0]]))
    assert parts["contrastive"].item() == pytest.approx(math.log(2), rel=1e-5)
    same_class = loss(step([[1.0, 0.0], [0.0, 1.0]], [0, 0], [[1.0, 0.0], [1.0, 0.0]]))
    assert same_class["contrastive"].item() == pytest.approx(0.0, abs=1e-6)


def test_bict_regression_is_the_default_and_the_classification_form_stays():
    reg = create_loss("bict", {"lam": 2.0})
    assert reg.params.form == "regression"
    assert reg.needs_parent_forward and not reg.needs_parent_head
    parts = reg(step([[2.0, 0.0]], [0], [[0.0, 3.0]]))  # normalised: 0.5 * ||(1,0) - (0,1)||^2
    assert parts["backward"].item() == pytest.approx(2.0 * 1.0, rel=1e-6)
    raw = create_loss("bict", {"normalize": False})(step([[2.0, 0.0]], [0], [[0.0, 3.0]]))
    assert raw["backward"].item() == pytest.approx(0.5 * 13.0, rel=1e-6)
    cos = create_loss("bict", {"form": "cosine", "lam": 2.0})
    assert cos.needs_parent_forward and not cos.needs_parent_head
    parts = cos(step([[1.0, 0.0]], [0], [[1.0, 1.0]]))
    assert parts["backward"].item() == pytest.approx(2.0 * (1 - R), rel=1e-5)
    cls = create_loss("bict", {"form": "classification", "new_classes": "drop"})
    assert cls.needs_parent_head and not cls.needs_parent_forward
    parent = pixel_parent(["a", "b"], OLD_W, s=2.0, m=0.5)
    cls.prepare(context(parent, ["a", "b"], pixels((0, 0)), ["a"]))
    parts = cls(step([[1.0, 0.0]], [0]))
    assert parts["backward"].item() == pytest.approx(ce([2 * 0.5, 0.0], 0), rel=1e-5)


def test_hoc_standard_and_reference_variants():
    new = [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
    old = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    e = math.e
    # S_ij = <old_i, new_j> = [[1, 0, 0], [1, 0, 0], [0, 1, 1]]; rows 0, 1 are class 0
    standard = (math.log(1 + 1 / e) + math.log(2) + math.log(1 + 2 * e) - 1) / 3
    # reference: same-class entries (diagonal included) -> 0; minus S_ii outside the log
    reference = (math.log(3) - 1 + math.log(3) + math.log(2 + e) - 1) / 3
    for variant, expected in (("standard", standard), ("reference", reference)):
        loss = create_loss("hoc", {"mu": 1.0, "lam": 0.25, "variant": variant})
        parts = loss(step(new, [0, 0, 1], old))
        assert parts["nce"].item() == pytest.approx(0.75 * expected, rel=1e-5)
        assert parts["head"].item() == pytest.approx(0.25 * 0.25)
    assert create_loss("hoc").params.variant == "reference"  # the published loss by default
    first = create_loss("hoc")(step(new, [0, 0, 1]))  # no parent: CE alone
    assert first == {"head": HEAD_LOSS}


def test_hoc_checks_the_heads_before_training():
    loss = create_loss("hoc")
    with pytest.raises(BadInputError, match="needs the dsimplex head"):
        loss.check(None, head="cosface", dim=8)
    with pytest.raises(BadInputError, match="not dsimplex"):
        loss.check(fake_card(version="v1", head="arcface", dim=8), head="dsimplex", dim=8)
    with pytest.raises(BadInputError, match="dim 16 differs"):
        loss.check(fake_card(version="v1", head="dsimplex", dim=8), head="dsimplex", dim=16)
    loss.check(None, head="dsimplex", dim=8)


def test_methods_that_need_a_parent_or_its_classifier_say_so():
    with pytest.raises(BadInputError, match="needs a parent"):
        create_loss("bct").check(None, head="cosface", dim=8)
    with pytest.raises(BadInputError, match="without a classifier head"):
        create_loss("bct").check(fake_card(version="v1", head=None, dim=8), head="cosface", dim=8)
    create_loss("independent").check(None, head="cosface", dim=8)
    create_loss("l2").check(fake_card(version="v1", head=None, dim=8), head="cosface", dim=8)
