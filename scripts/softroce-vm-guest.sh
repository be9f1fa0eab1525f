#!/bin/bash
# Runs inside the Soft-RoCE VM (started by scripts/softroce-vm), from the
# repository mounted at its host path. rxe0 exists and is ACTIVE.
# Inputs (environment): VERBATIM_CONFORMANCE_BIN, VERBATIM_CLUSTER_BIN,
# VERBATIM_BIN. Exit status: 0 when every part passed.
set -u
export VERBATIM_RDMA_DEVICE=rxe0 RUST_BACKTRACE=1 RUST_LOG=${RUST_LOG:-warn}
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

for b in "$VERBATIM_BIN" "$VERBATIM_CONFORMANCE_BIN" "$VERBATIM_CLUSTER_BIN"; do
  if ldd "$b" | grep -q 'not found'; then
    echo "softroce-vm: $b needs libraries the image lacks (add their packages to PACKAGES in scripts/softroce-vm):"
    ldd "$b" | grep 'not found'; exit 1
  fi
done

part() { # name command...
  local name=$1; shift
  local t0=$EPOCHREALTIME
  echo; echo "== $name"
  "$@"; local r=$?
  local dt; dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f", b-a}')
  if [ $r = 0 ]; then result[$name]="passed (${dt} s)"; else result[$name]="FAILED, status $r (${dt} s)"; rc=1; fi
}

part "verbs conformance and device tests" \
  timeout 300 "$VERBATIM_CONFORMANCE_BIN" --include-ignored --nocapture --test-threads=1
part "3-replica cluster over rxe" \
  env VERBATIM_BIN="$VERBATIM_BIN" timeout 300 "$VERBATIM_CLUSTER_BIN" --ignored --nocapture --test-threads=1

left=$(ps -eo pid=,pcpu=,args= | grep -E '[v]erbatim replica' || true)
[ -n "$left" ] && { echo "softroce-vm: replicas still running after the cluster test:"; echo "$left"; }
echo "== busiest processes before perftest:"; ps -eo pcpu=,pid=,comm= --sort=-pcpu | head -4

# perftest in the same VM, same device, same GID: the reference figures.
perf() { # name tool args...
  local name=$1 tool=$2; shift 2
  local out=/tmp/$tool.out
  "$tool" -d $dev -x $gidx "$@" > /tmp/$tool.srv 2>&1 & local spid=$!
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
part "perftest ib_write_lat" perf ib_write_lat ib_write_lat -s 8 -n 2000
part "perftest ib_read_lat" perf ib_read_lat ib_read_lat -s 8 -n 2000
part "perftest ib_atomic_lat" perf ib_atomic_lat ib_atomic_lat -A CMP_AND_SWAP -n 2000

echo
echo "== summary"
for k in "verbs conformance and device tests" "3-replica cluster over rxe" \
         "perftest ib_write_lat" "perftest ib_read_lat" "perftest ib_atomic_lat"; do
  printf '%-40s %s\n' "$k" "${result[$k]:-not run}"
done
if [ $rc = 0 ]; then echo "softroce-vm: 5 passed, 0 failed"; else
  echo "softroce-vm: $(printf '%s\n' "${result[@]}" | grep -c '^passed') passed, $(printf '%s\n' "${result[@]}" | grep -c FAILED) failed"; fi
exit $rc
