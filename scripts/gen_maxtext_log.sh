#!/usr/bin/env bash
# Regenerate tests/data/maxtext/* from a REAL MaxText run on CPU.
#
# The metrics parser is tested against what MaxText actually prints, not against
# lines we imagine it prints; this script is how that data was made and how to
# remake it when the pinned MaxText moves.
#
#   scripts/gen_maxtext_log.sh            writes tests/data/maxtext/tiny_cpu.{log,metrics.jsonl}
#                                         and tiny_cpu_noprof.{log,metrics.jsonl}, then tiny_cpu_tb.*
#   scripts/gen_maxtext_log.sh tensorboard  writes only tests/data/maxtext/tiny_cpu_tb.{metrics.jsonl,tfevents}:
#                                         the TensorBoard event file MaxText wrote beside its metrics file
#   TGK_PY312=/path/to/python3.12 ...     interpreter for the MaxText venv (MaxText needs >= 3.12)
#
# The venv is the project's pinned MaxText environment (scripts/setup-maxtext.sh:
# maxtext[tpu]==0.2.5 under scripts/maxtext-tiny.constraints.txt, cached outside the repo,
# keyed by version + interpreter + constraints hash), shared with preflight --compile,
# run-local and the MaxText test tier.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$(bash "$repo/scripts/setup-maxtext.sh" | tail -n 1)"
out="$repo/tests/data/maxtext"

log() { printf '[gen_maxtext_log] %s\n' "$*" >&2; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# The tiny model of workloads/maxtext/run_local.py (TINY_MODEL): trains on 2 CPU cores in ~20 s.
tiny=(
  dataset_type=synthetic enable_checkpointing=false
  base_emb_dim=64 base_num_query_heads=4 base_num_kv_heads=4 base_mlp_dim=128
  base_num_decoder_layers=2 head_dim=16 vocab_size=256 max_target_length=64
  per_device_batch_size=2 attention=dot_product jax_cache_dir=
)

run() {  # name, extra args...
  local name="$1"; shift
  log "running $name"
  # Per-step lines go to stderr (absl); stdout is kept too so nothing is lost.
  JAX_PLATFORMS=cpu "$venv/bin/python" -m maxtext.trainers.pre_train.train \
    src/maxtext/configs/base.yml run_name="$name" base_output_directory="$work/out" \
    "${tiny[@]}" dump_hlo_local_dir="$work/xla_dump/" \
    metrics_file="$work/$name.metrics.jsonl" "$@" \
    >"$work/$name.stdout" 2>"$work/$name.stderr"
  # Keep the log as MaxText printed it, minus absolute paths of this machine.
  sed -e "s#$work#/tmp/run#g" -e "s#$venv#/venv#g" "$work/$name.stderr" > "$out/$name.log"
  cp "$work/$name.metrics.jsonl" "$out/$name.metrics.jsonl"
}

tensorboard() {  # MaxText's TensorBoard event file (process 0, tensorboardX) and the metrics file of the same steps
  run tiny_cpu_tb steps=6 enable_tensorboard=true
  rm "$out/tiny_cpu_tb.log"
  # max_utils.initialize_summary_writer: <tensorboard_dir>/<run_name>/, i.e. <output>/<run>/tensorboard/<run>/
  local events=("$work"/out/tiny_cpu_tb/tensorboard/tiny_cpu_tb/events.out.tfevents.*)
  [ "${#events[@]}" -eq 1 ] || { log "expected one event file, found: ${events[*]}"; exit 1; }
  cp "${events[0]}" "$out/tiny_cpu_tb.tfevents"
}

start=$(date +%s)
if [ "${1:-}" = "tensorboard" ]; then
  tensorboard
else
  # With the profiler window on (steps 5-6), as a profiled run of a published recipe has it.
  run tiny_cpu steps=10 profiler=xplane skip_first_n_steps_for_profiler=5 profiler_steps=2
  # A plain run, profiler off.
  run tiny_cpu_noprof steps=12
  tensorboard
fi
log "done in $(( $(date +%s) - start )) s"
