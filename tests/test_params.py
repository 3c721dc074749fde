from pathlib import Path

import pytest

from compat.errors import BadInputError, NotFoundError
from compat.params import PARAMS_SECTIONS, load_params, read_section

REPO = Path(__file__).resolve().parents[1]


def test_repository_params_are_valid():
    params = load_params(REPO / "params.yaml")
    assert params.data.kind == "embedded"
    assert params.data.classes >= 2000 and params.data.images_per_class >= 20
    assert params.split.eval.class_count(params.data.classes) >= 1000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "split:\n  eval:\n    clases: 10\n",
            "p.yaml: split.eval.clases: Extra inputs are not permitted",
        ),
        (
            "data:\n  kind: embedded\n  size: 500\n",
            "p.yaml: data.size: Input should be less than or equal to 112",
        ),
        ("data:\n  kind: nope\n", "p.yaml: data: kind: expected one of embedded, folder, manifest"),
        ("trian: {}\n", "p.yaml: trian: Extra inputs are not permitted"),
        ("split: [\n", "p.yaml: not valid YAML"),
        ("- 1\n", "p.yaml: (root): expected a mapping"),
    ],
)
def test_bad_params_name_file_and_key(tmp_path: Path, text: str, message: str):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(BadInputError) as info:
        load_params(path)
    assert message in str(info.value)


def test_missing_params_file(tmp_path: Path):
    with pytest.raises(NotFoundError, match=r"nope\.yaml"):
        load_params(tmp_path / "nope.yaml")


def test_every_section_of_the_whole_file_model_is_a_known_section():
    """PARAMS_SECTIONS (what the data and split stages accept at the top level) and the
    whole-file model name the same sections."""
    from compat.params import PARAMS_SECTIONS, _params_model

    assert set(PARAMS_SECTIONS) == set(_params_model().model_fields)


PARAMS = """
data: {kind: embedded, classes: 10}
train:
  v1: {method: independent, seed: 1}
  v2: {method: bct, parent: v1, epochs: 0}
evaluate: {chain: [v1]}
"""


@pytest.fixture
def params_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(PARAMS)
    return path


def test_read_section_validates_only_its_section(params_file: Path):
    from compat.data.config import DataParams
    from compat.evaluate.config import EvaluateConfig
    from compat.train.config import TrainConfig

    assert read_section(params_file, "data", DataParams).classes == 10
    assert read_section(params_file, "evaluate", EvaluateConfig).chain == ["v1"]
    # train.v2 is invalid (epochs 0), which does not concern a reader of train.v1
    assert read_section(params_file, "train", TrainConfig, "v1").seed == 1
    with pytest.raises(BadInputError, match=r"^.*p\.yaml: train\.v2\.epochs: "):
        read_section(params_file, "train", TrainConfig, "v2")


def test_read_section_missing_names_the_known_ones(params_file: Path):
    from compat.evaluate.config import EvaluateConfig
    from compat.train.config import TrainConfig

    with pytest.raises(NotFoundError, match=r"p\.yaml: upgrade: section missing \(known: data, evaluate, train\)"):  # fmt: skip
        read_section(params_file, "upgrade", EvaluateConfig)
    with pytest.raises(NotFoundError, match=r"p\.yaml: train\.v9: not found \(known: v1, v2\)"):
        read_section(params_file, "train", TrainConfig, "v9")
    with pytest.raises(NotFoundError, match=r"train\.v9: no such version \(known: v1, v2\)"):
        read_section(params_file, "train", TrainConfig, "v9", missing="no such version (known: {known})")  # fmt: skip
    assert read_section(params_file, "upgrade", EvaluateConfig, default=None) is None


def test_read_section_refuses_unknown_sections_when_told_which_exist(params_file: Path):
    from compat.data.split import SplitParams

    params_file.write_text("spilt: {seed: 3}\n")
    assert read_section(params_file, "split", SplitParams, default=SplitParams()).seed == 0
    with pytest.raises(BadInputError, match=r"p\.yaml: spilt: Extra inputs are not permitted"):
        read_section(params_file, "split", SplitParams, default=None, sections=PARAMS_SECTIONS)


def test_read_section_of_a_file_that_is_not_a_mapping(tmp_path: Path):
    path = tmp_path / "p.yaml"
    path.write_text("- 1\n")
    with pytest.raises(BadInputError, match=r"\(root\): expected a mapping of sections"):
        read_section(path, "evaluate", dict)


@pytest.mark.parametrize("text", ["", "\n# only a comment\n", "---\n"])
def test_an_empty_params_file_is_an_error_not_the_defaults(tmp_path: Path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    message = f"{path}: (root): the file is empty; expected a mapping of sections"
    with pytest.raises(BadInputError) as err:
        load_params(path)
    assert err.value.message == message
    from compat.data.split import SplitParams

    with pytest.raises(BadInputError) as err:
        read_section(path, "split", SplitParams, default=SplitParams(), sections=PARAMS_SECTIONS)
    assert err.value.message == message


def test_unknown_names_in_train_params_are_params_errors_listing_the_known_ones():
    from compat.train.config import TrainConfig

    TrainConfig(backbone="tiny", method="bct").check_names("p.yaml", "train.v2")
    cases = {
        "backbone": "p.yaml: train.v2.backbone: unknown backbone 'resnet9'; known: resnet18, "
        "resnet50, small-cnn, tiny",
        "head": "p.yaml: train.v2.head: unknown head 'resnet9'; known: arcface, cosface, "
        "dsimplex, linear, normface, softmax",
        "method": "p.yaml: train.v2.method: unknown method 'resnet9'; known: bct, bct-kd, bict, "
        "contrastive, hoc, independent, l2, lwf, unibct",
    }
    for field, message in cases.items():
        with pytest.raises(BadInputError) as err:
            TrainConfig(**{field: "resnet9"}).check_names("p.yaml", "train.v2")
        assert err.value.message == message
    with pytest.raises(BadInputError, match=r"^p.yaml: train.v2.method_params.lam: Input"):
        TrainConfig(method="bct", method_params={"lam": "x"}).check_names("p.yaml", "train.v2")
