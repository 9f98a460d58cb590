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

# nodes_link N RATE: shape both ends of every node's veth pair to RATE (tc's units: 1gbit), as `link=` does for local
# ranks (launchers/link.py): the node's eth0 (what it sends) and its bridge port slurm-veth<i> (what it receives), each
# an htb class at RATE with a 1 ms burst (at least 64 KiB + one frame) and a quantum htb accepts. RATE empty: remove
# the shaping. A job's record reads the shaping back from the interface its ranks use (env.link).
nodes_link() {
  local n=$1 rate=$2 i bits burst quantum where dev
  for i in $(seq "$n"); do
    tc qdisc del dev "slurm-veth$i" root 2>/dev/null || true
    tc -n "$(node_netns "$i")" qdisc del dev eth0 root 2>/dev/null || true
  done
  [ -n "$rate" ] || return 0
  bits=$(awk -v r="$rate" 'BEGIN{ n=r; sub(/[kmgt]?bit$/, "", n); u=r; sub(/^[0-9.]+/, "", u);
    f=(u=="kbit")?1e3:(u=="mbit")?1e6:(u=="gbit")?1e9:(u=="tbit")?1e12:1; printf "%.0f", n*f }')
  burst=$(awk -v b="$bits" 'BEGIN{ x=b/8/1000; m=65536+1514; printf "%d", (x>m)?x:m }')
  quantum=$(awk -v b="$bits" 'BEGIN{ x=b/8/1000; if (x<1514) x=1514; if (x>200000) x=200000; printf "%d", x }')
  for i in $(seq "$n"); do
    for where in "" "-n $(node_netns "$i")"; do
      dev="slurm-veth$i"; [ -z "$where" ] || dev=eth0
      # shellcheck disable=SC2086
      tc $where qdisc add dev "$dev" root handle 1: htb default 1 \
        && tc $where class add dev "$dev" parent 1: classid 1:1 htb rate "${bits}bit" ceil "${bits}bit" \
             burst "$burst" cburst "$burst" quantum "$quantum" \
        || die "tc could not shape $dev of node $i to $rate (is the sch_htb module there?)"
    done
  done
  say "links shaped: every node's eth0 and its bridge port at $rate (htb, burst $burst B)"
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
