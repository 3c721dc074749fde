"""span.py: span energy and template top-1, on hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from seq_scripts import script

from compat.functional import dsimplex_vertices


@pytest.fixture(scope="module")
def span():
    return script("span")


def test_span_energy_hand_computed(span):
    w = dsimplex_vertices(4).double().numpy()  # 4 vertices in 3 dims
    basis = span.span_basis(w[:1])  # one trained class: its vertex
    u = np.cross(w[0], w[1])  # orthogonal to w0 (and to w1)
    u /= np.linalg.norm(u)
    assert span.span_energy(w[:1], basis) == pytest.approx(1.0)
    assert span.span_energy(u[None], basis) == pytest.approx(0.0, abs=1e-12)
    # (w0 + u) / sqrt(2): half of its energy along w0; the row's scale does not matter
    assert span.span_energy(3 * (w[:1] + u), basis) == pytest.approx(0.5)
    # the mean over rows
    assert span.span_energy(np.stack([w[0], u]), basis) == pytest.approx(0.5)
    # all K vertices span the whole space
    assert span.span_energy(u[None], span.span_basis(w)) == pytest.approx(1.0)


def test_template_top1_hand_computed(span):
    gallery = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.0, 3.0]])
    g_labels = np.array(["a", "a", "b", "b"])
    # templates: a = (1, 1/2) normalised, b = (0, 1)
    query = np.array([[1.0, 0.1], [0.3, 1.0], [1.0, 0.9]])
    q_labels = np.array(["a", "b", "b"])
    # cosines to a: 0.93, 0.68, 0.96; to b: 0.10, 0.96, 0.67 -> a, b, a: 2 of 3 right
    assert span.template_top1(query, q_labels, gallery, g_labels) == pytest.approx(2 / 3)


def test_missing_data_is_a_one_line_error(span, tmp_path, capsys):
    code = span.main([str(tmp_path / "m"), "--source", str(tmp_path / "source.json")])
    assert code == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("span: ") and "source.json" in err and "\n" not in err
