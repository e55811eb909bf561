"""The emulated cluster's plan: names, addresses, and the ``ip``/``tc`` commands that build it (pure).

Nothing here touches the system: :class:`ClusterSpec` turns (nodes, ranks per node, wiring, rate) into
namespace names, interface names, private addresses, the hosts file, the Open MPI hostfile, the planner's
``--cluster`` description and the exact command lines of ``up`` and ``down``, so all of it is unit-tested.

Layout (every object lives in a network namespace made for the cluster; the root namespace is untouched):

* a switch namespace ``<name>-sw`` holding one Linux bridge per rail (``br0``, ``br1``, ...);
* node namespaces ``<name>-n0`` .. ``<name>-n<N-1>`` (hostnames ``node0`` ..), each with NICs ``eth0`` ..
  (one veth each; the other end, ``n<i>r<k>``, is a port of bridge ``br<k>`` in the switch namespace);
* wiring ``node``: one NIC per node, every node on rail 0;
  wiring ``rails``: one NIC per rank (K = ranks per node), NIC k of every node on rail k, rail k on its
  own subnet; the switch namespace routes between rails (gateway ``.254`` on every bridge), and every node
  routes a packet by its source address (policy routing: a socket bound to NIC k's address leaves by NIC k);
* ``htb`` at the rate on both ends of every veth: the node end shapes what the NIC sends, the switch end
  what it receives (full duplex, each direction at the rate).

Addresses: rail k is the /24 number k inside a private /16 (default ``10.213.0.0/16``): NIC k of node i is
``10.213.k.(i+1)``, the rail's gateway ``10.213.k.254``.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re

__all__ = ["WIRINGS", "ClusterSpec", "parse_rate"]

WIRINGS = ("node", "rails")
_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,5}$")
_PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
_RATE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmg]?)(bit/s|bit|bps|b/s|b)?$")
_RATE_UNITS = {"": 1e-6, "k": 1e-3, "m": 1.0, "g": 1e3}
MAX_NODES = 250


def parse_rate(text) -> float | None:
    """Mbit/s from ``"200mbit"``, ``"200M"``, ``"1gbit"``, ``"500kbit"``, ``"200"`` (a bare number: Mbit/s);
    ``"0"``/``"none"``/``None``: unshaped (returns None).

    Raises:
        ValueError: a malformed rate or one below 1 kbit/s.
    """
    if text is None:
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        t = str(text).strip().lower()
        if t in ("0", "none", "off", "unshaped"):
            return None
        m = _RATE_RE.match(t)
        if not m:
            raise ValueError(f"rate {text!r} is malformed: use e.g. 200mbit, 1gbit, 500kbit or none (unshaped)")
        prefix, suffix = m.group(2), m.group(3)
        unit = "m" if not prefix and not suffix else prefix
        value = float(m.group(1)) * _RATE_UNITS[unit]
    if value == 0:
        return None
    if not value >= 1e-3:
        raise ValueError(f"rate {text!r} is below 1 kbit/s: use at least 1kbit, or none for an unshaped link")
    return value


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """An emulated cluster: ``nodes`` x ``ranks_per_node`` ranks, wired as ``node`` or ``rails``.

    Attributes:
        nodes: N emulated nodes, 1..250.
        ranks_per_node: L ranks (slots) per node, >= 1; in the rails wiring also the NICs per node.
        wiring: ``"node"`` (one NIC per node) or ``"rails"`` (one NIC per rank, NIC k on rail k).
        rate_mbit: every NIC's rate in Mbit/s (1e6 bit/s) in each direction; None = unshaped.
        name: namespace prefix, 1-6 lowercase letters/digits starting with a letter (``htc``).
        subnet: a private /16 (IPv4); rail k uses its k-th /24.

    Raises:
        ValueError: any attribute out of range (the message names it and the accepted values).
    """

    nodes: int
    ranks_per_node: int
    wiring: str = "node"
    rate_mbit: float | None = None
    name: str = "htc"
    subnet: str = "10.213.0.0/16"

    def __post_init__(self):
        for f, hi in (("nodes", MAX_NODES), ("ranks_per_node", 64)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= hi:
                raise ValueError(f"{f}={v!r} must be an integer in 1..{hi}")
        if self.wiring not in WIRINGS:
            raise ValueError(f"wiring {self.wiring!r} is unknown: choose {' or '.join(WIRINGS)}")
        if self.rate_mbit is not None and not self.rate_mbit > 0:
            raise ValueError(f"rate {self.rate_mbit} Mbit/s must be > 0 (None: unshaped)")
        if not _NAME_RE.match(self.name):
            raise ValueError(f"cluster name {self.name!r} must be 1-6 lowercase letters or digits starting with "
                             f"a letter (it prefixes namespace names)")
        try:
            net = ipaddress.ip_network(self.subnet)
        except ValueError as e:
            raise ValueError(f"subnet {self.subnet!r} is not an IPv4 network such as 10.213.0.0/16 ({e})") from None
        if net.version != 4 or net.prefixlen != 16 or not any(net.subnet_of(p) for p in _PRIVATE):
            raise ValueError(f"subnet {self.subnet!r} must be a private IPv4 /16 (inside 10.0.0.0/8, "
                             f"172.16.0.0/12 or 192.168.0.0/16), e.g. 10.213.0.0/16")

    # ------------------------------------------------------------------ names
    @property
    def size(self) -> int:
        """Ranks in all: nodes * ranks_per_node."""
        return self.nodes * self.ranks_per_node

    @property
    def nics(self) -> int:
        """NICs per node: ranks_per_node in the rails wiring, else 1."""
        return self.ranks_per_node if self.wiring == "rails" else 1

    @property
    def switch_ns(self) -> str:
        return f"{self.name}-sw"

    def node_ns(self, i: int) -> str:
        self._check_node(i)
        return f"{self.name}-n{i}"

    @property
    def namespaces(self) -> list[str]:
        """Every namespace of the cluster, switch first."""
        return [self.switch_ns] + [self.node_ns(i) for i in range(self.nodes)]

    def hostname(self, i: int) -> str:
        self._check_node(i)
        return f"node{i}"

    @property
    def hostnames(self) -> list[str]:
        return [self.hostname(i) for i in range(self.nodes)]

    @staticmethod
    def nic_name(k: int) -> str:
        """The node-side name of NIC k (the same on every node): ``eth<k>``."""
        return f"eth{k}"

    @staticmethod
    def port_name(i: int, k: int) -> str:
        """The switch-side end of node i's NIC k: ``n<i>r<k>`` (a port of bridge ``br<k>``)."""
        return f"n{i}r{k}"

    @staticmethod
    def bridge_name(k: int) -> str:
        return f"br{k}"

    def local_nic(self, local_rank: int) -> str:
        """The NIC a rank of local rank ``local_rank`` binds to: eth(local_rank mod nics)."""
        return self.nic_name(local_rank % self.nics)

    def _check_node(self, i):
        if not 0 <= i < self.nodes:
            raise ValueError(f"node {i} is outside 0..{self.nodes - 1}")

    # ------------------------------------------------------------------ addresses
    def rail_network(self, k: int) -> ipaddress.IPv4Network:
        """Rail k's /24."""
        if not 0 <= k < self.nics:
            raise ValueError(f"rail {k} is outside 0..{self.nics - 1}")
        base = ipaddress.ip_network(self.subnet)
        return ipaddress.ip_network((int(base.network_address) + 256 * k, 24))

    def address(self, i: int, k: int = 0) -> str:
        """Node i's NIC k address (``.i+1`` on rail k)."""
        self._check_node(i)
        return str(self.rail_network(k).network_address + i + 1)

    def gateway(self, k: int) -> str:
        """The switch namespace's address on rail k (``.254``), the router between rails."""
        return str(self.rail_network(k).network_address + 254)

    def hosts_text(self, node: int | None = None, nic: int = 0) -> str:
        """/etc/hosts seen inside the cluster: localhost, and every node's name at its NIC 0; with ``node``,
        that node's own name at its NIC ``nic`` instead (the view of a rank bound to that NIC)."""
        lines = ["127.0.0.1\tlocalhost"] + [
            f"{self.address(i, nic if i == node else 0)}\t{self.hostname(i)}" for i in range(self.nodes)]
        return "\n".join(lines) + "\n"

    def hostfile_text(self, ranks_per_node: int | None = None) -> str:
        """Open MPI hostfile: ``node<i> slots=L`` per line."""
        slots = self.ranks_per_node if ranks_per_node is None else ranks_per_node
        return "".join(f"{h} slots={slots}\n" for h in self.hostnames)

    def horovodrun_hosts(self, ranks_per_node: int | None = None) -> str:
        """horovodrun ``-H``: ``node0:L,node1:L,...``."""
        slots = self.ranks_per_node if ranks_per_node is None else ranks_per_node
        return ",".join(f"{h}:{slots}" for h in self.hostnames)

    # ------------------------------------------------------------------ the planner's view
    def planner_description(self, inter_latency_us: float = 0.0, intra_latency_us: float = 1.0,
                            intra_bandwidth_gbps: float = 1.0) -> dict:
        """The ``python -m horovod_torus.plan --cluster FILE.json`` description of this cluster.

        inter bandwidth (GB/s = 1e9 B/s, per node, all NICs) = nics * rate / 8e3 from the nominal rate; the
        latencies and the intra-node link are not known from the wiring (shared memory on the host): pass
        measured values, or calibrate (``--calibrate``). An unshaped cluster gets 1 GB/s per NIC, a guess.
        """
        per_nic_gbps = (self.rate_mbit / 8e3) if self.rate_mbit else 1.0
        return {"name": f"cluster-in-a-box {self.nodes}x{self.ranks_per_node} {self.wiring}"
                        + (f" {self.rate_mbit:g} Mbit/s" if self.rate_mbit else " unshaped"),
                "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
                "intra": {"latency_us": intra_latency_us, "bandwidth_gbps": intra_bandwidth_gbps},
                "inter": {"latency_us": inter_latency_us, "bandwidth_gbps": per_nic_gbps * self.nics},
                "gamma_ps_per_byte": 0.0, "nics_per_node": self.nics}

    # ------------------------------------------------------------------ commands
    def _shape(self, ns: str, dev: str) -> list[list[str]]:
        if self.rate_mbit is None:
            return []
        rate = f"{self.rate_mbit:g}mbit"
        return [["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb",
                 "default", "10"],
                ["ip", "netns", "exec", ns, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10",
                 "htb", "rate", rate, "ceil", rate]]

    def up_commands(self) -> list[list[str]]:
        """Every command of ``up``, in order (argv lists for ``ip`` and ``tc``; run as root)."""
        sw = self.switch_ns
        cmds = [["ip", "netns", "add", ns] for ns in self.namespaces]
        cmds.append(["ip", "-n", sw, "link", "set", "lo", "up"])
        for k in range(self.nics):
            br = self.bridge_name(k)
            cmds += [["ip", "-n", sw, "link", "add", br, "type", "bridge"],
                     ["ip", "-n", sw, "link", "set", br, "up"]]
            if self.wiring == "rails":
                cmds.append(["ip", "-n", sw, "addr", "add", f"{self.gateway(k)}/24", "dev", br])
        if self.wiring == "rails":
            cmds.append(["ip", "netns", "exec", sw, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
        for i in range(self.nodes):
            ns = self.node_ns(i)
            # no reverse-path filter: in the rails wiring a NIC receives packets from other rails' subnets
            cmds += [["ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv4.conf.{c}.rp_filter=0"]
                     for c in ("all", "default")]
            cmds.append(["ip", "-n", ns, "link", "set", "lo", "up"])
            for k in range(self.nics):
                nic, port = self.nic_name(k), self.port_name(i, k)
                addr = self.address(i, k)
                cmds += [["ip", "-n", ns, "link", "add", nic, "type", "veth", "peer", "name", port, "netns", sw],
                         ["ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", nic],
                         ["ip", "-n", ns, "link", "set", nic, "up"],
                         ["ip", "-n", sw, "link", "set", port, "master", self.bridge_name(k)],
                         ["ip", "-n", sw, "link", "set", port, "up"]]
                cmds += self._shape(ns, nic) + self._shape(sw, port)
                if self.wiring == "rails":
                    table = str(100 + k)
                    cmds += [["ip", "-n", ns, "rule", "add", "from", addr, "table", table, "pref", str(1000 + k)],
                             ["ip", "-n", ns, "route", "add", str(self.rail_network(k)), "dev", nic, "src", addr,
                              "table", table],
                             ["ip", "-n", ns, "route", "add", self.subnet, "via", self.gateway(k), "dev", nic,
                              "src", addr, "table", table]]
        return cmds

    def down_commands(self) -> list[list[str]]:
        """``ip netns del`` of every namespace, nodes first (their veths go with them)."""
        return [["ip", "netns", "del", ns] for ns in self.namespaces[1:] + self.namespaces[:1]]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ClusterSpec":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})
