from collections import Counter
from pathlib import Path

import pytest

from compat.data.expectations import DataValidationError, validate_split
from compat.data.scenarios import Chain, Incremental, TwoVersion
from compat.data.split import (
    EvalSplit,
    SplitParams,
    build_split,
    load_eval_manifest,
    load_train_manifest,
    write_split,
)
from compat.errors import BadInputError, NotFoundError

ALL = [
    TwoVersion(kind="extended-data", old="ed-old", new="ed-new"),
    TwoVersion(kind="open-data", old="od-old", new="od-new"),
    TwoVersion(kind="extended-class", old="ec-old", new="ec-new"),
    TwoVersion(kind="open-class", old="oc-old", new="oc-new"),
    TwoVersion(kind="identical-data", old="id-old", new="id-new"),
    Chain(kind="chain"),
    Incremental(kind="incremental", initial=4, per_task=3, tasks=4, memory=2, cumulative=[2, 4]),
]


def _params(**kw) -> SplitParams:
    return SplitParams(
        eval=EvalSplit(classes=16, pairs=120, open_set_fraction=0.25), scenarios=ALL, **kw
    )


def test_every_scenario_passes_its_expectations(tiny_source):
    params = _params()
    manifests, ev = build_split(tiny_source, params)
    validate_split(tiny_source, params, manifests, ev)
    assert set(manifests) == {n for s in ALL for n in s.names()}


def test_eval_set_properties(tiny_source):
    manifests, ev = build_split(tiny_source, _params())
    train_classes = {c for m in manifests.values() for c in m.classes}
    eval_classes = set(ev.labels)
    assert len(eval_classes) == 16 and not eval_classes & train_classes
    assert not set(ev.items) & {i for m in manifests.values() for i in m.items}
    assert not set(ev.query) & set(ev.gallery)
    gallery_classes = {ev.labels[i] for i in ev.gallery}
    assert set(ev.nonmated_classes) == eval_classes - gallery_classes
    assert len(ev.nonmated_classes) == 4
    for i in ev.query:
        assert ev.labels[i] in gallery_classes or ev.labels[i] in ev.nonmated_classes
    same = Counter(s for *_, s in ev.pairs)
    assert same[True] == same[False] == 60
    assert all((ev.labels[a] == ev.labels[b]) == s for a, b, s in ev.pairs)


def test_same_seed_same_bytes_other_seed_other_split(tiny_source, tmp_path: Path):
    for d in ("a", "b"):
        write_split(tmp_path / d, *build_split(tiny_source, _params()))
    for f in (tmp_path / "a").iterdir():
        assert f.read_bytes() == (tmp_path / "b" / f.name).read_bytes()
    m1, e1 = build_split(tiny_source, _params())
    m2, e2 = build_split(tiny_source, _params(seed=1))
    assert e1.fingerprint != e2.fingerprint and m1["v3"].fingerprint != m2["v3"].fingerprint


def test_manifests_round_trip(tiny_source, tmp_path: Path):
    manifests, ev = build_split(tiny_source, _params())
    write_split(tmp_path, manifests, ev)
    m = load_train_manifest(tmp_path / "v2.json")
    assert m == manifests["v2"]
    assert m.targets() == [m.classes.index(label) for label in m.labels]
    assert load_eval_manifest(tmp_path / "eval.json") == ev


def test_load_manifest_errors(tmp_path: Path):
    with pytest.raises(NotFoundError, match="run the split stage"):
        load_train_manifest(tmp_path / "v9.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x"}')
    with pytest.raises(BadInputError, match=r"bad\.json: scenario: Field required"):
        load_train_manifest(bad)


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("eval-class-in-train", "no evaluation class in training"),
        ("open-class-overlap", "classes disjoint from oc-old's (open-class)"),
        ("extended-class-not-subset", "classes a subset of ec-new's"),
        ("open-data-shared-item", "no item shared with od-old"),
        ("missing-file", "every item exists in the source"),
        ("query-without-positive", "every mated query has a positive"),
    ],
)
def test_expectations_catch_a_broken_split(tiny_source, breakage: str, expected: str):
    params = _params()
    manifests, ev = build_split(tiny_source, params)
    if breakage == "eval-class-in-train":
        m = manifests["v3"]
        m.items.append(ev.items[0])
        m.labels.append(ev.labels[0])
        m.classes.append(ev.labels[0])
    elif breakage == "open-class-overlap":
        old, new = manifests["oc-old"], manifests["oc-new"]
        new.items.append(old.items[0])
        new.labels.append(old.labels[0])
        new.classes.append(old.labels[0])
    elif breakage == "extended-class-not-subset":
        manifests["ec-new"].classes.remove(manifests["ec-old"].classes[0])
    elif breakage == "open-data-shared-item":
        old, new = manifests["od-old"], manifests["od-new"]
        new.items[0] = old.items[0]
    elif breakage == "missing-file":
        manifests["v1"].items[0] = "ghost/000"
    elif breakage == "query-without-positive":
        gallery_class = ev.labels[ev.gallery[0]]
        ev.gallery[:] = [i for i in ev.gallery if ev.labels[i] != gallery_class]
    with pytest.raises(DataValidationError) as info:
        validate_split(tiny_source, params, manifests, ev)
    assert expected in str(info.value)
    assert "unexpected" in str(info.value) or "observed" in str(info.value)


def test_too_many_eval_classes(tiny_source):
    with pytest.raises(BadInputError, match=r"split\.eval\.classes"):
        build_split(tiny_source, SplitParams(eval=EvalSplit(classes=39)))


def test_duplicate_training_set_names():
    with pytest.raises(ValueError, match="used twice"):
        SplitParams(scenarios=[TwoVersion(kind="open-class"), TwoVersion(kind="open-data")])


def test_more_pairs_than_the_items_allow_is_refused_naming_the_field():
    """issue 30: split.eval.pairs beyond what the evaluation items allow ran until killed."""
    import numpy as np
    import pytest

    from compat.data.split import _pairs
    from compat.errors import BadInputError

    labels = ["a"] * 3 + ["b"] * 3  # 15 pairs: 6 same-class, 9 different-class
    got = _pairs(labels, 8, np.random.default_rng(0))
    assert len(got) == 8 and sum(same for *_, same in got) == 4
    with pytest.raises(BadInputError, match=r"^split.validation.pairs: 100 pairs are more than"):
        _pairs(labels, 100, np.random.default_rng(0), "split.validation.pairs")
