#!/usr/bin/env bash
# cluster.sh: an emulated cluster on one machine, for multi-host tests and
# benchmarks. Each host is a network namespace; each network is a Linux
# bridge in a "switch" namespace of its own, and each host is joined to it by
# a veth pair whose two ends are shaped to RATE (tbf), so a host's traffic is
# limited in both directions. Nothing is created in the root namespace: the
# addresses (10.199.X.0/24, X derived from the cluster's id) exist only
# inside the cluster's namespaces, and deleting the namespaces removes every
# link, qdisc and iptables rule with them.
#
#   cluster.sh up [-n HOSTS] [-r RATE[,RATE2...]] [-m MTU] [-i ID] [-o OWNER_PID] [-- CMD...]
#       Create a cluster (RATE per network, e.g. 1gbit or 1gbit,100mbit for a
#       second network; default 1 host network at 1gbit) and print its id.
#       With -- CMD: run CMD with SPARCML_CLUSTER=ID exported, then remove the
#       cluster whatever happens (trap). Without an owner the cluster stays up
#       until `down`; with -o it is stale once that process is gone.
#   cluster.sh down ID          remove the cluster (processes, namespaces, state)
#   cluster.sh sweep [--all]    remove clusters whose owner is gone (--all: every one)
#   cluster.sh list             clusters that are up
#   cluster.sh info ID          one line per host: index, namespace, interfaces and addresses
#   cluster.sh exec ID HOST CMD...          run CMD on host HOST (0-based), whose
#       hostname is hHOST (a UTS namespace per command)
#   cluster.sh run ID [-p RANKS_PER_HOST] [-t TOKEN] [-e VAR=VALUE]... -- CMD...
#       start a sparcml job: RANKS_PER_HOST ranks on every host, with the
#       launcher's environment (SPARCML_RANK/SIZE/ADDR/TOKEN/IFNAME) set;
#       output prefixed by "[rank] "; exits with the first failing status.
#   cluster.sh probe ID [FROM TO [SECONDS [RATE]]]  iperf3 from host FROM to host
#       TO (default 0 1); fails unless the figure is within 5% of RATE
#       (default the host network's rate).
#   cluster.sh shape ID HOST|all RATE [NET]  change a host's rate (both directions)
#   cluster.sh loss ID HOST P               drop fraction P of the host's packets, each
#       direction (dropped on arrival, so senders see loss on the wire)
#   cluster.sh link ID HOST up|down [NET]   plug or unplug a host's cable at the switch
#   cluster.sh kill ID HOST                 SIGKILL every process on the host
#   cluster.sh add ID                       add a host (shaped like host 0), print its index
#
# Environment: SPARCML_CLUSTER_OFFLOAD=off turns GSO/TSO/GRO off on the veths
# (default on: tbf accounts every segment's headers, and the burst holds
# whole 64 KiB segments, so the average rate is exact; see README.md).
# SPARCML_CLUSTER_BURST=BYTES sets tbf's bucket instead of the default
# (512 KiB, or 1 ms at the rate if more), to see what the bucket's bursts
# do to a figure.
set -euo pipefail

PREFIX=sparcml-cl
STATE_ROOT=${SPARCML_CLUSTER_STATE:-/run/sparcml-cluster}
PORT_BASE=29500

die() { echo "cluster.sh: $*" >&2; exit 1; }
note() { echo "cluster.sh: $*" >&2; }

need_root() {
	[ "$(id -u)" = 0 ] || die "must run as root (network namespaces and tc need CAP_NET_ADMIN)"
	command -v ip >/dev/null || die "ip (iproute2) not found"
	command -v tc >/dev/null || die "tc (iproute2) not found"
}

ns_host() { echo "$PREFIX-$1-h$2"; }
ns_switch() { echo "$PREFIX-$1-sw"; }
state_dir() { echo "$STATE_ROOT/$1"; }
get() { cat "$(state_dir "$1")/$2"; }

check_id() {
	[[ $1 =~ ^[0-9a-f]{6}$ ]] || die "bad cluster id '$1' (want 6 hex digits)"
	[ -d "$(state_dir "$1")" ] || die "no cluster $1 (see: cluster.sh list)"
}

# Process start time (field 22 of /proc/PID/stat), so a reused pid is not
# taken for the owner.
start_time() { awk '{sub(/^.*\) /, ""); print $20}' "/proc/$1/stat" 2>/dev/null || true; }

owner_alive() {
	local owner pid st
	owner=$(cat "$(state_dir "$1")/owner" 2>/dev/null || echo "")
	[ -z "$owner" ] && return 1
	[ "$owner" = none ] && return 0
	read -r pid st <<<"$owner"
	[ -n "$pid" ] && [ "$(start_time "$pid")" = "$st" ]
}

# Rates like 1gbit, 100mbit, 10gbit, 500kbit in bits per second.
rate_bps() {
	local r=${1,,}
	case $r in
	*gbit) echo $((${r%gbit} * 1000000000)) ;;
	*mbit) echo $((${r%mbit} * 1000000)) ;;
	*kbit) echo $((${r%kbit} * 1000)) ;;
	*bit) echo "${r%bit}" ;;
	*) die "bad rate '$1' (want e.g. 1gbit, 100mbit)" ;;
	esac
}

# tbf's bucket: room for several 64 KiB GSO segments, and at least 1 ms at
# the rate, so the timer's granularity does not cap the rate.
burst_bytes() {
	local bps b
	bps=$(rate_bps "$1")
	b=$((bps / 8 / 1000))
	[ "$b" -lt 524288 ] && b=524288
	echo "${SPARCML_CLUSTER_BURST:-$b}"
}

subnet_of() { echo "10.199.$(($(get "$1" subnet) + $2))"; }

# Shapes one end of a link: egress of DEV in namespace NS.
shape_dev() {
	local ns=$1 dev=$2 rate=$3
	tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$(burst_bytes "$rate")" latency 50ms
}

offload_dev() {
	local ns=$1 dev=$2 mode=${SPARCML_CLUSTER_OFFLOAD:-on}
	[ "$mode" = on ] && return 0
	command -v ethtool >/dev/null || die "ethtool not found (SPARCML_CLUSTER_OFFLOAD=off needs it)"
	ip netns exec "$ns" ethtool -K "$dev" gso off tso off gro off >/dev/null
}

# add_host ID INDEX: namespace, one veth per network into the switch, shaped.
# Every step is checked by hand: set -e does not apply in a function called
# from a condition, as this one is.
add_host() {
	local id=$1 i=$2 ns sw nets mtu k rate port
	ns=$(ns_host "$id" "$i")
	sw=$(ns_switch "$id")
	nets=$(get "$id" nets) && mtu=$(get "$id" mtu) || return 1
	ip netns add "$ns" || return 1
	ip -n "$ns" link set lo up || return 1
	for ((k = 0; k < nets; k++)); do
		rate=$(get "$id" "rate$k") || return 1
		port="h${i}n$k"
		ip link add name "eth$k" netns "$ns" mtu "$mtu" type veth peer name "$port" netns "$sw" mtu "$mtu" &&
			ip -n "$sw" link set "$port" master "br$k" up &&
			ip -n "$ns" addr add "$(subnet_of "$id" "$k").$((i + 1))/24" dev "eth$k" &&
			ip -n "$ns" link set "eth$k" up &&
			offload_dev "$ns" "eth$k" && offload_dev "$sw" "$port" &&
			shape_dev "$ns" "eth$k" "$rate" && shape_dev "$sw" "$port" "$rate" || return 1
	done
}

# free_subnet ID: a third octet (multiple of 4) no live cluster uses, derived
# from the id so that two runs normally differ without looking.
free_subnet() {
	local id=$1 x used d try
	x=$(((16#$id % 64) * 4))
	used=" "
	for d in "$STATE_ROOT"/*/subnet; do
		[ -f "$d" ] && used+="$(cat "$d") "
	done
	for ((try = 0; try < 64; try++)); do
		case $used in *" $x "*) x=$(((x + 4) % 256)) ;; *) echo "$x"; return ;; esac
	done
	die "no free subnet: 64 clusters are up"
}

cmd_up() {
	local hosts=1 rates=1gbit mtu=9000 id="" owner=none i k
	while [ $# -gt 0 ]; do
		case $1 in
		-n) hosts=$2; shift 2 ;;
		-r) rates=$2; shift 2 ;;
		-m) mtu=$2; shift 2 ;;
		-i) id=$2; shift 2 ;;
		-o) owner="$2 $(start_time "$2")"; shift 2 ;;
		--) shift; break ;;
		*) die "up: unknown option $1" ;;
		esac
	done
	need_root
	[[ $hosts =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 250 ] || die "up: -n $hosts: want 1..250 hosts"
	sweep_stale
	[ -n "$id" ] || id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
	[[ $id =~ ^[0-9a-f]{6}$ ]] || die "up: bad id '$id' (want 6 hex digits)"
	local dir
	dir=$(state_dir "$id")
	mkdir -p "$STATE_ROOT"
	mkdir "$dir" 2>/dev/null || die "up: cluster $id exists"
	echo "$owner" >"$dir/owner"
	if [ $# -gt 0 ]; then
		# This shell owns the cluster while CMD runs.
		echo "$$ $(start_time $$)" >"$dir/owner"
		trap 'teardown '"$id"'' EXIT
		trap 'exit 130' INT TERM HUP
	fi
	IFS=, read -r -a ratev <<<"$rates"
	[ ${#ratev[@]} -le 4 ] || die "up: at most 4 networks"
	echo "${#ratev[@]}" >"$dir/nets"
	for k in "${!ratev[@]}"; do
		rate_bps "${ratev[$k]}" >/dev/null
		echo "${ratev[$k]}" >"$dir/rate$k"
	done
	echo "$mtu" >"$dir/mtu"
	free_subnet "$id" >"$dir/subnet"
	echo 0 >"$dir/hosts"
	if ! build "$id" "$hosts"; then
		teardown "$id"
		die "up: could not create cluster $id"
	fi
	if [ $# -gt 0 ]; then
		note "cluster $id up: $hosts hosts at $rates (SPARCML_CLUSTER=$id)"
		SPARCML_CLUSTER=$id "$@"
		return
	fi
	echo "$id"
}

build() {
	local id=$1 hosts=$2 sw k i
	sw=$(ns_switch "$id")
	ip netns add "$sw" || return 1
	for ((k = 0; k < $(get "$id" nets); k++)); do
		ip -n "$sw" link add "br$k" mtu "$(get "$id" mtu)" type bridge || return 1
		ip -n "$sw" link set "br$k" up || return 1
	done
	for ((i = 0; i < hosts; i++)); do
		add_host "$id" "$i" || return 1
		echo $((i + 1)) >"$(state_dir "$id")/hosts"
	done
}

# teardown ID: kill what runs on the hosts, delete the namespaces, forget
# the cluster. Also removes namespaces left by an `up` that died half-way.
teardown() {
	local id=$1 ns try
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX-$id-" || true); do
		for try in 1 2 3 4 5; do
			local pids
			pids=$(ip netns pids "$ns" 2>/dev/null || true)
			[ -z "$pids" ] && break
			kill -9 $pids 2>/dev/null || true
			sleep 0.1
		done
		ip netns del "$ns" 2>/dev/null || note "could not delete namespace $ns"
	done
	rm -rf "$(state_dir "$id")"
}

cmd_down() {
	need_root
	[ $# -eq 1 ] || die "usage: down ID"
	[[ $1 =~ ^[0-9a-f]{6}$ ]] || die "bad cluster id '$1'"
	teardown "$1"
}

# Removes this tool's clusters whose owner is gone, and namespaces of this
# tool that belong to no known cluster.
sweep_stale() {
	local all=${1:-} d id ns
	for d in "$STATE_ROOT"/*; do
		[ -d "$d" ] || continue
		id=${d##*/}
		if [ -n "$all" ] || ! owner_alive "$id"; then
			note "sweeping stale cluster $id"
			teardown "$id"
		fi
	done
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX-[0-9a-f]{6}-" || true); do
		id=${ns#"$PREFIX-"}
		id=${id%%-*}
		if [ ! -d "$(state_dir "$id")" ]; then
			note "sweeping namespace $ns of no known cluster"
			teardown "$id"
		fi
	done
}

cmd_sweep() {
	need_root
	case ${1:-} in
	"") sweep_stale ;;
	--all) sweep_stale all ;;
	*) die "usage: sweep [--all]" ;;
	esac
}

cmd_list() {
	local d id
	for d in "$STATE_ROOT"/*; do
		[ -d "$d" ] || continue
		id=${d##*/}
		printf '%s hosts=%s rates=%s owner=%s\n' "$id" "$(get "$id" hosts)" \
			"$(cat "$d"/rate* | paste -sd,)" "$(get "$id" owner)"
	done
}

cmd_info() {
	[ $# -eq 1 ] || die "usage: info ID"
	check_id "$1"
	local id=$1 i k line
	echo "cluster $id nets=$(get "$id" nets) mtu=$(get "$id" mtu) rates=$(cat "$(state_dir "$id")"/rate* | paste -sd,)"
	for ((i = 0; i < $(get "$id" hosts); i++)); do
		line="host $i $(ns_host "$id" "$i")"
		for ((k = 0; k < $(get "$id" nets); k++)); do
			line+=" eth$k $(subnet_of "$id" "$k").$((i + 1))"
		done
		echo "$line"
	done
}

check_host() {
	[[ $2 =~ ^[0-9]+$ ]] && [ "$2" -lt "$(get "$1" hosts)" ] || die "no host '$2' in cluster $1 ($(get "$1" hosts) hosts)"
}

cmd_exec() {
	[ $# -ge 3 ] || die "usage: exec ID HOST CMD..."
	need_root
	check_id "$1"
	check_host "$1" "$2"
	local ns
	ns=$(ns_host "$1" "$2")
	local h=h$2
	shift 2
	exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$h" "$@"
}

cmd_run() {
	[ $# -ge 1 ] || die "usage: run ID [-p RANKS_PER_HOST] [-t TOKEN] [-e VAR=VALUE]... -- CMD..."
	need_root
	check_id "$1"
	local id=$1 per=1 token="" envs=() hosts size addr r h
	shift
	while [ $# -gt 0 ]; do
		case $1 in
		-p) per=$2; shift 2 ;;
		-t) token=$2; shift 2 ;;
		-e) envs+=("$2"); shift 2 ;;
		--) shift; break ;;
		*) break ;;
		esac
	done
	[ $# -ge 1 ] || die "run: no command"
	[ -n "$token" ] || token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	hosts=$(get "$id" hosts)
	size=$((hosts * per))
	addr="$(subnet_of "$id" 0).1:$PORT_BASE"
	local pids=()
	for ((r = 0; r < size; r++)); do
		h=$((r / per))
		(
			set +e
			ip netns exec "$(ns_host "$id" "$h")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "h$h" \
				env SPARCML_RANK=$r SPARCML_SIZE=$size \
				SPARCML_ADDR="$addr" SPARCML_TOKEN="$token" SPARCML_IFNAME=eth0 \
				SPARCML_LOCAL_RANK=$((r % per)) SPARCML_LOCAL_SIZE=$per "${envs[@]}" "$@" 2>&1 |
				sed -u "s/^/[$r] /"
			exit "${PIPESTATUS[0]}"
		) &
		pids+=($!)
	done
	local status=0 s
	for r in "${!pids[@]}"; do
		s=0
		wait "${pids[$r]}" || s=$?
		if [ "$s" -ne 0 ]; then
			note "rank $r (host $((r / per))) exited with status $s"
			[ "$status" -eq 0 ] && status=$s
		fi
	done
	return "$status"
}

# wait_listen NS PORT: until something listens on TCP PORT in NS (5 s at most).
wait_listen() {
	local i
	for ((i = 0; i < 100; i++)); do
		[ -n "$(ip netns exec "$1" ss -Hltn "sport = :$2")" ] && return 0
		sleep 0.05
	done
	return 1
}

# A stream of SECONDS from host FROM to host TO on the host network. The
# shaping caps the rate, and a busy CPU can only lower the figure, so the
# best of up to three tries is the one held against RATE.
cmd_probe() {
	[ $# -ge 1 ] || die "usage: probe ID [FROM TO [SECONDS [RATE]]]"
	need_root
	check_id "$1"
	local id=$1 from=${2:-0} to=${3:-1} secs=${4:-3} rate=${5:-}
	check_host "$id" "$from"
	check_host "$id" "$to"
	command -v iperf3 >/dev/null || die "iperf3 not found (make deps-cluster installs it)"
	local dst out mbps want best=0 try
	dst="$(subnet_of "$id" 0).$((to + 1))"
	[ -n "$rate" ] || rate=$(get "$id" rate0)
	want=$(($(rate_bps "$rate") / 1000000))
	for try in 1 2 3; do
		ip netns exec "$(ns_host "$id" "$to")" timeout $((secs + 30)) iperf3 -s -1 -B "$dst" >/dev/null 2>&1 &
		local server=$!
		wait_listen "$(ns_host "$id" "$to")" 5201 || die "probe: iperf3 server on host $to did not start"
		out=$(ip netns exec "$(ns_host "$id" "$from")" timeout $((secs + 30)) iperf3 -c "$dst" -t "$secs" -O 1 -f m 2>&1) ||
			die "probe: iperf3 from host $from to $dst failed: $out"
		wait "$server" || true
		mbps=$(awk '/receiver/ {for (i = 1; i <= NF; i++) if ($i ~ /bits\/sec/) print $(i-1)}' <<<"$out" | tail -1)
		[ -n "$mbps" ] || die "probe: no figure in iperf3's output: $out"
		best=$(awk -v a="$best" -v b="$mbps" 'BEGIN { print (b > a ? b : a) }')
		if awk -v got="$best" -v want="$want" 'BEGIN { exit !(got >= 0.95 * want && got <= 1.05 * want) }'; then
			break
		fi
	done
	awk -v got="$best" -v want="$want" -v f="$from" -v t="$to" -v n="$try" 'BEGIN {
		printf "probe host %s -> host %s: %.1f Mbit/s of %d Mbit/s (%.1f%%, best of %d)\n", f, t, got, want, 100 * got / want, n
		exit (got < 0.95 * want || got > 1.05 * want) }' || die "probe: not within 5% of the rate"
}

cmd_shape() {
	[ $# -ge 3 ] || die "usage: shape ID HOST|all RATE [NET]"
	need_root
	check_id "$1"
	local id=$1 which=$2 rate=$3 k=${4:-0} i
	rate_bps "$rate" >/dev/null
	for ((i = 0; i < $(get "$id" hosts); i++)); do
		[ "$which" = all ] || [ "$which" = "$i" ] || continue
		shape_dev "$(ns_host "$id" "$i")" "eth$k" "$rate"
		shape_dev "$(ns_switch "$id")" "h${i}n$k" "$rate"
	done
	[ "$which" = all ] && echo "$rate" >"$(state_dir "$id")/rate$k"
	return 0
}

# Loss is applied where the packets arrive, so a sender sees loss on the
# wire rather than a local error (iptables DROP in OUTPUT fails the send
# with EPERM): host H at loss P drops P of what it receives, and every other
# host drops P of what it receives from H. A packet between two lossy hosts
# crosses both.
cmd_loss() {
	[ $# -eq 3 ] || die "usage: loss ID HOST P"
	need_root
	check_id "$1"
	check_host "$1" "$2"
	awk -v p="$3" 'BEGIN { exit !(p >= 0 && p < 1) }' || die "loss: P=$3: want 0 <= P < 1"
	echo "$3" >"$(state_dir "$1")/loss$2"
	apply_loss "$1"
}

# apply_loss ID: rebuilds every host's loss chain from the state.
apply_loss() {
	local id=$1 i j ns p nets k
	ls "$(state_dir "$id")"/loss* >/dev/null 2>&1 || return 0
	command -v iptables >/dev/null || die "iptables not found (make deps-cluster installs it)"
	nets=$(get "$id" nets)
	for ((i = 0; i < $(get "$id" hosts); i++)); do
		ns=$(ns_host "$id" "$i")
		ip netns exec "$ns" sh -c '
			iptables -N sparcml-loss 2>/dev/null || iptables -F sparcml-loss
			iptables -C INPUT -i eth+ -j sparcml-loss 2>/dev/null || iptables -A INPUT -i eth+ -j sparcml-loss'
		for ((j = 0; j < $(get "$id" hosts); j++)); do
			p=$(cat "$(state_dir "$id")/loss$j" 2>/dev/null || echo 0)
			awk -v p="$p" 'BEGIN { exit !(p > 0) }' || continue
			if [ "$j" = "$i" ]; then
				ip netns exec "$ns" iptables -A sparcml-loss -m statistic --mode random --probability "$p" -j DROP
				continue
			fi
			for ((k = 0; k < nets; k++)); do
				ip netns exec "$ns" iptables -A sparcml-loss -s "$(subnet_of "$id" "$k").$((j + 1))" \
					-m statistic --mode random --probability "$p" -j DROP
			done
		done
	done
}

cmd_link() {
	[ $# -ge 3 ] || die "usage: link ID HOST up|down [NET]"
	need_root
	check_id "$1"
	check_host "$1" "$2"
	case $3 in up | down) ;; *) die "link: want up or down, not '$3'" ;; esac
	ip -n "$(ns_switch "$1")" link set "h${2}n${4:-0}" "$3"
}

cmd_kill() {
	[ $# -eq 2 ] || die "usage: kill ID HOST"
	need_root
	check_id "$1"
	check_host "$1" "$2"
	local pids
	pids=$(ip netns pids "$(ns_host "$1" "$2")" || true)
	[ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
}

cmd_add() {
	[ $# -eq 1 ] || die "usage: add ID"
	need_root
	check_id "$1"
	local i
	i=$(get "$1" hosts)
	add_host "$1" "$i" || die "add: could not add host $i"
	echo $((i + 1)) >"$(state_dir "$1")/hosts"
	apply_loss "$1"
	echo "$i"
}

main() {
	[ $# -ge 1 ] || { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
	local c=$1
	shift
	case $c in
	up | down | sweep | list | info | exec | run | probe | shape | loss | link | kill | add) "cmd_$c" "$@" ;;
	-h | --help | help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
	*) die "unknown command '$c' (try: cluster.sh help)" ;;
	esac
}

main "$@"
