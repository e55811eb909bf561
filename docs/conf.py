"""Sphinx configuration of the horovod-torus docs site: ``make docs`` (warnings are errors).

Nothing here downloads at build time: no intersphinx, the built-in ``alabaster`` theme, local images only.
The Markdown pages are read by MyST-Parser as they are; the API reference is autodoc + napoleon (Google
style) over the packages of this checkout (the repository root goes first on ``sys.path``).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # importing TensorFlow for autodoc: no info lines

from horovod_torus import __version__  # noqa: E402

project = "horovod-torus"
author = "horovod-torus contributors"
copyright = "horovod-torus contributors, Apache-2.0"
release = version = __version__

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints"]

# MyST: the repository's Markdown as it is; `#heading` anchors for links into pages.
myst_heading_anchors = 3

# autodoc + napoleon: the Google-style docstrings; only a module's own members (Horovod's re-exports are
# Horovod's), members listed in a module's __all__, in source order.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = False

html_theme = "alabaster"
html_title = f"horovod-torus {release}"
html_static_path = []
html_theme_options = {"description": "2D-torus all-reduce for Horovod and Keras 3", "fixed_sidebar": True}
