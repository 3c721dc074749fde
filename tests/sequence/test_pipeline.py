"""experiments/sequence: sequence.yaml, params.yaml, evaluate.yaml and dvc.yaml agree (docs/design.md:
one name four times), and the generator refuses an inconsistent sequence."""

from __future__ import annotations

import pytest
import yaml
from seq_scripts import EXPERIMENT, script

from compat.evaluate.config import EvaluateConfig
from compat.params import load_params


@pytest.fixture(scope="module")
def generate():
    return script("generate")


def _stages():
    return yaml.safe_load((EXPERIMENT / "dvc.yaml").read_text())["stages"]


def test_generated_files_are_up_to_date(generate):
    files = generate.render(generate.load_sequence(EXPERIMENT / "sequence.yaml"))
    for name, text in files.items():
        assert (EXPERIMENT / name).read_text() == text, f"{name}: run python generate.py"


def test_every_version_has_its_train_stage_with_split_and_parent():
    params = load_params(EXPERIMENT / "params.yaml")
    stages = _stages()
    first, later = stages["train-first"]["foreach"], stages["train"]["foreach"]
    assert set(first) | set(later) == set(params.train) and not set(first) & set(later)
    for version, cfg in params.train.items():
        item = first.get(version) or later[version]
        assert item["split"] == cfg.split
        assert item.get("parent") == cfg.parent
        # every version with a parent starts from it (pre-trained models have none), except a
        # replacement trained from scratch on '<task>-all' (the protocol without pre-training)
        assert cfg.init == (
            "parent" if cfg.parent and not cfg.split.endswith("-all") else "scratch"
        )
        assert cfg.threads == 2
    for name in ("train-first", "train"):
        do = stages[name]["do"]
        assert do["cmd"].split()[:3] == ["python", "../../stages/train.py", "${key}"]
        assert do["params"] == ["train.${key}"]
        assert "splits/${item.split}.json" in do["deps"]
        parent_deps = {d for d in do["deps"] if d.startswith("models/")}
        assert parent_deps == (
            {"models/${item.parent}/weights.safetensors", "models/${item.parent}/card.json"}
            if name == "train"
            else set()
        )


def test_split_makes_every_training_set_named():
    params = load_params(EXPERIMENT / "params.yaml")
    names = {n for s in params.split.scenarios for n in s.names()}
    assert {cfg.split for cfg in params.train.values()} <= names


def test_each_method_chain_is_evaluated_from_its_own_models():
    params = load_params(EXPERIMENT / "params.yaml")
    sections = yaml.safe_load((EXPERIMENT / "evaluate.yaml").read_text())
    spec = yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text())
    evaluate = _stages()["evaluate"]
    assert list(evaluate["foreach"]) == list(sections)
    for name, section in sections.items():
        method = evaluate["foreach"][name]["method"]
        assert name == (method if "gallery" not in section else f"{method}-{section['gallery']}")
        config = EvaluateConfig.model_validate(section)
        assert set(config.chain) <= set(params.train)
        owner = spec["methods"][method].get("pretrained_by") or method
        for k, version in enumerate(config.chain):
            task = k + 1
            if task == 1:
                expected = f"{owner}-pre0"  # the pre-trained starting model
            elif task in spec["replace"]:
                expected = f"{owner}-pre{spec['replace'].index(task) + 1}"  # an improved one
            else:
                expected = config.chain[k - 1]  # fine-tuning follows the chain
            assert params.train[version].parent == expected, version
        deps = {
            d.replace("${item.method}", method)
            for d in evaluate["do"]["deps"]
            if d.endswith("weights.safetensors")
        }
        assert deps == {f"models/{v}/weights.safetensors" for v in config.chain}
    assert {s.get("gallery", "instance") for s in sections.values()} == {"instance", "template"}
    assert evaluate["do"]["params"] == [{"evaluate.yaml": ["${key}"]}]
    # a method's galleries share one embedding cache (keyed by weights and data): each version
    # is embedded once per method, and no stage declares it as its output
    assert evaluate["do"]["cmd"].endswith("--cache cache/embeddings/${item.method}")
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in evaluate["do"]["outs"]]
    assert not [o for o in outs if o.startswith("cache")]
    summary = _stages()["summary"]
    assert {f"metrics/{m}/compat.json" for m in sections} <= set(summary["deps"])


def test_outputs_stay_in_the_folder_and_results_are_not_cached():
    for name, stage in _stages().items():
        body = stage.get("do", stage)
        assert "compat register" not in body["cmd"] and "compat promote" not in body["cmd"], name
        outs = [o if isinstance(o, str) else next(iter(o)) for o in body.get("outs", [])]
        for section in ("metrics", "plots"):
            for entry in body.get(section, []):
                path, opts = next(iter(entry.items()))
                assert opts.get("cache") is False, (name, path)  # committed, not DVC-cached
                outs.append(path)
        assert all(not o.startswith(("..", "/", "registry")) for o in outs), (name, outs)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"replace": [5]}, "pretrain: 3 models for 1 replacements"),
        ({"pretrain": []}, "cumulative must list every replaced task"),
        ({"replace": [1, 3]}, r"replace: tasks must lie in 2\.\.7"),
        ({"evaluate": {"chain": ["x"]}}, "evaluate.chain: set by generate.py"),
        ({"evaluate": {"gallery": "template"}}, "evaluate.gallery: set by generate.py"),
        ({"galleries": ["template", "template"]}, "a gallery is listed twice"),
        ({"galleries": ["mean"]}, "galleries"),
        ({"methods": {"hoc": {"trian": {}}}}, "trian"),
    ],
)
def test_inconsistent_sequences_are_refused(generate, tmp_path, change, match):
    spec = yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text())
    spec.update(change)
    path = tmp_path / "sequence.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit, match=match):
        generate.load_sequence(path)


def test_a_bad_train_setting_names_the_version(generate, tmp_path):
    spec = yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text())
    spec["train"]["fine_tune"]["epochs"] = 0
    path = tmp_path / "sequence.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit, match=r"hoc-t2\.epochs"):
        generate.render(generate.load_sequence(path))


def test_a_version_without_parent_that_needs_one_is_refused(generate, tmp_path):
    spec = yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text())
    spec["methods"]["bct"].pop("pretrained_by")  # bct pre-trains its own, with bct's loss
    path = tmp_path / "sequence.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit, match="method bct needs a parent, and bct-pre0 has none"):
        generate.render(generate.load_sequence(path))
    spec = yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text())
    spec.pop("pretrain")  # the protocol without pre-training: bct-t1 from scratch
    spec["replace"] = []
    spec["methods"]["bct"].pop("pretrained_by")
    spec["methods"]["bct"].pop("first")
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit, match="method bct needs a parent, and bct-t1 has none"):
        generate.render(generate.load_sequence(path))


def test_pretrained_models_are_trained_once_and_shared_by_name(generate):
    seq = generate.load_sequence(EXPERIMENT / "sequence.yaml")
    configs = generate.train_configs(seq)
    pre = [v for v in configs if "-pre" in v]
    assert pre == ["hoc-pre0", "hoc-pre1", "hoc-pre2", "er-pre0", "er-pre1", "er-pre2"]
    for v in pre:
        cfg = configs[v]
        assert cfg["split"] == "pretrain" and cfg["init"] == "scratch" and "parent" not in cfg
        assert cfg["method"] == "independent"
    # the improved models train longer, on the same pre-training classes
    assert [configs[f"hoc-pre{i}"]["epochs"] for i in range(3)] == [1, 2, 3]
    assert seq.pretrained("bct") == ["er-pre0", "er-pre1", "er-pre2"]
    assert configs["bct-t3"]["parent"] == "er-pre1" and configs["bct-t3"]["split"] == "t3"
    assert configs["hoc-t5"]["method"] == "hoc"  # against its own pre-trained start
    assert configs["hoc-pre0"]["dim"] == 1023  # K = 1024 d-Simplex vertices


def test_pretrained_by_must_name_a_method_that_pretrains(generate, tmp_path):
    spec = yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text())
    spec["methods"]["bct"]["pretrained_by"] = "nope"
    path = tmp_path / "sequence.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit, match="pretrained_by"):
        generate.load_sequence(path)


def test_check_mode_reports_stale_files(generate, tmp_path, capsys):
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    assert generate.main(["--out", str(tmp_path), "--check"]) == 1
    assert "dvc.yaml differ" in capsys.readouterr().out
