from pathlib import Path

import pytest

from compat.errors import BadInputError, NotFoundError
from compat.params import load_params

REPO = Path(__file__).resolve().parents[1]


def test_repository_params_are_valid():
    params = load_params(REPO / "params.yaml")
    assert params.data.kind == "embedded"
    assert params.data.classes >= 2000 and params.data.images_per_class >= 20
    assert params.split.eval.classes >= 1000


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
        ("data:\n  kind: nope\n", "p.yaml: data: Input tag 'nope'"),
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
