"""tools.onednn_ab: the rows and speed-up it derives from the launches' images/s, its table and its checks."""
import argparse

import pytest

from tools import onednn_ab


def test_summarise_pairs_each_round_and_takes_medians():
    rows, speedup, speedup_isa = onednn_ab.summarise({False: [20.0, 30.0, 25.0], True: [100.0, 90.0, 110.0]})
    assert [r["onednn"] for r in rows] == [False, True] and speedup_isa is None
    assert [r["max_cpu_isa"] for r in rows] == [None, None]
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


def test_the_capped_state_gets_its_row_and_speedup():
    runs = {False: [20.0, 30.0, 25.0], True: [100.0, 90.0, 110.0], "isa": [40.0, 45.0, 50.0]}
    rows, speedup, speedup_isa = onednn_ab.summarise(runs, "AVX2")
    assert [(r["onednn"], r["max_cpu_isa"]) for r in rows] == [(False, None), (True, None), (True, "AVX2")]
    assert rows[2]["images_per_s"]["median"] == 45.0
    assert speedup_isa["runs"] == [2.0, 1.5, 2.0] and speedup_isa["median"] == 2.0 and speedup["median"] == 4.4
    table = onednn_ab.markdown_table({"rows": rows, "speedup": speedup, "speedup_isa": speedup_isa})
    assert "| on, capped at AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`) | 45.0 [40.0-50.0] | 3 |" in table
    assert "| capped at AVX2 / off | 2.00x [1.50-2.00] | |" in table


def test_each_state_launches_with_its_environment(monkeypatch, tmp_path):
    """The launch environment of each state: off, on, and on capped at the ISA (a cap the caller exported
    is dropped from the other states); the reported oneDNN state is checked against the one asked for."""
    seen = []

    def fake_run(cmd, cwd, env, **kw):
        seen.append((env["TF_ENABLE_ONEDNN_OPTS"], env.get(onednn_ab.ISA_VAR)))
        out = cmd[cmd.index("--output-dir") + 1]
        (tmp_path / out).mkdir(parents=True, exist_ok=True)
        on = env["TF_ENABLE_ONEDNN_OPTS"] == "1"
        (tmp_path / out / "summary.json").write_text(
            '{"host": {"onednn": %s, "cpu_model": "x"}, "epochs": [{"images_per_sec": %d}]}'
            % ("true" if on else "false", 30 if env.get(onednn_ab.ISA_VAR) else (100 if on else 10)))
        return argparse.Namespace(returncode=0, stderr="")

    monkeypatch.setenv(onednn_ab.ISA_VAR, "SSE41")
    monkeypatch.setattr(onednn_ab.subprocess, "run", fake_run)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(onednn_ab, "ROOT", str(tmp_path))
    out = tmp_path / "ab.json"
    assert onednn_ab.main(["--rounds", "2", "--isa", "AVX2", "--out", "runs", "--json", str(out)]) == 0
    assert seen == [("0", None), ("1", None), ("1", "AVX2"), ("1", "AVX2"), ("1", None), ("0", None)]
    import json
    doc = json.loads(out.read_text())
    assert [r["images_per_s"]["median"] for r in doc["rows"]] == [10.0, 100.0, 30.0]
    assert doc["speedup_isa"]["median"] == 3.0 and doc["settings"]["isa"] == "AVX2"
