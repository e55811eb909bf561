"""The small shell scripts an emulated cluster needs (pure: their text, from a :class:`ClusterSpec`).

* the **agent** (``rsh``/``ssh`` stand-in): ``AGENT [ssh options] HOST [ssh options] COMMAND...`` runs
  COMMAND (its words joined by spaces and run by bash, as ssh does) inside HOST's network namespace, in
  a private UTS namespace with HOST as hostname and the cluster's hosts file bind-mounted on /etc/hosts
  (``ip netns exec`` gives the process its own mount namespace, so nothing leaks out). Open MPI uses it
  as ``plm_rsh_agent``; horovodrun through the **ssh shim** (``bin/ssh`` first on PATH);
* **bindnic**: the per-rank wrapper: reads the rank's local rank (``OMPI_COMM_WORLD_LOCAL_RANK`` under
  mpirun, ``HOROVOD_LOCAL_RANK`` under horovodrun) and binds the rank to NIC eth(local rank mod K) by
  exporting ``OMPI_MCA_btl_tcp_if_include`` (Open MPI's TCP transport) and ``HOROVOD_GLOO_IFACE``
  (Horovod's Gloo transport), then execs the command; under horovodrun with several NICs, in a private
  mount namespace where /etc/hosts maps its node's name to its own NIC (Horovod 0.28.1's Gloo process
  sets ignore HOROVOD_GLOO_IFACE and take the host name's address).
"""
from __future__ import annotations

import shlex

from tools.cluster.layout import ClusterSpec

__all__ = ["agent_text", "ssh_shim_text", "bindnic_text", "rank_hosts_name"]

# ssh options that take an argument (OpenSSH's getopt string "b:c:D:E:e:F:I:i:J:L:l:m:O:o:p:Q:R:S:W:w:")
_SSH_ARG_OPTS = "bcDEeFIiJLlmOopQRSWw"


def agent_text(spec: ClusterSpec, hosts_file: str) -> str:
    """The agent script for ``spec``; ``hosts_file``: the path of :meth:`ClusterSpec.hosts_text` on disk."""
    cases = "\n".join(f"  {spec.hostname(i)}|{spec.address(i, 0)}) ns={shlex.quote(spec.node_ns(i))}; "
                      f"name={spec.hostname(i)} ;;" for i in range(spec.nodes))
    return f"""#!/bin/bash
# rsh/ssh agent of the emulated cluster {spec.name!r} (made by python -m tools.cluster up).
# Usage: $0 [ssh options] HOST [ssh options] [COMMAND...]: COMMAND runs in HOST's network namespace.
skip_opts() {{  # prints how many leading ssh options to drop
  local n=0
  while [ $# -gt 0 ]; do
    case "$1" in
      -[{_SSH_ARG_OPTS}]) n=$((n + 2)); shift 2 ;;
      -?*) n=$((n + 1)); shift ;;
      *) break ;;
    esac
  done
  echo $n
}}
shift "$(skip_opts "$@")"
host=${{1:?usage: $0 [ssh options] HOST [COMMAND...]}}; shift
while [ $# -gt 0 ]; do  # ssh options after the host name (horovodrun: -p PORT, -i FILE, -o OPT)
  case "$1" in
    -[{_SSH_ARG_OPTS}]) shift 2 ;;
    -[46AaCfGgKkMNnqsTtVvXxYy]) shift ;;
    *) break ;;
  esac
done
case "$host" in
{cases}
  *) echo "cluster agent: unknown host '$host' (cluster {spec.name!r} has {', '.join(spec.hostnames)})" >&2
     exit 255 ;;
esac
cmd="$*"
[ -n "$cmd" ] || cmd="exec /bin/bash -i"
exec ip netns exec "$ns" unshare --uts -- /bin/bash -c \\
  'hostname "$1" && mount --bind "$2" /etc/hosts && exec /bin/bash -c "$3"' agent "$name" {shlex.quote(hosts_file)} "$cmd"
"""


def ssh_shim_text(agent_path: str) -> str:
    """``bin/ssh`` for horovodrun: every ssh call goes through the agent."""
    return f"#!/bin/bash\n# ssh of the emulated cluster: runs the command inside the node's namespace\n" \
           f"exec {shlex.quote(agent_path)} \"$@\"\n"


def rank_hosts_name(hostname: str, nic: str) -> str:
    """File name of the hosts file a rank of ``hostname`` bound to ``nic`` sees (in the cluster's dir)."""
    return f"hosts.{hostname}.{nic}"


def bindnic_text(spec: ClusterSpec, hosts_dir: str | None = None) -> str:
    """The per-rank wrapper that binds each rank to NIC eth(local rank mod nics).

    Under horovodrun with several NICs it also gives the rank a private /etc/hosts (``hosts_dir``/
    :func:`rank_hosts_name`) in which its node's name resolves to its own NIC's address: Horovod 0.28.1
    builds the Gloo device of every process set (the torus' rows and columns) without HOROVOD_GLOO_IFACE,
    from the address of the host name, so without this all process-set traffic would use NIC 0.
    """
    hosts = ""
    if spec.nics > 1 and hosts_dir is not None:
        hosts = f"""if [ -z "${{OMPI_COMM_WORLD_LOCAL_RANK:-}}" ] && [ -n "${{HOROVOD_LOCAL_RANK:-}}" ]; then
  # Gloo process sets resolve the host name for their address: make it this rank's NIC
  exec unshare --mount -- /bin/bash -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' bindnic \
    {shlex.quote(hosts_dir)}/hosts."$(hostname)".$nic "$@"
fi
"""
    return f"""#!/bin/bash
# Binds this rank to its NIC on the emulated cluster {spec.name!r} ({spec.wiring} wiring, {spec.nics} NIC(s) per node),
# then runs the command. Local rank from OMPI_COMM_WORLD_LOCAL_RANK (mpirun) or HOROVOD_LOCAL_RANK (horovodrun).
lr=${{OMPI_COMM_WORLD_LOCAL_RANK:-${{HOROVOD_LOCAL_RANK:-}}}}
if [ -z "$lr" ]; then
  echo "bindnic: no local rank (neither OMPI_COMM_WORLD_LOCAL_RANK nor HOROVOD_LOCAL_RANK is set): launch under mpirun or horovodrun" >&2
  exit 2
fi
nic=eth$((lr % {spec.nics}))
export OMPI_MCA_btl_tcp_if_include=$nic HOROVOD_GLOO_IFACE=$nic HOROVOD_TORUS_CLUSTER_NIC=$nic
{hosts}exec "$@"
"""
