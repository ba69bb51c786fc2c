#!/usr/bin/env bash
# An emulated multi-node cluster on one Linux machine, for measuring what
# communication compression buys when the links between nodes are slow.
#
# Each "node" is a network namespace with its own hostname (a UTS namespace per
# job, so Open MPI sees distinct hosts and uses TCP, not shared memory, between
# them), joined by a veth to a private bridge that lives in its own hub
# namespace (the host's network is never touched). Each node's link is shaped in
# both directions: tbf for bandwidth, and a one-way latency added on the node's
# outgoing side by netem where the kernel has it, else by our MPI transport
# (OCC_EMULATED_LATENCY, exported to every rank of `run`: each message to another
# node is handed to the network no earlier than its send time + the latency;
# docs/emulated-cluster.md, "Latency"). Ranks inside a node talk over shared memory (unshaped),
# so with --ranks-per-node = T Megatron's layout puts TP inside a node and PP/DP
# across the shaped links, as in the paper.
#
#   scripts/cluster.sh up    [--nodes N] [--bandwidth RATE] [--latency DELAY] [--latency-via HOW] [--name NAME]
#   scripts/cluster.sh run   [same flags] [--ranks-per-node R] -- PROGRAM [ARGS...]
#   scripts/cluster.sh shape [--bandwidth RATE] [--latency DELAY] [--latency-via HOW] [--name NAME]
#   scripts/cluster.sh stats [--name NAME]     bytes each node's link carried (tc counters)
#   scripts/cluster.sh check                   can this machine build a cluster? (exit 0, or 77 and why)
#   scripts/cluster.sh down  [--name NAME]     remove everything (also leftovers of a killed run)
#
# `run` launches `mpirun -np N*R` from node 0 with Open MPI's rsh launcher set to
# an agent that enters the target node's namespaces. If the cluster is not up,
# `run` creates it and always removes it on exit; if it is up (`up`), `run`
# applies the shaping flags given (if any) and leaves it up.
# RATE is tc's syntax (200mbit, 1gbit; 0 = unshaped), DELAY too (50ms, 200us; 0 = none added:
# veth + TCP already cost tens of microseconds, more than InfiniBand's ~2 us). HOW: auto
# (netem where the kernel has it, else the transport), netem, or transport. Defaults: 2
# nodes, 2 ranks per node, 300mbit, no added latency (docs/emulated-cluster.md).
set -euo pipefail

NAME=occ NODES=2 RANKS_PER_NODE=2 BANDWIDTH=300mbit LATENCY=0 LATENCY_VIA=auto
SUBNET_PREFIX=10.213.0  # private subnet of the bridge; node k is .(k+1)
MPI_EXTRA=()
SHAPING_GIVEN=0

die() { echo "error: $*" >&2; exit 2; }

cmd=${1:-}
[[ -n $cmd ]] || die "missing command; use: cluster.sh up|run|shape|stats|check|down (see the header of scripts/cluster.sh)"
shift
PROGRAM=()
while (($#)); do
  case $1 in
    --nodes) NODES=$2; shift 2;;
    --ranks-per-node) RANKS_PER_NODE=$2; shift 2;;
    --bandwidth) BANDWIDTH=$2; SHAPING_GIVEN=1; shift 2;;
    --latency) LATENCY=$2; SHAPING_GIVEN=1; shift 2;;
    --latency-via) LATENCY_VIA=$2; shift 2;;
    --name) NAME=$2; shift 2;;
    --mpi-arg) MPI_EXTRA+=("$2"); shift 2;;
    --) shift; PROGRAM=("$@"); break;;
    *) die "unknown flag '$1'; flags: --nodes N --ranks-per-node R --bandwidth RATE --latency DELAY --latency-via HOW --name NAME --mpi-arg ARG -- PROGRAM";;
  esac
done
[[ $NODES =~ ^[0-9]+$ && $NODES -ge 1 && $NODES -le 64 ]] || die "--nodes must be 1..64 (got '$NODES')"
[[ $RANKS_PER_NODE =~ ^[0-9]+$ && $RANKS_PER_NODE -ge 1 ]] || die "--ranks-per-node must be a positive integer (got '$RANKS_PER_NODE')"
[[ $NAME =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name must be 1-8 lowercase letters/digits starting with a letter (interface names are limited to 15 characters)"
rate_ok() { [[ $1 == 0 || $1 =~ ^[0-9.]+([kmg]?bit|[kmg]?bps)$ ]]; }
rate_bytes_per_s() {  # tc rate -> bytes/s (integer)
  awk -v r="$1" 'BEGIN { match(r, /^[0-9.]+/); v = substr(r, 1, RLENGTH); u = substr(r, RLENGTH + 1)
    m = 1; if (u ~ /^k/) m = 1e3; else if (u ~ /^m/) m = 1e6; else if (u ~ /^g/) m = 1e9
    if (u ~ /bit$/) m /= 8; printf "%d\n", v * m }'
}
delay_ok() { [[ $1 == 0 || $1 =~ ^[0-9.]+(us|ms|s)$ ]]; }
rate_ok "$BANDWIDTH" || die "--bandwidth '$BANDWIDTH' is not a tc rate; use e.g. 200mbit, 1gbit, or 0 for unshaped"
delay_ok "$LATENCY" || die "--latency '$LATENCY' is not a tc time; use e.g. 0.2ms, 50us, or 0 for none"
awk -v d="$LATENCY" 'BEGIN { exit !(d + 0 == 0) }' && LATENCY=0  # 0ms, 0.0us: none
[[ $LATENCY_VIA =~ ^(auto|netem|transport)$ ]] || die "--latency-via '$LATENCY_VIA' is not a mechanism; use auto, netem or transport"

HUB=$NAME-hub BRIDGE=br0
STATE=/run/occ-cluster/$NAME
node_ns() { echo "$NAME-n$1"; }
node_ip() { echo "$SUBNET_PREFIX.$(($1 + 1))"; }
node_host() { echo "$NAME-node$1"; }

# Why a cluster cannot be built here, or nothing (exit 0) when it can.
why_not() {
  [[ $(id -u) -eq 0 ]] || { echo "not root: network namespaces and tc need root (run with sudo)"; return; }
  local tool
  for tool in ip tc unshare mpirun; do
    command -v "$tool" > /dev/null || { echo "'$tool' is not installed (apt-get install iproute2 util-linux openmpi-bin)"; return; }
  done
  local probe=occprobe$$ err
  if ! err=$(ip netns add "$probe" 2>&1); then echo "cannot create a network namespace: $err"; return; fi
  if ! err=$(ip netns exec "$probe" unshare --uts true 2>&1); then ip netns del "$probe"; echo "cannot create a UTS namespace: $err"; return; fi
  if ! err=$(ip netns exec "$probe" sh -c 'ip link add v0 type veth peer name v1 && tc qdisc add dev v0 root tbf rate 1gbit burst 64k limit 64k' 2>&1); then
    ip netns del "$probe"; echo "cannot create veth links or tc tbf qdiscs: $err"; return
  fi
  ip netns del "$probe"
}

# netem (latency) is optional: some kernels are built without CONFIG_NET_SCH_NETEM.
have_netem() {
  local probe=occprobe$$ ok=0
  ip netns add "$probe" 2> /dev/null || return 1
  ip netns exec "$probe" sh -c 'ip link add v0 type veth peer name v1 && tc qdisc add dev v0 root netem delay 1ms' 2> /dev/null && ok=1
  ip netns del "$probe"
  ((ok))
}
# How --latency is added: none, netem (on the links) or transport (OCC_EMULATED_LATENCY).
choose_latency_mechanism() {
  if [[ $LATENCY == 0 ]]; then LATENCY_BY=none; return; fi
  case $LATENCY_VIA in
    transport) LATENCY_BY=transport;;
    netem) have_netem || die "--latency-via netem: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM is not set); use --latency-via transport (or auto)"
           LATENCY_BY=netem;;
    *) if have_netem; then LATENCY_BY=netem; else LATENCY_BY=transport; fi;;
  esac
}
latency_words() {
  case $LATENCY_BY in
    none) echo "no added latency";;
    netem) echo "latency $LATENCY one way, by netem on the links";;
    *) echo "latency $LATENCY one way, added by the MPI transport to every message between nodes (OCC_EMULATED_LATENCY; $(have_netem && echo 'chosen with --latency-via transport' || echo 'this kernel has no netem'))";;
  esac
}

require_capable() {
  local why
  why=$(why_not)
  [[ -z $why ]] || { echo "error: cannot build the emulated cluster: $why" >&2; exit 3; }
}

is_up() { [[ -f $STATE/nodes ]]; }

# tc on one interface: tbf (bandwidth) as root, netem (latency) below it.
shape_dev() {  # NS DEV RATE DELAY
  local ns=$1 dev=$2 rate=$3 delay=$4
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2> /dev/null || true
  local parent=root
  if [[ $rate != 0 ]]; then
    # burst: at least 64 KiB (a GSO super-packet) or 2 ms at the rate; limit ~ 100 ms of queue
    local bps
    bps=$(rate_bytes_per_s "$rate")
    local burst=$((bps / 500 > 65536 ? bps / 500 : 65536)) limit=$((bps / 10 > 262144 ? bps / 10 : 262144))
    ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: tbf rate "$rate" burst "$burst" limit "$limit"
    parent="parent 1:1"
  fi
  if [[ $delay != 0 ]]; then
    # shellcheck disable=SC2086
    ip netns exec "$ns" tc qdisc add dev "$dev" $parent handle 10: netem delay "$delay" limit 100000
  fi
}

apply_shaping() {
  choose_latency_mechanism
  local k link_delay=0
  [[ $LATENCY_BY == netem ]] && link_delay=$LATENCY
  for ((k = 0; k < $(cat "$STATE/nodes"); k++)); do
    shape_dev "$(node_ns "$k")" eth0 "$BANDWIDTH" "$link_delay"  # node -> bridge: bandwidth + latency
    shape_dev "$HUB" "h$k" "$BANDWIDTH" 0                         # bridge -> node: bandwidth
  done
  echo "$BANDWIDTH $LATENCY $LATENCY_BY" > "$STATE/shaping"
}

cluster_up() {
  require_capable
  choose_latency_mechanism
  is_up && die "cluster '$NAME' is already up ($(cat "$STATE/nodes") nodes); run 'scripts/cluster.sh down --name $NAME' first"
  mkdir -p "$STATE"
  ip netns add "$HUB"
  echo "$NODES" > "$STATE/nodes"  # written early so that `down` cleans a half-built cluster
  ip netns exec "$HUB" ip link add "$BRIDGE" type bridge
  ip netns exec "$HUB" ip link set "$BRIDGE" up
  ip netns exec "$HUB" ip link set lo up
  local k ns
  for ((k = 0; k < NODES; k++)); do
    ns=$(node_ns "$k")
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link add eth0 type veth peer name "h$k" netns "$HUB"
    ip netns exec "$ns" ip addr add "$(node_ip "$k")/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$HUB" ip link set "h$k" master "$BRIDGE"
    ip netns exec "$HUB" ip link set "h$k" up
  done
  apply_shaping
  # The launch agent Open MPI runs as "agent HOST COMMAND...": enter HOST's namespaces,
  # give the job a UTS namespace with the node's hostname, run the command as ssh would.
  cat > "$STATE/agent.sh" << EOF
#!/bin/sh
host=\$1; shift
k=\$((\${host##*.} - 1))
exec ip netns exec "$NAME-n\$k" unshare --uts -- sh -c 'hostname "\$1" && exec sh -c "\$2"' sh "$NAME-node\$k" "\$*"
EOF
  chmod +x "$STATE/agent.sh"
  : > "$STATE/hostfile"
  for ((k = 0; k < NODES; k++)); do echo "$(node_ip "$k") slots=$RANKS_PER_NODE" >> "$STATE/hostfile"; done
  echo "cluster '$NAME': $NODES nodes ($SUBNET_PREFIX.1-$NODES on bridge $BRIDGE in netns $HUB), links $BANDWIDTH, $(latency_words)"
}

cluster_down() {
  local ns found=0
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}'); do
    if [[ $ns == "$HUB" || $ns =~ ^$NAME-n[0-9]+$ ]]; then
      # Kill what still runs in the namespace (a killed job's ranks), then delete it.
      ip netns pids "$ns" 2> /dev/null | xargs -r kill -9 2> /dev/null || true
      ip netns del "$ns" && found=1
    fi
  done
  rm -rf "$STATE"
  ((found)) && echo "cluster '$NAME' removed" || true
}

link_stats() {  # one line per node: bytes and packets its link sent and received
  local k n
  n=$(cat "$STATE/nodes")
  for ((k = 0; k < n; k++)); do
    ip netns exec "$(node_ns "$k")" cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth0/statistics/rx_bytes |
      paste -sd' ' | awk -v h="$(node_host "$k")" '{printf "%s tx_bytes=%s rx_bytes=%s\n", h, $1, $2}'
  done
}

cluster_run() {
  ((${#PROGRAM[@]})) || die "run needs a program after '--', e.g. scripts/cluster.sh run -- build/optimus-cc train ..."
  local created=0
  if is_up; then
    [[ $(cat "$STATE/nodes") -eq $NODES ]] || die "cluster '$NAME' is up with $(cat "$STATE/nodes") nodes, not $NODES; use --nodes $(cat "$STATE/nodes") or 'down' it"
    if ((SHAPING_GIVEN)); then apply_shaping; else read -r _ LATENCY LATENCY_BY < "$STATE/shaping"; LATENCY_BY=${LATENCY_BY:-none}; fi
  else
    created=1
    trap 'cluster_down > /dev/null' EXIT
    trap 'exit 130' INT TERM
    cluster_up > /dev/null
  fi
  # Rewrite the hostfile: the ranks per node may differ from the run that built it.
  : > "$STATE/hostfile"
  local k
  for ((k = 0; k < NODES; k++)); do echo "$(node_ip "$k") slots=$RANKS_PER_NODE" >> "$STATE/hostfile"; done
  local np=$((NODES * RANKS_PER_NODE))
  local env_args=()
  local v
  # OCC_CPU_GEMM (and its library) can change the numbers: the ranks on every node get the caller's.
  for v in OPENBLAS_NUM_THREADS OMP_NUM_THREADS OCC_TEST_DATA OCC_CPU_GEMM OCC_ONEDNN_LIBRARY; do [[ -n ${!v:-} ]] && env_args+=(-x "$v"); done
  # Every rank gets the transport's latency (0: none, the plain path), whatever the caller's environment holds.
  export OCC_EMULATED_LATENCY=0
  [[ $LATENCY_BY == transport ]] && OCC_EMULATED_LATENCY=$LATENCY
  env_args+=(-x OCC_EMULATED_LATENCY)
  [[ $LATENCY_BY == none ]] || echo "cluster '$NAME': $(latency_words)" >&2
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  local rc=0 before
  before=$(link_stats 2> /dev/null || true)
  # The TCP progress thread moves a message's bytes while its ranks compute, as NCCL's
  # kernels and the NICs do on a GPU cluster (without it a nonblocking send larger than
  # the eager limit waits for the sender's next MPI call).
  # mpirun itself runs on node 0 (its own netns and hostname); ranks 0..R-1 are local to it.
  ip netns exec "$(node_ns 0)" unshare --uts -- sh -c 'hostname "$1"; shift; exec "$@"' sh "$(node_host 0)" \
    mpirun -np "$np" --hostfile "$STATE/hostfile" --map-by slot --bind-to none \
    --mca plm_rsh_agent "$STATE/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$SUBNET_PREFIX.0/24" --mca btl_tcp_progress_thread "${OCC_TCP_PROGRESS_THREAD:-1}" \
    --mca oob_tcp_if_include "$SUBNET_PREFIX.0/24" "${env_args[@]}" "${MPI_EXTRA[@]}" \
    "${PROGRAM[@]}" || rc=$?
  # What each node's link carried during this job (counters minus their values before it).
  if [[ -n ${OCC_CLUSTER_STATS:-} ]]; then
    paste -d' ' <(echo "$before") <(link_stats) | awk '{
      split($2, a, "="); split($3, b, "="); split($5, c, "="); split($6, d, "=")
      printf "%s tx_bytes=%d rx_bytes=%d\n", $1, c[2] - a[2], d[2] - b[2] }' > "$OCC_CLUSTER_STATS"
  fi
  return $rc
}

case $cmd in
  up) cluster_up;;
  down) cluster_down;;
  run) cluster_run;;
  shape) is_up || die "cluster '$NAME' is not up; run 'scripts/cluster.sh up' first"; apply_shaping
         echo "cluster '$NAME': links $BANDWIDTH, $(latency_words)";;
  stats) is_up || die "cluster '$NAME' is not up"; link_stats;;
  check) why=$(why_not); if [[ -n $why ]]; then echo "$why"; exit 77; fi
         echo "ok: this machine can build an emulated cluster (bandwidth: tbf; latency: $(have_netem && echo netem || echo 'in the MPI transport, this kernel has no netem'))";;
  *) die "unknown command '$cmd'; use: cluster.sh up|run|shape|stats|check|down";;
esac
