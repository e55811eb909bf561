"""tools.horovod_tests: the Keras 3 changes to Horovod 0.28.1's own test_tensorflow2_keras.py and the known
failures of its test_tensorflow.py (the copies in tests/horovod_v0.28.1, run by `make test` through
mpi_scripts/horovod_suite.sh)."""
import ast
import os
import re

import pytest

from tools import horovod_tests as ht
from tools.horovod_examples import ChangeError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "tests", "horovod_v0.28.1", "test", "parallel", "test_tensorflow2_keras.py")
TF_SOURCE = os.path.join(os.path.dirname(SOURCE), "test_tensorflow.py")


@pytest.fixture(scope="module")
def original():
    with open(SOURCE) as f:
        return f.read()


def test_every_change_edits_horovods_file_and_the_result_is_python(original):
    out = ht.transform(original)
    ast.parse(out)
    assert re.findall(r"^import horovod\S* as hvd\S*$", out, re.M) == ["import horovod.keras as hvd_keras",
                                                                     "import horovod_torus.tensorflow.keras as hvd"]
    assert "import horovod_torus.tensorflow.keras as hvd\n" in out
    for gone in ("(lr=", ".optimizer.lr.", "losses.mean_squared_error", "experimental_run_tf_function", ".ref()"):
        assert gone in original and gone not in out, gone
    for name, why in ht.KERAS2_ONLY.items():
        assert re.search(rf"@pytest\.mark\.skip\(reason={re.escape(repr('Keras 2 only: ' + why))}\)\n +def {name}\(self",
                         out), name
    # every assertion is Horovod's own: the same number of assert statements and assert* calls
    count = lambda s: len(re.findall(r"\bassert", s))  # noqa: E731
    assert count(out) == count(original)


def test_stock_keeps_horovods_import_and_makes_the_same_keras_3_changes(original):
    stock, ours = ht.transform(original, stock=True), ht.transform(original)
    assert "import horovod.tensorflow.keras as hvd\n" in stock
    assert stock.replace("import horovod.tensorflow.keras as hvd\n", "") == \
        ours.replace("import horovod_torus.tensorflow.keras as hvd\n", "")


def test_a_file_without_the_lines_a_change_edits_is_an_error_naming_it():
    with pytest.raises(ChangeError, match="learning_rate_argument"):
        ht.learning_rate_argument("opt = keras.optimizers.RMSprop(learning_rate=0.1)\n")
    with pytest.raises(ChangeError, match=r"skip_keras2_only\(test_legacy_optimizer\)"):
        ht.skip_keras2_only("    def test_other(self):\n        pass\n")


def test_the_command_line_rewrites_once_and_says_why_it_cannot_twice(tmp_path, original, capsys):
    path = tmp_path / "test_tensorflow2_keras.py"
    path.write_text(original)
    assert ht.main([str(path)]) == 0 and path.read_text() == ht.transform(original)
    assert ht.main([str(path)]) == 2  # already rewritten: one line, the file untouched
    err = capsys.readouterr().err
    assert "the change swap_import found none of the lines it edits" in err and "rewrote already" in err
    assert path.read_text() == ht.transform(original)
    assert ht.main([str(tmp_path / "none" / "test_tensorflow.py")]) == 2
    assert "cannot read" in capsys.readouterr().err
    other = tmp_path / "test_other.py"
    other.write_text(original)
    assert ht.main([str(other)]) == 2 and other.read_text() == original
    assert "not a test file this tool rewrites" in capsys.readouterr().err


def test_the_tensorflow_file_gets_the_import_swap_and_its_known_failures_marked_strict():
    with open(TF_SOURCE) as f:
        original = f.read()
    out = ht.transform(original, name=ht.TF_FILE)
    ast.parse(out)
    assert "import horovod_torus.tensorflow as hvd\n" in out and "import horovod.tensorflow as hvd\n" not in out
    reason = r"reason=(?:'[^']+'|\"[^\"]+\")"  # repr() quotes a reason with an apostrophe in double quotes
    marked = re.findall(rf"@pytest\.mark\.xfail\(strict=True, {reason}\)\n +def (\w+)\(self", out)
    assert marked == [n for n in re.findall(r"^ +def (test_\w+)\(self", original, re.M) if n in ht.KNOWN_FAILURES]
    assert sorted(marked) == sorted(ht.KNOWN_FAILURES) and "xfail" not in original
    stock = ht.transform(original, stock=True, name=ht.TF_FILE)
    assert "import horovod.tensorflow as hvd\n" in stock
    assert sorted(re.findall(rf"xfail\(strict=True, {reason}\)\n +def (\w+)", stock)) == \
        sorted(n for n, (_, stock_too) in ht.KNOWN_FAILURES.items() if stock_too)
    with pytest.raises(ChangeError, match=r"mark_known_failures\(test_horovod_syncbn_cpu\)"):
        ht.mark_known_failures(original.replace("def test_horovod_syncbn_cpu(self", "def renamed(self"))
    with pytest.raises(ValueError, match="not a test file"):
        ht.transform(original, name="test_torch.py")
