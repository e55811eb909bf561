"""The docs: README.md is a short guide whose result tables are generated; every relative link in README.md
and in docs/ points at a file; the results pages are what ``python -m tools.docs_results`` writes from the
JSON files now; every error message quoted on the troubleshooting page is still in the source; the Sphinx
configuration downloads nothing."""
import ast
import os
import pathlib
import re
import shutil

import pytest

from tools import docs_results

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def _markdown_files():
    files = [README] + sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)
    assert len(files) > 10
    return files


def _links(text):
    """Targets of the Markdown links outside code blocks and code spans."""
    return LINK.findall(CODE.sub("", FENCE.sub("", text)))


def test_readme_is_at_most_250_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move the details to a page in docs/"


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(path):
    missing = []
    for target in _links(path.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue                                  # a URL, a mail address, or an anchor on the same page
        file = (path.parent / target.split("#", 1)[0]).resolve()
        if not file.exists():
            missing.append(target)
    assert not missing, f"{path.relative_to(ROOT)} links to missing files: {missing}"


def test_link_check_sees_links_and_skips_code():
    text = "a [page](x.md) and ![plot](y.png)\n`[not](a.md)`\n```\n[not](b.md)\n```\n[web](https://e.org)"
    assert _links(text) == ["x.md", "y.png", "https://e.org"]


def test_results_pages_and_readme_tables_are_what_the_generator_writes(tmp_path):
    readme = tmp_path / "README.md"
    shutil.copy(README, readme)
    assert docs_results.main(["--docs", str(DOCS), "--out", str(tmp_path / "results"),
                              "--readme", str(readme)]) == 0
    generated = sorted(p.name for p in (tmp_path / "results").iterdir())
    committed = sorted(p.name for p in (DOCS / "results").iterdir() if p.suffix == ".md")
    assert generated == committed, "docs/results/ holds pages the generator no longer writes, or lacks some"
    stale = [name for name in generated
             if (tmp_path / "results" / name).read_text() != (DOCS / "results" / name).read_text()]
    assert not stale, f"docs/results/{stale} are out of date: run python -m tools.docs_results"
    assert readme.read_text() == README.read_text(), \
        "README.md's result tables are out of date: run python -m tools.docs_results"


def test_readme_has_every_generated_table():
    names = set(re.findall(r"<!-- results:([a-z0-9-]+) -->", README.read_text()))
    assert names == set(docs_results.readme_blocks(str(DOCS)))


def test_results_pages_name_their_command_and_host():
    for name, text in docs_results.pages(str(DOCS)).items():
        if name in ("index.md", "planner.md"):
            continue
        assert "Command" in text and "```bash" in text, name
        assert "`cpu_model`" in text or "the CPU model: not recorded" in text, name


def test_update_readme_replaces_block_bodies_only():
    text = "intro\n<!-- results:a -->\nold\n<!-- /results -->\nmiddle\n<!-- results:b -->\n<!-- /results -->\nend\n"
    out = docs_results.update_readme(text, {"a": "| x |", "b": "| y |\n"})
    assert out == ("intro\n<!-- results:a -->\n| x |\n<!-- /results -->\nmiddle\n<!-- results:b -->\n| y |\n"
                   "<!-- /results -->\nend\n")
    assert docs_results.update_readme(out, {"a": "| x |", "b": "| y |"}) == out
    with pytest.raises(KeyError, match="results:c is unknown"):
        docs_results.update_readme("<!-- results:c -->\n<!-- /results -->", {"a": ""})


def _render(node):
    """A string literal as text; an f-string with ``…`` for each value it fills in."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "…" for v in node.values)
    return None


def _source_messages():
    out = []
    for package in ("horovod_torus", "keras_app"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                text = _render(node)
                if text:
                    out.append(" ".join(text.split()))
    return out


def test_troubleshooting_quotes_messages_that_the_code_writes():
    page = (DOCS / "troubleshooting.md").read_text()
    quoted = [m.group(1) for line in page.splitlines() if (m := re.match(r"^\| `([^`]+)` \|", line))]
    assert len(quoted) > 80
    messages = _source_messages()
    gone = [q for q in quoted if not any(q in m for m in messages)]
    assert not gone, f"docs/troubleshooting.md quotes messages the code no longer writes: {gone}"


def test_sphinx_configuration_downloads_nothing():
    conf = (DOCS / "conf.py").read_text()
    assert "sphinx.ext.intersphinx" not in conf and 'html_theme = "alabaster"' in conf
    assert not re.search(r"https?://", conf)
    for name in ("index.md", "configuration.md", "ARCHITECTURE.md", "troubleshooting.md", "changelog.md"):
        assert os.path.exists(DOCS / name), name
