"""Data Docs of a split's validation: one self-contained HTML page that opens without a network.

GX renders a validation result as Data Docs with ``ValidationResultsPageRenderer`` and a Jinja
view, ``DefaultJinjaPageView``, whose page template loads Bootstrap, Bootstrap Table, jQuery,
Popper, Font Awesome and Vega from five CDNs, and which gives each collapsible block a random
UUID (and its logo URL the current time). This module keeps GX's renderer and its section and
content-block templates, and puts them in a page template of its own: GX's stylesheet (shipped
inside the package) and a few rules standing in for Bootstrap's are inlined, nothing is loaded
from elsewhere, no script runs, and ids are numbered in page order instead of drawn at random.
So the page opens offline (a browser on the file, no server) and equal results give equal bytes.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

# What Bootstrap's classes (and Font Awesome's status icons, as the characters check and cross)
# did for GX's markup, as far as a static page needs it.
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
  color: #212529; line-height: 1.5; }
.container-fluid { padding: 1.5rem 3rem; }
table { border-collapse: collapse; margin-bottom: 1rem; width: 100%; }
th, td { border-top: 1px solid #dee2e6; padding: .4rem .6rem; text-align: left;
  vertical-align: top; }
.card { border: 1px solid #dee2e6; border-radius: .25rem; margin-bottom: 1.5rem; }
.card-header { background: #f7f7f9; border-bottom: 1px solid #dee2e6; padding: .6rem 1rem; }
.card-body { padding: .6rem 1rem; }
.badge { border-radius: .25rem; display: inline-block; font-size: 85%; padding: .2em .5em; }
.badge-secondary { background: #6c757d; color: #fff; }
.text-danger { color: #dc3545; } .text-success { color: #28a745; }
.alert-danger { background: #f8d7da; } .alert-success { background: #d4edda; }
.alert-secondary { background: #e2e3e5; padding: .4rem .8rem; }
.h6 { font-weight: 600; }
.collapse { display: block; }
.btn { display: none; }
.fas { font-style: normal; font-weight: 700; }
.fa-check-circle::before { content: "\\2714"; }
.fa-times::before { content: "\\2718"; }
code { color: #e83e8c; }
"""

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>{{ compat_title }}</title>
<style>{% include 'data_docs_default_styles.css' %}</style>
<style>{{ compat_style }}</style>
</head>
<body>
<div class="container-fluid">
<h1>{{ compat_title }}</h1>
{% for section in sections %}{% set section_loop = loop -%}{% include 'section.j2' %}{% endfor %}
</div>
</body>
</html>
"""

# What could still reach a network after rendering: an element loading a remote file, a remote
# link's address, a stylesheet's remote image (GX's navbar logo).
_REMOTE_ELEMENT = re.compile(
    r"""<(?:script|link|img)\b[^>]*\b(?:src|href)=["']https?://[^>]*>(?:\s*</script>)?"""
)
_REMOTE_ATTRIBUTE = re.compile(r"""\s(?:src|href)=["']https?://[^"']*["']""")
_REMOTE_CSS = re.compile(r"""url\(\s*["']?https?://[^)]*\)""")
SUITE_PAGE = "expectations.html"  # the suite's page, beside the result's (index.html)


def offline(html: str) -> str:
    """``html`` with every remote address removed: elements loading one dropped, links to one
    left as text, remote images in styles none; GX's link to the suite page made relative."""
    html = _REMOTE_ELEMENT.sub("", html)
    html = _REMOTE_ATTRIBUTE.sub("", html)
    html = _REMOTE_CSS.sub("none", html)
    return re.sub(r"""href=["'][./]*expectations/[^"']*\.html["']""", f'href="{SUITE_PAGE}"', html)


def _view() -> Any:
    """GX's page view with this module's page template first and numbered element ids."""
    from great_expectations.render.view import DefaultJinjaPageView
    from jinja2 import ChoiceLoader, DictLoader

    view = DefaultJinjaPageView()
    view.env.loader = ChoiceLoader([DictLoader({"compat_page.j2": PAGE}), view.env.loader])
    ids = itertools.count(1)
    view.env.filters["generate_html_element_uuid"] = lambda prefix=None: (
        f"{prefix or ''}{next(ids)}"
    )
    return view


def render_result(result: dict, title: str = "Data expectations of the split") -> str:
    """The Data Docs page of a validation result (its JSON, as compat writes it)."""
    from great_expectations.core.expectation_validation_result import (
        expectationSuiteValidationResultSchema,
    )
    from great_expectations.render.renderer import ValidationResultsPageRenderer

    # Rendered from the JSON, not from GX's result object: numpy scalars there trip GX's number
    # formatting, and the JSON holds no run time.
    loaded = expectationSuiteValidationResultSchema.load(result)
    document = ValidationResultsPageRenderer().render(loaded)
    html = _view().render(
        document, template="compat_page.j2", compat_title=title, compat_style=STYLE
    )
    return offline(html)


def render_suite(suite: dict, title: str = "Expectation suite of the split") -> str:
    """The Data Docs page of an expectation suite (its JSON)."""
    import great_expectations as gx
    from great_expectations.render.renderer import ExpectationSuitePageRenderer

    document = ExpectationSuitePageRenderer().render(gx.ExpectationSuite(**suite))
    html = _view().render(
        document, template="compat_page.j2", compat_title=title, compat_style=STYLE
    )
    return offline(html)
