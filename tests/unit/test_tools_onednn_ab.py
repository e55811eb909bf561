"""tools.onednn_ab: the rows and speed-up it derives from the launches' images/s, its table and its checks."""
import argparse

import pytest

from tools import onednn_ab


def test_summarise_pairs_each_round_and_takes_medians():
    rows, speedup = onednn_ab.summarise({False: [20.0, 30.0, 25.0], True: [100.0, 90.0, 110.0]})
    assert [r["onednn"] for r in rows] == [False, True]
    assert rows[0]["images_per_s"] == {"median": 25.0, "min": 20.0, "max": 30.0, "runs": [20.0, 30.0, 25.0]}
    assert speedup["runs"] == [5.0, 3.0, 4.4] and speedup["median"] == 4.4
    table = onednn_ab.markdown_table({"rows": rows, "speedup": speedup})
    assert "| off | 25.0 [20.0-30.0] | 3 |" in table and "| on / off | 4.40x [3.00-5.00] | |" in table


def test_both_states_get_the_same_launch():
    args = argparse.Namespace(np=4, grid="2x2", batch=512, train_examples=4096)
    cmd = onednn_ab.launch_args(args, "out")
    assert cmd[:6] == ["bash", "mpi_scripts/run_local.sh", "4", "--preset", "fashion_mnist_demo", "--grid"]
    assert "0:512" in cmd and "TF_ENABLE_ONEDNN_OPTS" not in " ".join(cmd)


@pytest.mark.parametrize("argv,message", [(["--rounds", "0"], "--rounds 0"), (["--batch", "510"], "--batch 510")])
def test_bad_input_raises_before_any_launch(argv, message, monkeypatch):
    monkeypatch.setattr(onednn_ab, "_one", lambda *a: pytest.fail("launched"))
    with pytest.raises(SystemExit, match=message):
        onednn_ab.main(argv)
