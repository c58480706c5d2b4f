#!/usr/bin/env bash
# The GPU check of issue 33: one command, a few minutes, a timeout on every step, JSON out.
#
#   bash tests/benchmarks/gpu_check.sh OUTDIR [STEP ...]
#
# Steps (default: info train33 train4x4 methods):
#   info      torch, CUDA and the GPU's name
#   train33   `zoo train case 33 --device cuda`, then the same with --device cpu on this machine
#   train4x4  `zoo train planted causal-bench-4x4 --device cuda`
#   methods   every built-in method on the 12x12 random model on the GPU (bench_device.py), each
#             stopped after $GPU_CHECK_METHOD_S seconds (default 120)
#   train12   `zoo train planted causal-bench-12x12 --device cuda [--resume]` for at most
#             $GPU_CHECK_TRAIN12_S seconds (default 300); on timeout it checkpoints (SIGTERM), and
#             OUTDIR/cb12.tar.gz holds the entry or the checkpoint; a rerun with
#             GPU_CHECK_CB12=that file resumes from it
# GPU_CHECK_DEVICE=cpu runs the cuda steps on the CPU instead (a dry run of the script itself).
# Run from the repository root, with the project importable (`pip install -e .`, or PYTHONPATH).
# Each step's stdout is OUTDIR/<step>.json, its stderr OUTDIR/<step>.log; OUTDIR/summary.json has
# every step's exit code and wall time, and is printed at the end. A step that fails or times out
# does not stop the others.
set -uo pipefail
out=${1:?usage: gpu_check.sh OUTDIR [STEP ...]}
shift
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(info train33 train4x4 methods)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
dev=${GPU_CHECK_DEVICE:-cuda}  # cpu: a dry run of the script on a machine without a GPU
work=$(mktemp -d)
summary="$out/summary.jsonl"
touch "$summary"  # appended: several runs into one OUTDIR keep every step

# step NAME TIMEOUT_S CMD...: run CMD under `timeout`, stdout to NAME.json, stderr to NAME.log
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  t0=$(date +%s%N)
  timeout --signal=TERM --kill-after=90 "$limit" "$@" >"$out/$name.json" 2>"$out/$name.log"
  rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  printf '{"step": "%s", "device": "%s", "exit_code": %d, "timed_out": %s, "wall_s": %d.%03d}\n' "$name" "$dev" \
    "$rc" "$([ $rc -eq 124 ] || [ $rc -eq 137 ] && echo true || echo false)" $((ms / 1000)) $((ms % 1000)) | tee -a "$summary"
}

for s in "${steps[@]}"; do
  case $s in
    info)
      step info 60 "$py" -c 'import json, os, torch
d = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpu": torch.cuda.is_available(),
     "cpus": os.cpu_count()}
if d["gpu"]:
    d["name"] = torch.cuda.get_device_name(0)
print(json.dumps(d))' ;;
    train33)
      step train33_$dev 300 "$py" -m zoo.cli train case 33 --device "$dev" --root "$work/cuda" --json
      step train33_cpu 300 "$py" -m zoo.cli train case 33 --device cpu --root "$work/cpu" --json ;;
    train4x4)
      step train4x4_$dev 600 "$py" -m zoo.cli train planted causal-bench-4x4 --device "$dev" --root "$work/cuda" --json ;;
    methods)
      step methods_12x12_$dev 1800 "$py" tests/benchmarks/bench_device.py --device "$dev" --size 12x12 \
        --budget-s "${GPU_CHECK_METHOD_S:-120}" ;;
    train12)
      root="$work/cb12"
      resume=()
      if [ -n "${GPU_CHECK_CB12:-}" ]; then
        mkdir -p "$root/entries" && tar -xzf "$GPU_CHECK_CB12" -C "$root/entries" && resume=(--resume)
      fi
      step train12_$dev "${GPU_CHECK_TRAIN12_S:-300}" "$py" -m zoo.cli train planted causal-bench-12x12 \
        --device "$dev" --root "$root" --json "${resume[@]}"
      (cd "$root/entries" && tar -czf "$out/cb12.tar.gz" .) ;;
    *)
      echo "gpu_check: unknown step $s" >&2 ;;
  esac
done
"$py" -c 'import json, sys
print(json.dumps([json.loads(l) for l in open(sys.argv[1])], indent=1))' "$summary" | tee "$out/summary.json"
rm -rf "$work"
