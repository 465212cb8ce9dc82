#!/bin/bash
# distdoctor on a real GPU machine, once, in a few minutes: what its checks say of real hardware, what a real NCCL
# job's faults leave in its log, and what `distdoctor hang` says of a job hanging on a real GPU right now.
#
#   bash bench/device/gpu_truth.sh OUTDIR
#
# Needs: nvidia-smi, a python3 with torch built for CUDA, and distdoctor importable (with its dependencies) by that
# python3. Everything lands in OUTDIR/truth.tar.gz: every nvidia-smi/dcgmi call distdoctor made, with its output (a
# recording shim on PATH), each command's report, each fault's log, and rc.txt (one line per step). Nothing here
# needs the network: ranks meet on 127.0.0.1. docs/gpu-truth.md records what a run on an H100 showed.
set -u
out=${1:?usage: gpu_truth.sh OUTDIR}
here=$(cd "$(dirname "$0")" && pwd)
R=$(mktemp -d /tmp/gpu-truth.XXXXXX)
cd "$R" || exit  # not the checkout: python3 -m distdoctor must import the installed package
mkdir -p "$R/rec" "$R/shim" "$R/fr" "$R/dd"
export PYTHONUNBUFFERED=1
port=${GPU_TRUTH_PORT:-29600}

step() {  # step NAME SECONDS CMD...: stdout and stderr in dd/NAME.{out,err}, rc in rc.txt; never stops the script
    local name=$1 limit=$2; shift 2
    local t0=$SECONDS
    timeout -k 5 "$limit" "$@" >"$R/dd/$name.out" 2>"$R/dd/$name.err"
    echo "$name rc=$? $((SECONDS - t0))s" >>"$R/rc.txt"
}

# A recording shim in front of each tool distdoctor runs, so the exact calls and their outputs come back as captures.
for tool in nvidia-smi dcgmi journalctl ibstat ibv_devinfo perfquery lspci; do
    real=$(command -v "$tool") || continue
    cat >"$R/shim/$tool" <<EOF
#!/bin/bash
n=\$(date +%s%N)-\$\$
printf '%s\n' "\$@" >"$R/rec/$tool.\$n.args"
"$real" "\$@" >"$R/rec/$tool.\$n.out" 2>"$R/rec/$tool.\$n.err"
rc=\$?
echo \$rc >"$R/rec/$tool.\$n.rc"
cat "$R/rec/$tool.\$n.out"; cat "$R/rec/$tool.\$n.err" >&2
exit \$rc
EOF
    chmod +x "$R/shim/$tool"
done
export PATH="$R/shim:$PATH"

{ uname -a; nvidia-smi -L; python3 -c 'import torch, sys; print(sys.version); print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version())'
  python3 -c 'import distdoctor, sys; print(distdoctor.__file__)'; ip -br addr; command -v py-spy dcgmi ibstat; } >"$R/machine.txt" 2>&1

# The quick suite on a machine with a real GPU and driver, beside everything else (GPU_TRUTH_PYTEST=1; it links
# distdoctor/checks into the checkout, as an installed package has it, so the tree imports as it is).
if [ "${GPU_TRUTH_PYTEST:-0}" = 1 ]; then
    repo=$(cd "$here/../.." && pwd)
    [ -e "$repo/distdoctor/checks" ] || ln -s ../checks "$repo/distdoctor/checks"
    (cd "$repo" && timeout -k 5 240 python3 -m pytest -q -p no:cacheprovider -n 6 -m "not slow" tests/unit tests/integration/gpu \
        >"$R/dd/pytest.out" 2>&1; echo "pytest rc=$?" >>"$R/rc.txt") &
fi

# Plain captures beside what distdoctor itself runs.
step smi-topo 20 nvidia-smi topo -m
step smi-q-xml 30 nvidia-smi -q -x
step smi-nvlink-s 20 nvidia-smi nvlink -s
step smi-nvlink-e 20 nvidia-smi nvlink -e
step smi-fabric 20 nvidia-smi -q -d FABRIC
step smi-clocks 20 nvidia-smi -q -d PERFORMANCE,CLOCK,ECC,PAGE_RETIREMENT,ROW_REMAPPER
step dmesg 10 dmesg
rm -f "$R"/rec/*  # the captures worth keeping are the calls distdoctor makes itself

# The product on real hardware.
step check-json 60 python3 -m distdoctor check --format json
step check-console 60 python3 -m distdoctor check -v
step health-json 60 python3 -m distdoctor health --dry-run --format json --node gputruth
step health-text 60 python3 -m distdoctor health --dry-run --node gputruth
step inventory-json 60 python3 -m distdoctor inventory --json
step explain-gpu 20 python3 -m distdoctor explain gpu.xid
# A fix applied as printed: build.nccl-libraries' fix (if it warns) is run in a shell, then the check again.
step nccl-libs-json 60 python3 -m distdoctor check --only build.nccl-libraries --format json
fix=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("\n".join(f["fix"] for c in d["checks"] for f in c["findings"] if f["status"] in ("warn","fail") and f.get("fix")))' "$R/dd/nccl-libs-json.out" 2>/dev/null)
printf '%s\n' "$fix" >"$R/dd/nccl-libs-fix.sh"
step nccl-libs-after-json 60 bash -c "$fix
python3 -m distdoctor check --only build.nccl-libraries --format json"
# The same without NVML: every nvidia-smi form distdoctor falls back to (table, -L, --query-gpu, -q) is recorded.
mkdir -p "$R/rec-nonvml"
step check-nonvml-json 60 env DISTDOCTOR_NVML=0 python3 -m distdoctor check --format json
step inventory-nonvml-json 60 env DISTDOCTOR_NVML=0 python3 -m distdoctor inventory --json
mv "$R"/rec/* "$R/rec-nonvml/" 2>/dev/null
# Which copy of each distribution Python and distdoctor each see (a --target install beside the image's own).
python3 - >"$R/dd/distributions.out" 2>&1 <<'PY'
from importlib import metadata
from distdoctor.host import Host
for name in ("clustershell", "torch", "distdoctor"):
    seen = [str(d._path) for d in metadata.distributions() if (d.metadata["Name"] or "").lower() == name]
    ours = Host().distribution(name)
    print(name, "importlib:", seen, "first:", str(metadata.distribution(name)._path), "distdoctor:", ours and ours.location)
PY

# Real NCCL runs, faulted. One rank each unless the scenario needs two; each on its own port, side by side.
rank() {  # rank NAME SCENARIO RANK WORLD LOCAL PORT [VAR=VALUE...]: one rank in the background, its log in logs/NAME.rRANK.log
    local name=$1 scenario=$2 r=$3 world=$4 local_rank=$5 p=$6; shift 6
    mkdir -p "$R/logs"
    env RANK="$r" WORLD_SIZE="$world" LOCAL_RANK="$local_rank" LOCAL_WORLD_SIZE="$world" MASTER_ADDR=127.0.0.1 \
        MASTER_PORT="$p" NCCL_DEBUG=INFO "$@" timeout -k 5 90 python3 "$here/nccl_faults.py" "$scenario" \
        >"$R/logs/$name.r$r.log" 2>&1 &
    PIDS+=($!)
}
PIDS=()
rank ok ok 0 1 0 $((port + 1))
rank ok2 ok 0 1 0 $((port + 2)) NCCL_DEBUG_SUBSYS=INIT,NET,ENV TORCH_CPP_LOG_LEVEL=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL
rank lo ok 0 1 0 $((port + 3)) NCCL_SOCKET_IFNAME=lo
rank ifname ok 0 1 0 $((port + 4)) NCCL_SOCKET_IFNAME=ddtruth0
rank ibforce ok 0 1 0 $((port + 5)) NCCL_NET=IB
rank dupgpu ok 0 2 0 $((port + 6))
rank dupgpu ok 1 2 0 $((port + 6))
rank ordinal ordinal 0 1 0 $((port + 7))
rank badalgo ok 0 1 0 $((port + 8)) NCCL_ALGO=Bogus NCCL_PROTO=Nonsense
rank ipv6 ok 0 1 0 $((port + 9)) NCCL_SOCKET_FAMILY=AF_INET6 NCCL_SOCKET_IFNAME=lo
# A job hanging now: the watchdog fires after FAULT_TIMEOUT_S; Flight Recorder dumps on timeout.
rank hang hang 0 1 0 $((port + 10)) FAULT_TIMEOUT_S=40 TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1 \
    TORCH_FR_DUMP_TEMP_FILE="$R/fr/nccl_trace_rank_"
# A job whose second rank never came: rank 0 waits at the store.
rank wait wait 0 2 0 $((port + 11)) FAULT_TIMEOUT_S=40
sleep 20
step hang-json 30 python3 -m distdoctor hang --json --timeout 20
step hang-console 30 python3 -m distdoctor hang -v --timeout 20
hang_pid=$(pgrep -f "nccl_faults.py hang" | head -1)
[ -n "$hang_pid" ] && step hang-pid-json 30 python3 -m distdoctor hang --pids "$hang_pid" --json --timeout 20
wait "${PIDS[@]}"; PIDS=()
ls -la "$R/fr" >>"$R/rc.txt" 2>&1

rank oom oom 0 1 0 $((port + 12))
wait "${PIDS[@]}"; PIDS=()

# nccl-test with the NCCL backend: one rank, a sweep, and two ranks on one GPU.
step nccltest-1 60 python3 -m distdoctor nccl-test --local 1 --json --timeout 50
step nccltest-1-console 60 python3 -m distdoctor nccl-test --local 1 -v --timeout 50
step nccltest-bench 90 python3 -m distdoctor nccl-test --local 1 --bench -e 256M --json --timeout 80
step nccltest-2 60 python3 -m distdoctor nccl-test --local 2 --json --timeout 50
step nccltest-2-gloo 60 python3 -m distdoctor nccl-test --local 2 --backend gloo --json --timeout 50

# After the faults: what a health check says now (the hang and the OOM are in the kernel log if the driver logged them).
step health-after-json 60 python3 -m distdoctor health --dry-run --format json --node gputruth
step dmesg-after 10 dmesg

wait  # the suite, if it runs
tar -C "$R" -czf "$out/truth.tar.gz" .
cp "$R/rc.txt" "$out/rc.txt"
cat "$R/rc.txt"
