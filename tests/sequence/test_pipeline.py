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
        # fine-tuned versions start from the parent; first tasks and replacements from scratch
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
    evaluate = _stages()["evaluate"]
    assert evaluate["foreach"] == list(sections)
    for method, section in sections.items():
        config = EvaluateConfig.model_validate(section)
        assert set(config.chain) <= set(params.train)
        for prev, cur in zip(config.chain, config.chain[1:], strict=False):
            assert params.train[cur].parent == prev  # a chain follows parent links
        deps = {
            d.replace("${item}", method)
            for d in evaluate["do"]["deps"]
            if d.endswith("weights.safetensors")
        }
        assert deps == {f"models/{v}/weights.safetensors" for v in config.chain}
    assert evaluate["do"]["params"] == [{"evaluate.yaml": ["${item}"]}]
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
        ({"replace": [5]}, "cumulative must list every replaced task"),
        ({"replace": [1]}, r"replace: tasks must lie in 2\.\.6"),
        ({"evaluate": {"chain": ["x"]}}, "evaluate.chain: set by generate.py"),
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


def test_a_first_version_that_needs_a_parent_is_refused(generate, tmp_path):
    spec = yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text())
    spec["methods"]["bct"].pop("first")
    path = tmp_path / "sequence.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with pytest.raises(SystemExit, match="method bct needs a parent, and bct-t1 has none"):
        generate.render(generate.load_sequence(path))


def test_check_mode_reports_stale_files(generate, tmp_path, capsys):
    assert generate.main(["--out", str(tmp_path)]) == 0
    assert generate.main(["--out", str(tmp_path), "--check"]) == 0
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    assert generate.main(["--out", str(tmp_path), "--check"]) == 1
    assert "dvc.yaml differ" in capsys.readouterr().out
