#!/bin/sh
# cli_run.sh: `shardplan run` with fixed layouts and with --layout auto on the
# tiny models: JSON keys present, measured bytes == predicted bytes, memory
# allocated per chip == predicted; a layout
# that does not apply exits 2 with the reason; --help exits 0; --backend cuda
# without a GPU exits 2 saying why.
set -u
SHARDPLAN=${SHARDPLAN:-./shardplan}
out=/tmp/sp_run_out.$$
errf=/tmp/sp_run_err.$$
trap 'rm -f $out $errf' EXIT
fail=0
check() { # name, expected exit, command...
    name=$1; want=$2; shift 2
    "$@" >$out 2>$errf
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL: $name: exit $rc, wanted $want"; sed 's/^/  /' $errf | head -5; fail=$((fail + 1)); return 1
    fi
    return 0
}
. "${top_srcdir:-.}/tests/json.sh"
json_ok() { # name: the JSON in $out has the keys and measured == predicted
    json_keys_ok || { echo "FAIL: $1: JSON"; fail=$((fail + 1)); }
}
json_keys_ok() {
    "$JSONQ" $out "" /layout /tokens /prefill_s /decode_step_s /tokens_per_s /comm /comm/measured_bytes \
        /comm/predicted_bytes >/dev/null &&
    json_check '$1 == $2' $out /comm /measured_bytes /predicted_bytes &&
    json_check '$1 == 0' -n $out /comm/mismatches &&
    # tokens: batch sequences of gen each
    b=$("$JSONQ" -n $out /batch) && g=$("$JSONQ" -n $out /gen) &&
    json_check "\$1 == $b" -l $out /tokens && json_check "\$1 == $g" -l $out '/tokens/*' &&
    json_check '$1 > 0 && $2 > 0' -n $out "" /prefill_s /tokens_per_s &&
    # measured: the same prefill time, per step kind the time per operation kind
    json_check '$1 == $2' -n $out "" /measured/prefill_s /prefill_s &&
    [ "$("$JSONQ" -k $out /measured/steps | sort | tr '\n' ' ')" = "decode_step prefill " ] &&
    for st in prefill decode_step; do
        [ "$("$JSONQ" -k $out /measured/steps/$st | sort | tr '\n' ' ')" = \
            "all-gather all-reduce all-to-all attention host-copy matmul other reduce-scatter send-recv " ] &&
        json_check '$1 >= 0' -n $out "/measured/steps/$st/*" &&
        json_check '$1 > 0' -n $out /measured/steps/$st/matmul || { echo "  measured.steps.$st"; return 1; }
    done &&
    json_check '$1 == $2 && $2 > 0' -n $out /memory /allocated_bytes_per_chip /predicted_bytes_per_chip
}
run="$SHARDPLAN run --batch 4 --prompt 5 --gen 4 --json"
for case in \
    "tiny-llama mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch" \
    "tiny-gpt2 mesh=2x2x2,weights=int8,kv=f32,prefill=wg-xy/heads,decode=wg-xy/heads" \
    "tiny-palm mesh=2x1x2,weights=bf16,kv=bf16,prefill=wg-x/heads,decode=wg-x/heads" \
    "tiny-llama stages=2,microbatches=2,mesh=2x1x1,weights=int8,kv=f32,prefill=ws1d/heads,decode=ws1d/heads"; do
    set -- $case
    check "run $1 $2" 0 $run --model "$1" --layout "$2" && json_ok "run $1 $2"
done
# --trace: Chrome Trace Event JSON with one complete event per step and chip
trace=/tmp/sp_run_trace.$$
check "run --trace" 0 $run --model tiny-llama --trace $trace \
    --layout mesh=2x2x1,weights=f32,kv=f32,prefill=ws2d/heads,decode=ws2d/batch && json_ok "run --trace"
# complete events: no (chip, step, microbatch) twice, chips 0-3, both threads, prefill and decode steps
"$JSONQ" -w /ph=X $trace '/traceEvents/*' /pid /args/id /args/mb >$trace.ev &&
    [ -s $trace.ev ] && [ -z "$(sort $trace.ev | uniq -d)" ] &&
    [ "$(cut -f1 $trace.ev | sort -un | tr '\n' ' ')" = "0 1 2 3 " ] &&
    json_check '$1 >= 0 && ($2 == 0 || $2 == 1)' -n -w /ph=X $trace '/traceEvents/*' /dur /tid &&
    cut -f2 $trace.ev | grep -q '^decode2/' && cut -f2 $trace.ev | grep -q '^prefill/layer/' ||
    { echo "FAIL: --trace: file"; fail=$((fail + 1)); }
rm -f $trace.ev
# --warmup: untimed runs first; the trace and the byte counts are the measured run's alone,
# and the tokens those of a run without warm-up
L1=mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
check "run cold" 0 $run --model tiny-llama --layout $L1 && "$JSONQ" $out /tokens >$trace.cold
check "run --warmup 2" 0 $run --model tiny-llama --layout $L1 --warmup 2 --trace $trace && json_ok "run --warmup"
"$JSONQ" $out /tokens >$trace.warm
cmp -s $trace.cold $trace.warm && [ -s $trace.warm ] || { echo "FAIL: --warmup changed the tokens"; fail=$((fail + 1)); }
"$JSONQ" -w /ph=X $trace '/traceEvents/*' /pid /args/id /args/mb >$trace.ev &&
    [ -s $trace.ev ] && [ -z "$(sort $trace.ev | uniq -d)" ] ||
    { echo "FAIL: --warmup: the trace holds a step twice"; fail=$((fail + 1)); }
rm -f $trace.ev $trace.cold $trace.warm
check "run --warmup -1" 2 $run --model tiny-llama --layout $L1 --warmup -1
rm -f $trace
check "run --trace unwritable" 2 $run --model tiny-llama --trace /nonexistent/dir/t.json \
    --layout mesh=2x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
grep -q "/nonexistent/dir/t.json" $errf || { echo "FAIL: --trace unwritable: file not named"; fail=$((fail + 1)); }
# auto: planned for a GPU profile, run here; the chosen layout is printed
for m in tiny-llama tiny-gpt2 tiny-palm; do
    for n in 1 4 8; do
        check "auto $m $n" 0 $run --model $m --layout auto --chips $n --hw a100-80g && json_ok "auto $m $n"
        json_check '$1 == "auto"' $out /layout_source && json_check "\$1 == $n" -n $out /chips ||
            { echo "FAIL: auto $m $n: layout_source/chips"; fail=$((fail + 1)); }
    done
done
check "auto human" 0 $SHARDPLAN run --model tiny-llama --batch 2 --prompt 4 --gen 2 --layout auto --chips 2 --hw h100
grep -q "^layout (auto" $out || { echo "FAIL: auto does not print the chosen layout"; fail=$((fail + 1)); }
# errors
check "auto without --hw" 2 $SHARDPLAN run --model tiny-llama --layout auto --chips 4
grep -q -- "--hw" $errf || { echo "FAIL: auto without --hw: no reason"; fail=$((fail + 1)); }
check "layout does not apply" 2 $SHARDPLAN run --model tiny-llama --batch 3 --prompt 4 --gen 2 \
    --layout mesh=3x1x1,weights=f32,kv=f32,prefill=ws1d/heads,decode=ws1d/heads
grep -q "does not apply" $errf || { echo "FAIL: bad layout: no reason"; cat $errf; fail=$((fail + 1)); }
check "chips differ" 2 $SHARDPLAN run --model tiny-llama --chips 2 --layout mesh=2x2x1,prefill=ws1d/heads,decode=ws1d/heads
check "--help" 0 $SHARDPLAN run --help
grep -q "layout" $out || { echo "FAIL: --help prints no usage"; fail=$((fail + 1)); }
# --backend cuda with no GPU to run on: exit 2 with the CUDA runtime's reason
# (or, in a build without CUDA, the configure flag); with a GPU it runs
# (tests/cuda_run.sh)
probe="${top_builddir:-.}/kernels/cuda/cuda_probe"
if test -x "$probe" && "$probe" >/dev/null 2>&1; then
    echo "cli_run: a GPU is visible: --backend cuda is checked by cuda_run.sh"
else
    check "cuda" 2 $SHARDPLAN run --backend cuda --model tiny-llama --layout mesh=1x1x1,prefill=ws1d/heads,decode=ws1d/heads
    if test -x "$probe"; then want="no GPU is visible (.*cuda.*)"; else want="this build has no CUDA .*--with-cuda"; fi
    grep -qi -- "--backend cuda: $want" $errf || { echo "FAIL: cuda: no reason ($want)"; cat $errf; fail=$((fail + 1)); }
fi
# --prompt-ids: lines and JSON give the same run; --json echoes the ids; a ragged
# batch, a bad id and an id outside the vocabulary exit 2 saying so; --logits .npy
ids=/tmp/sp_run_ids.$$
printf '1 2 3 4\n5 6 7 8\n' > $ids
L=mesh=2x1x1,weights=f32,kv=f32
if check "prompt ids (lines)" 0 "$SHARDPLAN" run --model tiny-llama --layout $L --prompt-ids $ids --gen 3 --json \
    --logits $ids.npy --logits-all; then
    # the ids echoed; the logits of every step as a float32 .npy of shape (gen, batch, vocab)
    { json_check '$1 == "[[1,2,3,4],[5,6,7,8]]" && $2 == 2 && $3 == 4' $out "" /prompt_ids /batch /prompt &&
      json_check '$1 == 2' -l $out /tokens &&
      [ "$(od -An -tx1 -N6 $ids.npy | tr -d ' \n')" = 934e554d5059 ] &&   # \x93NUMPY
      hl=$(od -An -tu1 -j8 -N2 $ids.npy | awk '{ print $1 + 256 * $2 }') &&
      hdr=$(dd if=$ids.npy bs=1 skip=10 count="$hl" 2>/dev/null) &&
      case $hdr in *"'<f4'"*"(3, 2, 512)"*|*"(3, 2, 512)"*"'<f4'"*) true ;; *) echo "  header: $hdr"; false ;; esac &&
      [ "$(wc -c <$ids.npy)" -eq $((10 + hl + 3 * 2 * 512 * 4)) ]; } || { echo "FAIL: prompt ids JSON / npy"; fail=$((fail + 1)); }
    cp $out $ids.lines
fi
check "prompt ids (JSON, stdin)" 0 sh -c "echo '[[1,2,3,4],[5,6,7,8]]' | \"$SHARDPLAN\" run --model tiny-llama --layout $L --prompt-ids - --gen 3 --json" &&
    a=$("$JSONQ" $out /tokens) && b=$("$JSONQ" $ids.lines /tokens) && [ "$a" = "$b" ] ||
    { echo "FAIL: JSON prompt ids differ from lines"; fail=$((fail + 1)); }
printf '1 2 3\n4 5\n' > $ids
check "ragged prompts" 2 "$SHARDPLAN" run --model tiny-llama --layout $L --prompt-ids $ids --gen 2 &&
    { grep -q "prompts of different lengths (a ragged batch) are not implemented" $errf || { echo "FAIL: ragged message"; cat $errf; fail=$((fail + 1)); }; }
printf '1 x\n' > $ids
check "bad prompt id" 2 "$SHARDPLAN" run --model tiny-llama --layout $L --prompt-ids $ids --gen 2 &&
    { grep -q "$ids:1: expected token ids" $errf || { echo "FAIL: bad id message"; cat $errf; fail=$((fail + 1)); }; }
printf '1 600\n' > $ids
check "id outside vocab" 2 "$SHARDPLAN" run --model tiny-llama --layout $L --prompt-ids $ids --gen 2 &&
    { grep -q "id 600 (sequence 0) is outside the vocabulary of 512" $errf || { echo "FAIL: vocab message"; cat $errf; fail=$((fail + 1)); }; }
rm -f $ids $ids.npy $ids.lines
[ $fail -eq 0 ] && echo "cli_run: all passed" || echo "cli_run: $fail failed"
[ $fail -eq 0 ]
