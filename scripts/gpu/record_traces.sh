#!/usr/bin/env bash
# Record PyTorch allocation traces of real work on the GPU machine, for
# vram replay (traces that the allocator was not tuned on): text generation
# with a growing KV cache, GPT-2 training with variable sequence lengths, and
# a LLaMA-class LoRA fine-tune with gradient checkpointing, each under
# PyTorch's default allocator with its memory history on
# (torch.cuda.memory._record_memory_history(enabled="all", context=None),
# then _dump_snapshot), through train_bench.py --record-history.
#
#   OUT=/tmp/traces [RECORD="kvgen gpt2 llama_lora"] [SEED=0] [EXTRA="--batch 4"] bash scripts/gpu/record_traces.sh
#
# RECORD may also name resnet and lstm (the other workloads of
# train_bench.py). SEED draws other shapes (sequence lengths, batch sizes,
# prompts) from the same workloads, for traces that were recorded after the
# allocator's settings were chosen; EXTRA is passed to every run.
#
# Writes $OUT/<workload>.pickle.gz (vram replay reads the gzip directly) and
# $OUT/<workload>.json (train_bench.py's result line: torch's own peak
# allocated and reserved figures for the run, to compare a replay with).
# About 90 s on an H200 (imports included).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/traces}
PY=${PY:-python3}
mkdir -p "$OUT"
rec() {
	local w=$1; shift
	# EXTRA is split into words on purpose (several flags).
	# shellcheck disable=SC2086
	timeout 240 $PY scripts/gpu/train_bench.py --workload "$w" --allocator default --seed "${SEED:-0}" \
		--record-history "$OUT/$w.pickle" --json "$OUT/$w.json" "$@" ${EXTRA:-} > "$OUT/$w.log" 2>&1
	echo "-- $w: exit $?, $(du -h "$OUT/$w.pickle" 2>/dev/null | cut -f1) of history"
	[ -f "$OUT/$w.pickle" ] && gzip -f "$OUT/$w.pickle"
}
for w in ${RECORD:-kvgen gpt2 llama_lora}; do
	case $w in
	kvgen) rec kvgen --steps 12 --warmup 1 ;;
	gpt2) rec gpt2 --steps 24 --warmup 1 ;;
	llama_lora) rec llama_lora --steps 12 --warmup 1 ;;
	resnet) rec resnet --steps 24 --warmup 1 ;;
	lstm) rec lstm --steps 40 --warmup 1 ;;
	*) echo "-- $w: unknown workload (kvgen, gpt2, llama_lora, resnet, lstm)" ;;
	esac
done
ls -l "$OUT"
