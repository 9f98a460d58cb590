# Sourced by start.sh and stop.sh: Slurm nodes as network namespaces on this machine.
#
# Node i is a network namespace (slurm-node<i>) joined to a bridge (slurmbr0) by a veth pair, with the address
# <NET>.<10+i> on the private subnet <NET>.0/24 that only this machine has; the bridge holds <NET>.1, the address of
# slurmctld. The namespaces get no default route, so nothing a job does can leave that subnet. Each slurmd starts in
# its node's network namespace and in a UTS namespace of its own with hostname node<i> (unshare --uts), so a job's
# tasks see their node's name and address, as on a real cluster. Everything else is shared with this machine: the
# filesystem (the repository and sweep directories stand in for the cluster filesystem), munge's socket, the PIDs.
NODE_NET="${SLURM_NODE_NET:-10.77.0}"
BRIDGE=slurmbr0
HOSTS_MARK="# slurm_cluster node (launchers/slurm_cluster)"

node_name() { echo "node$1"; }
node_addr() { echo "$NODE_NET.$((10 + $1))"; }
node_netns() { echo "slurm-node$1"; }

# the namespaced nodes that exist now, as indices
existing_nodes() {
  ip netns list 2>/dev/null | sed -n 's/^slurm-node\([0-9]*\).*/\1/p' | sort -n
}

# nodes_net_up N: bridge, namespaces, veth pairs and /etc/hosts names for nodes 1..N (idempotent)
nodes_net_up() {
  local n=$1 i ns
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    if ip -4 route show | awk '{print $1}' | grep -q "^$NODE_NET\."; then
      die "$NODE_NET.0/24 is already routed on this machine; pick another subnet: SLURM_NODE_NET=10.78.0 $0 ..."
    fi
    ip link add "$BRIDGE" type bridge
    ip addr add "$NODE_NET.1/24" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up
  for i in $(seq "$n"); do
    ns=$(node_netns "$i")
    ip netns list | grep -qw "$ns" || ip netns add "$ns"
    if ! ip link show "slurm-veth$i" >/dev/null 2>&1; then
      ip link add "slurm-veth$i" type veth peer name eth0 netns "$ns"
      ip -n "$ns" addr add "$(node_addr "$i")/24" dev eth0
    fi
    ip link set "slurm-veth$i" master "$BRIDGE" up
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
  done
  # node names resolve everywhere (MASTER_ADDR is the first node's name); /etc/hosts may be a bind mount: no rename
  { grep -v "$HOSTS_MARK" /etc/hosts; for i in $(seq "$n"); do
      echo "$(node_addr "$i") $(node_name "$i")  $HOSTS_MARK"; done; } > /etc/hosts.slurm_cluster
  cat /etc/hosts.slurm_cluster > /etc/hosts && rm -f /etc/hosts.slurm_cluster
}

# nodes_net_down: remove every namespaced node's network (its slurmd must be stopped first)
nodes_net_down() {
  local i
  for i in $(existing_nodes); do
    ip link del "slurm-veth$i" 2>/dev/null || true
    ip netns del "$(node_netns "$i")" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  if grep -q "$HOSTS_MARK" /etc/hosts; then
    grep -v "$HOSTS_MARK" /etc/hosts > /etc/hosts.slurm_cluster || true
    cat /etc/hosts.slurm_cluster > /etc/hosts && rm -f /etc/hosts.slurm_cluster
  fi
}

# node_slurmd I: start node I's slurmd in its namespaces (it daemonizes; its job steps inherit both namespaces)
node_slurmd() {
  local name
  name=$(node_name "$1")
  mkdir -p "/var/lib/slurm/slurmd-$name"
  nsenter --net="/run/netns/$(node_netns "$1")" unshare --uts sh -c "hostname $name && exec slurmd"
}

# stop_slurmds: every slurmd this script started (one per node, each with its own pid file)
stop_slurmds() {
  local f
  for f in /run/slurmd.pid /run/slurmd-*.pid; do [ -e "$f" ] && stop_pidfile "slurmd ($(basename "$f" .pid))" "$f"; done
  return 0
}

# stop_pidfile NAME PIDFILE: TERM, then KILL after 10 s
stop_pidfile() {
  local pid
  pid=$(cat "$2" 2>/dev/null || true)
  if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then rm -f "$2"; return 0; fi
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || { say "stopped $1"; rm -f "$2"; return 0; }; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$2"
  say "killed $1 (did not stop within 10s)"
}
