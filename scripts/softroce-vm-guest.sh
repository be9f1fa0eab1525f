#!/bin/bash
# Runs inside the Soft-RoCE VM (started by scripts/softroce-vm), from the
# repository mounted at its host path. rxe0 exists and is ACTIVE.
# Inputs (environment): VERBATIM_CONFORMANCE_BIN, VERBATIM_CLUSTER_BIN,
# VERBATIM_HOSTS_BIN, VERBATIM_BIN; VERBATIM_VM_PARTS (default all: any of
# conformance, cluster, hosts, perftest, space-separated). Exit status: 0
# when every part passed.
#
# Parts: the verbs conformance suite and a 3-replica cluster on one rxe
# device (rxe0, initial namespace, exchange over 127.0.0.1); the multi-host
# suite: scripts/softroce-hosts builds three hosts (a network namespace
# each, own veth link to a bridge, own address, own rxe device) and
# host/tests/verbs_hosts.rs runs a group across them through partitions,
# one-way cuts, netem, link loss, stopped replicas and a removed device;
# perftest on rxe0 and across two hosts.
set -u
export VERBATIM_RDMA_DEVICE=rxe0 RUST_BACKTRACE=1 RUST_LOG=${RUST_LOG:-warn,verbatim_kernel_cfg=off}
dev=rxe0
rc=0
declare -A result

gidx=0
for g in /sys/class/infiniband/$dev/ports/1/gids/*; do
  i=${g##*/}; v=$(cat "$g" 2>/dev/null) || continue
  t=$(cat /sys/class/infiniband/$dev/ports/1/gid_attrs/types/$i 2>/dev/null)
  case "$v:$t" in 0000:0000:0000:0000:0000:ffff:*:RoCE\ v2) gidx=$i; break ;; esac
done
echo "== device: $(ibv_devinfo -d $dev | grep -E 'transport|active_mtu|state' | tr -s ' \t' ' ' | paste -sd';'), GID index $gidx ($(cat /sys/class/infiniband/$dev/ports/1/gids/$gidx))"
echo "== vCPUs $(nproc), kernel $(uname -r), memlock $(ulimit -l)"

PARTS=${VERBATIM_VM_PARTS:-all}
[ "$PARTS" = all ] && PARTS="conformance cluster hosts perftest"
want() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
HOSTS_SCRIPT=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/softroce-hosts
order=()

for b in "$VERBATIM_BIN" "$VERBATIM_CONFORMANCE_BIN" "$VERBATIM_CLUSTER_BIN" "$VERBATIM_HOSTS_BIN"; do
  if ldd "$b" | grep 'not found' >/dev/null; then
    echo "softroce-vm: $b needs libraries the image lacks (add their packages to PACKAGES in scripts/softroce-vm):"
    ldd "$b" | grep 'not found'; exit 1
  fi
done

part() { # name command...
  local name=$1; shift
  local t0=$EPOCHREALTIME
  order+=("$name")
  echo; echo "== $name"
  "$@"; local r=$?
  local dt; dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
  if [ $r = 0 ]; then result[$name]="passed (${dt} s)"; else result[$name]="FAILED, status $r (${dt} s)"; rc=1; fi
}

want conformance && part "verbs conformance and device tests" \
  timeout 300 "$VERBATIM_CONFORMANCE_BIN" --include-ignored --nocapture --test-threads=1
want cluster && part "3-replica clusters over rxe (election; primary-backup by views)" \
  env VERBATIM_BIN="$VERBATIM_BIN" timeout 600 "$VERBATIM_CLUSTER_BIN" --ignored --nocapture --test-threads=1

left=$(ps -eo pid=,pcpu=,args= | grep -E '[v]erbatim replica' || true)
[ -n "$left" ] && { echo "softroce-vm: replicas still running after the cluster test:"; echo "$left"; }

echo "== busiest processes before perftest:"; ps -eo pcpu=,pid=,comm= --sort=-pcpu | head -4

# perftest in the same VM, same device, same GID: the reference figures.
perf() { # name tool args...
  local name=$1 tool=$2; shift 2
  local out=/tmp/$tool.out
  # Bounded: a server whose client never connected must not hold the run.
  timeout 120 "$tool" -d $dev -x $gidx "$@" > /tmp/$tool.srv 2>&1 & local spid=$!
  local ok=1
  for try in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.5
    if timeout 60 "$tool" -d $dev -x $gidx "$@" 127.0.0.1 > "$out" 2>&1; then ok=0; break; fi
    grep -qiE "couldn.t connect|connection refused|unable to" "$out" || break
  done
  wait $spid
  grep -E '^ *#bytes|^ *[0-9]+ +[0-9]+' "$out" | sed "s/^/$name: /"
  return $ok
}
# The same between two hosts, over the bridge (host 0 serves, host 1 asks).
perf_hosts() { # tool args...
  local tool=$1; shift
  "$HOSTS_SCRIPT" up 2 >/dev/null || return 1
  local g0 g1; g0=$("$HOSTS_SCRIPT" hosts | awk '$1==0 {print $4}'); g1=$("$HOSTS_SCRIPT" hosts | awk '$1==1 {print $4}')
  timeout 120 "$HOSTS_SCRIPT" exec 0 "$tool" -d rxeh0 -x "$g0" "$@" > /tmp/$tool.hsrv 2>&1 & local spid=$!
  local ok=1 out=/tmp/$tool.hosts.out
  for try in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.5
    if timeout 60 "$HOSTS_SCRIPT" exec 1 "$tool" -d rxeh1 -x "$g1" "$@" 10.77.0.1 > "$out" 2>&1; then ok=0; break; fi
    grep -qiE "couldn.t connect|connection refused|unable to" "$out" || break
  done
  wait $spid
  grep -E '^ *#bytes|^ *[0-9]+ +[0-9]+' "$out" | sed "s/^/$tool across hosts: /"
  "$HOSTS_SCRIPT" down >/dev/null 2>&1
  return $ok
}
if want perftest; then
  part "perftest ib_write_lat" perf ib_write_lat ib_write_lat -s 8 -n 2000
  part "perftest ib_read_lat" perf ib_read_lat ib_read_lat -s 8 -n 2000
  part "perftest ib_atomic_lat" perf ib_atomic_lat ib_atomic_lat -A CMP_AND_SWAP -n 2000
  part "perftest ib_write_lat across hosts" perf_hosts ib_write_lat -s 8 -n 2000
fi

# Three hosts (network namespaces with their own links, addresses and rxe
# devices), the group across them and the faults; then the hosts go away.
# `faults_on_the_wire` (netem, one-way cuts, a pulled link, a stopped
# leader, a removed device in one long run) is reported but does not fail
# the suite: it still stalls in some runs (clients answered TRYAGAIN for a
# minute while a leader and a follower are healthy; issue 17 is open with
# the cases seen). Partition and heal, and detection times, gate.
hosts_tests() { # label test-name...
  local label=$1; shift
  "$HOSTS_SCRIPT" up 3 || return 1
  local r
  # Replicas log at info here (the verbs fabric's connection events at
  # debug): a failing run prints the tail of each replica's log (leader
  # changes, revokes, recoveries, gateway events, connects).
  env VERBATIM_BIN="$VERBATIM_BIN" VERBATIM_HOSTS_SCRIPT="$HOSTS_SCRIPT" RUST_LOG=info,verbatim_kernel_cfg=off,verbatim_host::fabric::verbs=debug \
    timeout 1500 "$VERBATIM_HOSTS_BIN" --ignored --exact "$@" --nocapture --test-threads=1 2>&1 | tee -a /tmp/hosts.out
  r=${PIPESTATUS[0]}
  left=$(ps -eo pid=,args= | grep -E '[v]erbatim replica' || true)
  [ -n "$left" ] && { echo "softroce-vm: replicas still running after $label:"; echo "$left"; pkill -9 -f '[v]erbatim replica' || true; }
  "$HOSTS_SCRIPT" down
  return "$r"
}
want hosts && part "3 hosts over rxe (namespaces, faults)" hosts_tests "partition and detection" \
  partitioned_leader_fails_over_and_rejoins_after_heal partitioned_leader_detection_time
if want hosts; then
  order+=("3 hosts: faults on the wire (reported)")
  t0=$EPOCHREALTIME
  echo; echo "== 3 hosts: faults on the wire (reported, does not fail the suite)"
  hosts_tests "faults on the wire" faults_on_the_wire; r=$?
  dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
  if [ $r = 0 ]; then result["3 hosts: faults on the wire (reported)"]="passed (${dt} s)"
  else result["3 hosts: faults on the wire (reported)"]="failed, status $r, reported only (${dt} s)"; fi
fi


echo
echo "== summary"
for k in "${order[@]}"; do
  printf '%-42s %s\n' "$k" "${result[$k]:-not run}"
done
if [ -f /tmp/hosts.out ]; then
  grep -E '^hosts: (3 replicas on hosts|writes across|leader.s host partitioned|the partitioned old leader|partition held|member [0-9] cut off|partition scenario|netem|leader.s (sends|receives) dropped|follower [0-9].s link|leader SIGSTOPped|SIGCONT|follower [0-9].s rxe|restarted|wire faults|partitioned-leader detection|history of)' /tmp/hosts.out \
    | grep -v 'no write acknowledged for' | cut -c1-400 | sed 's/^/  /'
fi
echo "softroce-vm: $(printf '%s\n' "${result[@]}" | grep -c '^passed') passed, $(printf '%s\n' "${result[@]}" | grep -c FAILED) failed"
exit $rc
