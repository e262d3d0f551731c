# Sourced by the accuracy scripts (bench/lora_fmnist.sh,
# bench/multilabel_fmnist.sh): run NAME ARGS... trains once with
# "$DP train ARGS", its report, model and log under $OUTDIR as NAME.*, its
# wall time at the log's end; a run whose report is there is skipped, so
# that a script interrupted goes on where it stopped.
run() {
	local name=$1; shift
	[ -f "$OUTDIR/$name.json" ] && return
	echo "== $name: $DP train $* --quiet --report $OUTDIR/$name.json --out $OUTDIR/$name.onnx"
	local start; start=$(date +%s)
	"$DP" train "$@" --quiet --report "$OUTDIR/$name.json" --out "$OUTDIR/$name.onnx" 2>&1 | tee "$OUTDIR/$name.log"
	echo "wall=$(( $(date +%s) - start ))s" | tee -a "$OUTDIR/$name.log"
}
