#!/usr/bin/env bash
# Run a `flashoverlap search` or `sweep` too big for one machine as a Slurm job array:
# N tasks, task I running the command with `--shard I/N --out DIR/shard-I`, then a merge
# job that starts when every task has succeeded (`--dependency=afterok`) and joins the
# shards into DIR/merged: the files one process would have written, byte for byte.
#
#   scripts/slurm-shards.sh -n 16 -o runs/70b -c 8 -- search --model llama-3-70b \
#       --hardware dgx-h100-rail --nodes 128 --seq 4096 --global-batch 1024
#
# Options (before `--`):
#   -n N       array tasks (shards); required
#   -o DIR     output folder, on a file system every node sees; required
#   -c CPUS    CPUs per task (sbatch --cpus-per-task; the command's --threads); default 1
#   -p PART    partition; default: the cluster's default
#   -t TIME    time limit per task (sbatch --time); default: the partition's
#   -w         wait until the merge has finished (sbatch --wait) and exit with its status
# The binary is `flashoverlap` on PATH, or $FLASHOVERLAP_BIN. Prints the two job ids.
set -euo pipefail

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

n="" out="" cpus=1 part="" time="" wait=""
while getopts "n:o:c:p:t:wh" opt; do
  case "$opt" in
    n) n="$OPTARG" ;;
    o) out="$OPTARG" ;;
    c) cpus="$OPTARG" ;;
    p) part="$OPTARG" ;;
    t) time="$OPTARG" ;;
    w) wait=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ "${1:-}" == "--" ]] && shift
if [[ -z "$n" || -z "$out" || $# -lt 1 ]]; then
  echo "error: -n N, -o DIR and a command (search or sweep with its flags) are required" >&2
  usage
fi
if ! [[ "$n" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: -n \`$n\`: expected a count of at least 1" >&2
  exit 2
fi
if ! [[ "$cpus" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: -c \`$cpus\`: expected a count of at least 1" >&2
  exit 2
fi
cmd="$1"
shift
case "$cmd" in
  search | sweep) ;;
  *)
    echo "error: \`$cmd\`: only search and sweep run as shards" >&2
    exit 2
    ;;
esac
for a in "$@"; do
  case "$a" in
    --shard | --shard=* | --out | --out=*)
      echo "error: $a: the script sets --shard and --out itself" >&2
      exit 2
      ;;
  esac
done
command -v sbatch > /dev/null || {
  echo "error: sbatch not found: this script needs a Slurm cluster" >&2
  exit 2
}
bin="${FLASHOVERLAP_BIN:-flashoverlap}"
mkdir -p "$out/logs"
out="$(cd "$out" && pwd)"

common=(--parsable --chdir "$PWD")
[[ -n "$part" ]] && common+=(--partition "$part")
[[ -n "$time" ]] && common+=(--time "$time")

# The command as one shell-quoted line (sbatch --wrap runs it under sh).
args="$(printf '%q ' "$bin" "$cmd" "$@")"
task="$args--quiet --threads $cpus --shard \$SLURM_ARRAY_TASK_ID/$n --out $(printf '%q' "$out")/shard-\$SLURM_ARRAY_TASK_ID --force"
shards=$(sbatch "${common[@]}" --job-name "flashoverlap-$cmd" --array "0-$((n - 1))" \
  --cpus-per-task "$cpus" --output "$out/logs/shard-%a.log" --wrap "$task")
shards="${shards%%;*}"

inputs=""
for ((i = 0; i < n; i++)); do
  inputs+=" $(printf '%q' "$out/shard-$i")"
done
merge="$(printf '%q ' "$bin" "$cmd") merge$inputs --out $(printf '%q' "$out/merged") --force"
wait_flag=()
[[ -n "$wait" ]] && wait_flag=(--wait)
echo "shards: job $shards ($n tasks), logs in $out/logs"
set +e
merged=$(sbatch "${common[@]}" "${wait_flag[@]}" --job-name "flashoverlap-$cmd-merge" \
  --dependency "afterok:$shards" --kill-on-invalid-dep=yes --output "$out/logs/merge.log" \
  --wrap "$merge")
status=$?
set -e
merged="${merged%%;*}"
echo "merge: job $merged, into $out/merged"
if [[ -n "$wait" && $status == 0 ]]; then
  # sbatch --wait returns 0 for a merge cancelled because a shard failed: ask its state.
  state="$(scontrol show job "$merged" -o 2> /dev/null | grep -o 'JobState=[A-Z_]*' || true)"
  state="${state#JobState=}"
  if [[ -n "$state" && "$state" != COMPLETED ]]; then
    echo "error: the merge did not run to completion (job $merged: $state); see $out/logs" >&2
    exit 1
  fi
  if [[ -z "$state" && ! -e "$out/merged" ]]; then
    echo "error: the merge left no $out/merged; see $out/logs" >&2
    exit 1
  fi
fi
exit $status
