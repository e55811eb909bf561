"""The emulated cluster's plan (names, addresses, commands, planner description) and its scripts."""
import ipaddress
import json
import os
import stat
import subprocess

import pytest

from tools.cluster.launch import ClusterFiles, horovodrun_argv, in_node, mpirun_argv
from tools.cluster.layout import ClusterSpec, parse_rate
from tools.cluster.scripts import agent_text, bindnic_text, ssh_shim_text
from horovod_torus.plan import build_parser, cluster_from_args


def test_parse_rate():
    assert parse_rate("200mbit") == 200.0
    assert parse_rate("200M") == 200.0
    assert parse_rate("200") == 200.0
    assert parse_rate("1gbit") == 1000.0
    assert parse_rate("500kbit") == 0.5
    assert parse_rate("2000000bit") == 2.0
    assert parse_rate(150) == 150.0
    for unshaped in ("none", "0", None, 0):
        assert parse_rate(unshaped) is None
    with pytest.raises(ValueError, match="malformed"):
        parse_rate("fast")
    with pytest.raises(ValueError, match="below 1 kbit/s"):
        parse_rate("10bit")


def test_spec_validation_names_the_value():
    with pytest.raises(ValueError, match="nodes=0"):
        ClusterSpec(nodes=0, ranks_per_node=2)
    with pytest.raises(ValueError, match="wiring 'mesh'"):
        ClusterSpec(nodes=2, ranks_per_node=2, wiring="mesh")
    with pytest.raises(ValueError, match="private IPv4 /16"):
        ClusterSpec(nodes=2, ranks_per_node=2, subnet="8.8.0.0/16")
    with pytest.raises(ValueError, match="private IPv4 /16"):
        ClusterSpec(nodes=2, ranks_per_node=2, subnet="10.1.2.0/24")
    with pytest.raises(ValueError, match="cluster name 'Big-1'"):
        ClusterSpec(nodes=2, ranks_per_node=2, name="Big-1")
    with pytest.raises(ValueError, match="rate -5"):
        ClusterSpec(nodes=2, ranks_per_node=2, rate_mbit=-5)


def test_address_plan_rails():
    s = ClusterSpec(nodes=4, ranks_per_node=2, wiring="rails", rate_mbit=200, name="htc", subnet="10.213.0.0/16")
    assert s.nics == 2 and s.size == 8
    assert s.namespaces == ["htc-sw", "htc-n0", "htc-n1", "htc-n2", "htc-n3"]
    assert s.hostnames == ["node0", "node1", "node2", "node3"]
    assert str(s.rail_network(1)) == "10.213.1.0/24"
    assert s.address(0, 0) == "10.213.0.1" and s.address(3, 1) == "10.213.1.4"
    assert s.gateway(1) == "10.213.1.254"
    assert [s.local_nic(lr) for lr in range(4)] == ["eth0", "eth1", "eth0", "eth1"]
    every = [s.address(i, k) for i in range(4) for k in range(2)] + [s.gateway(k) for k in range(2)]
    assert len(set(every)) == 10 and all(ipaddress.ip_address(a).is_private for a in every)
    with pytest.raises(ValueError, match="rail 2"):
        s.rail_network(2)
    with pytest.raises(ValueError, match="node 4"):
        s.address(4, 0)


def test_address_plan_node_wiring_has_one_nic():
    s = ClusterSpec(nodes=3, ranks_per_node=4, wiring="node")
    assert s.nics == 1 and [s.local_nic(lr) for lr in range(4)] == ["eth0"] * 4
    with pytest.raises(ValueError, match="rail 1"):
        s.address(0, 1)


def test_hosts_hostfile_and_horovodrun_hosts():
    s = ClusterSpec(nodes=2, ranks_per_node=3, wiring="rails", subnet="192.168.0.0/16")
    assert s.hosts_text() == "127.0.0.1\tlocalhost\n192.168.0.1\tnode0\n192.168.0.2\tnode1\n"
    assert s.hostfile_text() == "node0 slots=3\nnode1 slots=3\n"
    assert s.horovodrun_hosts() == "node0:3,node1:3"


def _cmds(spec):
    return [" ".join(c) for c in spec.up_commands()]


def test_up_commands_node_wiring_shapes_both_directions():
    s = ClusterSpec(nodes=2, ranks_per_node=2, wiring="node", rate_mbit=200, name="t")
    cmds = _cmds(s)
    assert cmds[:3] == ["ip netns add t-sw", "ip netns add t-n0", "ip netns add t-n1"]
    assert "ip -n t-sw link add br0 type bridge" in cmds
    assert "ip -n t-n1 link add eth0 type veth peer name n1r0 netns t-sw" in cmds
    assert "ip -n t-n1 addr add 10.213.0.2/24 dev eth0" in cmds
    assert "ip -n t-sw link set n1r0 master br0" in cmds
    htb = [c for c in cmds if "htb rate" in c]
    # node egress (eth0 in each node) and node ingress (its switch port), 200 Mbit/s each
    assert sorted(c.split()[3] + ":" + c.split()[8] for c in htb) == ["t-n0:eth0", "t-n1:eth0", "t-sw:n0r0", "t-sw:n1r0"]
    assert all("rate 200mbit ceil 200mbit" in c for c in htb)
    assert not any("rule" in c or "ip_forward" in c for c in cmds)
    # an interface is created before it is configured
    assert cmds.index("ip -n t-n0 link add eth0 type veth peer name n0r0 netns t-sw") < cmds.index(
        "ip -n t-sw link set n0r0 master br0")


def test_up_commands_rails_route_between_rails_by_source():
    s = ClusterSpec(nodes=2, ranks_per_node=2, wiring="rails", rate_mbit=None, name="t")
    cmds = _cmds(s)
    assert not any("htb" in c for c in cmds)  # unshaped
    assert "ip -n t-sw addr add 10.213.1.254/24 dev br1" in cmds
    assert "ip netns exec t-sw sysctl -qw net.ipv4.ip_forward=1" in cmds
    assert "ip -n t-n1 link add eth1 type veth peer name n1r1 netns t-sw" in cmds
    assert "ip -n t-sw link set n1r1 master br1" in cmds
    assert "ip -n t-n1 rule add from 10.213.1.2 table 101 pref 1001" in cmds
    assert "ip -n t-n1 route add 10.213.0.0/16 via 10.213.1.254 dev eth1 src 10.213.1.2 table 101" in cmds
    assert "ip netns exec t-n0 sysctl -qw net.ipv4.conf.all.rp_filter=0" in cmds


def test_down_commands_delete_every_namespace():
    s = ClusterSpec(nodes=2, ranks_per_node=1, name="t")
    assert s.down_commands() == [["ip", "netns", "del", n] for n in ("t-n0", "t-n1", "t-sw")]


def test_planner_description_loads_in_the_planner(tmp_path):
    s = ClusterSpec(nodes=4, ranks_per_node=2, wiring="rails", rate_mbit=200)
    d = s.planner_description(inter_latency_us=50)
    assert d["inter"] == {"latency_us": 50, "bandwidth_gbps": pytest.approx(0.05)}  # 2 NICs x 25 MB/s
    assert d["nics_per_node"] == 2
    path = tmp_path / "c.json"
    path.write_text(json.dumps(d))
    c = cluster_from_args(build_parser().parse_args(["--cluster", str(path)]))
    assert (c.nodes, c.ranks_per_node, c.nics) == (4, 2, 2)
    assert c.inter.bandwidth == pytest.approx(50e6) and c.inter.alpha == pytest.approx(50e-6)
    node = ClusterSpec(nodes=4, ranks_per_node=2, wiring="node", rate_mbit=200).planner_description()
    assert node["nics_per_node"] == 1 and node["inter"]["bandwidth_gbps"] == pytest.approx(0.025)


# ---------------------------------------------------------------- scripts, run with a fake `ip`
@pytest.fixture
def fake_ip(tmp_path):
    """A PATH whose `ip` prints its arguments one per line instead of entering a namespace."""
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    ip = bindir / "ip"
    ip.write_text('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    ip.chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}


def _script(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def test_agent_skips_ssh_options_and_enters_the_nodes_namespace(tmp_path, fake_ip):
    s = ClusterSpec(nodes=3, ranks_per_node=2, wiring="rails", name="t")
    agent = _script(tmp_path, "agent", agent_text(s, "/x/hosts"))
    # horovodrun: ssh -o A -o B HOST -p PORT 'COMMAND'; Open MPI: AGENT HOST orted words...
    cases = [(["-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "node2", "-p", "22",
               "cd /w ; env A=1 python x.py"], 2, "cd /w ; env A=1 python x.py"),
             (["-x", "node1", "orted", "-mca", "ess", "env"], 1, "orted -mca ess env"),
             (["10.213.0.1", "echo", "hi"], 0, "echo hi")]
    for argv, i, command in cases:
        out = subprocess.run([agent, *argv], env=fake_ip, capture_output=True, text=True, check=True).stdout.split("\n")
        assert out[:6] == ["netns", "exec", f"t-n{i}", "unshare", "--uts", "--"]
        assert out[9:13] == ["agent", f"node{i}", "/x/hosts", command]
    bad = subprocess.run([agent, "node7", "true"], env=fake_ip, capture_output=True, text=True)
    assert bad.returncode == 255 and "unknown host 'node7'" in bad.stderr


def test_bindnic_binds_each_local_rank_to_its_nic(tmp_path):
    s = ClusterSpec(nodes=2, ranks_per_node=3, wiring="rails")
    bind = _script(tmp_path, "bindnic", bindnic_text(s))
    show = ["bash", "-c", 'echo "$OMPI_MCA_btl_tcp_if_include $HOROVOD_GLOO_IFACE $HOROVOD_TORUS_CLUSTER_NIC"']
    base = {k: v for k, v in os.environ.items() if k not in ("OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK")}
    for var in ("OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK"):
        for lr in range(3):
            out = subprocess.run([bind, *show], env={**base, var: str(lr), "HOROVOD_GLOO_IFACE": "eth0"},
                                 capture_output=True, text=True, check=True).stdout.split()
            assert out == [f"eth{lr}"] * 3
    missing = subprocess.run([bind, "true"], env=base, capture_output=True, text=True)
    assert missing.returncode == 2 and "no local rank" in missing.stderr
    one = _script(tmp_path, "bind1", bindnic_text(ClusterSpec(nodes=2, ranks_per_node=3, wiring="node")))
    out = subprocess.run([one, *show], env={**base, "HOROVOD_LOCAL_RANK": "2"}, capture_output=True, text=True)
    assert out.stdout.split() == ["eth0"] * 3


def test_ssh_shim_calls_the_agent():
    assert ssh_shim_text("/c/agent").splitlines()[-1] == 'exec /c/agent "$@"'


# ---------------------------------------------------------------- launcher command lines
def test_mpirun_argv():
    s = ClusterSpec(nodes=4, ranks_per_node=2, wiring="rails")
    f = ClusterFiles("/c/htc")
    argv = mpirun_argv(s, f, ["python", "-m", "x"], mca=[("coll_tuned_allreduce_algorithm", 4)],
                       env_names=["FOO"], environ={"PATH": "/bin", "HOROVOD_X": "1", "FOO": "2", "BAR": "3"})
    text = " ".join(argv)
    assert argv[:7] == ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "8"]
    assert "--hostfile /c/htc/hostfile" in text and "--mca plm_rsh_agent /c/htc/agent" in text
    assert "--mca btl_tcp_if_include eth0,eth1" in text and "--mca oob_tcp_if_include eth0" in text
    assert "--mca coll_tuned_allreduce_algorithm 4" in text
    assert "-x PATH" in text and "-x HOROVOD_X" in text and "-x FOO" in text and "BAR" not in text
    assert argv[-4:] == ["/c/htc/bindnic", "python", "-m", "x"]
    with pytest.raises(ValueError, match="-np 9"):
        mpirun_argv(s, f, ["x"], np=9)
    with pytest.raises(ValueError, match="no command"):
        mpirun_argv(s, f, [])


def test_horovodrun_argv_and_in_node():
    s = ClusterSpec(nodes=2, ranks_per_node=2, wiring="rails")
    f = ClusterFiles("/c/htc")
    argv = horovodrun_argv(s, f, ["python", "t.py"], np=3)
    assert argv[:6] == ["horovodrun", "--gloo", "--disable-cache", "-np", "3", "-H"]
    assert argv[6] == "node0:2,node1:2" and argv[-3:] == ["/c/htc/bindnic", "python", "t.py"]
    assert in_node(f, s, ["echo", "a b"]) == ["/c/htc/agent", "node0", "echo 'a b'"]


def test_rank_hosts_files_map_the_node_to_the_ranks_nic():
    s = ClusterSpec(nodes=2, ranks_per_node=2, wiring="rails")
    assert s.hosts_text(1, 1) == "127.0.0.1\tlocalhost\n10.213.0.1\tnode0\n10.213.1.2\tnode1\n"
    assert s.hosts_text(0, 0) == s.hosts_text()


def test_bindnic_under_horovodrun_mounts_the_ranks_hosts_file(tmp_path, fake_ip):
    """Gloo process sets take the host name's address: under horovodrun the wrapper re-execs the rank in a
    private mount namespace with hosts.<node>.<nic> on /etc/hosts (a fake unshare prints its arguments)."""
    s = ClusterSpec(nodes=2, ranks_per_node=2, wiring="rails")
    bind = _script(tmp_path, "bindnic", bindnic_text(s, "/c/htc"))
    fake = os.path.join(fake_ip["PATH"].split(":")[0], "unshare")
    with open(fake, "w") as f:
        f.write('#!/bin/bash\nprintf "%s\\n" "$@"\n')
    os.chmod(fake, 0o755)
    base = {k: v for k, v in fake_ip.items() if k not in ("OMPI_COMM_WORLD_LOCAL_RANK", "HOROVOD_LOCAL_RANK")}
    out = subprocess.run([bind, "python", "x.py"], env={**base, "HOROVOD_LOCAL_RANK": "1"}, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[:2] == ["--mount", "--"] and out[-3:] == [f"/c/htc/hosts.{os.uname().nodename}.eth1", "python", "x.py"]
    # under mpirun (Open MPI binds by btl_tcp_if_include) the command runs directly
    out = subprocess.run([bind, "echo", "direct"], env={**base, "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                                                         "HOROVOD_LOCAL_RANK": "1"}, capture_output=True, text=True)
    assert out.stdout == "direct\n"


def test_without_root_every_command_says_so(monkeypatch, capsys):
    from tools.cluster import net
    from tools.cluster.__main__ import main

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(net.ClusterError, match="needs root"):
        net.require_root()
    for argv in (["up", "--nodes", "2"], ["down"], ["run", "--nodes", "2", "--", "true"]):
        assert main(argv) == 2
        assert "needs root" in capsys.readouterr().err
    assert main(["up", "--nodes", "2", "--rate", "fast"]) == 2  # bad input is reported before anything runs
    assert "rate 'fast' is malformed" in capsys.readouterr().err
