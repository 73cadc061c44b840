#!/bin/sh
# The describing verbs: help, exit codes, JSON that parses, PaLM 540B totals.
: "${top_srcdir:?}" "${SHARDPLAN:?}"
fail=0
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
expect_rc() { # want, command...
    want=$1; shift
    "$@" >/dev/null 2>&1; rc=$?
    [ "$rc" -eq "$want" ] || { echo "  exit $rc, want $want: $*"; return 1; }
}
. "$top_srcdir/tests/json.sh"

check "--help exits 0" expect_rc 0 "$SHARDPLAN" --help
check "--help lists verbs and knobs" sh -c '"$SHARDPLAN" --help | grep -q "^  models" && "$SHARDPLAN" --help | grep -q SHARDPLAN_DEBUG'
check "--version exits 0" expect_rc 0 "$SHARDPLAN" --version
check "no verb exits 2" expect_rc 2 "$SHARDPLAN"
check "bad verb exits 2" expect_rc 2 "$SHARDPLAN" frobnicate
check "bad option exits 2" expect_rc 2 "$SHARDPLAN" --frobnicate
for v in models model hw; do
    check "$v --help exits 0" expect_rc 0 "$SHARDPLAN" $v --help
done
check "model show --help exits 0" expect_rc 0 "$SHARDPLAN" model show --help
check "hw show --help exits 0" expect_rc 0 "$SHARDPLAN" hw show --help
check "model show bad option exits 2" expect_rc 2 "$SHARDPLAN" model show palm-540b --frob
check "model show bad context exits 2" expect_rc 2 "$SHARDPLAN" model show palm-540b --context x
check "model show unknown model exits 2" expect_rc 2 "$SHARDPLAN" model show no-such-model
check "model bad subcommand exits 2" expect_rc 2 "$SHARDPLAN" model frob
check "models exits 0" expect_rc 0 "$SHARDPLAN" models
check "hw exits 0" expect_rc 0 "$SHARDPLAN" hw
check "models lists palm-540b" sh -c '"$SHARDPLAN" models | grep -q "^palm-540b "'
check "hw lists tpu-v4" sh -c '"$SHARDPLAN" hw | grep -q "^tpu-v4 "'
check "model show table" sh -c '"$SHARDPLAN" model show llama2-70b | grep -q "params total"'
check "hw show table" sh -c '"$SHARDPLAN" hw show h100 | grep -q "989 TFLOP/s"'

palm_json() { # PaLM 540B: the paper's parameter count, the parts add up, bf16 bytes, shape
    "$SHARDPLAN" model show palm-540b --json | json_check \
        'abs($1 - 540.35e9) <= 0.005 * 540.35e9 && $2 + $3 + $4 + $5 == $1 && $6 == 2 * $1 && $7 == 118 && $8 == 2048' \
        -n - "" /params/total /params/embedding /params/attention /params/ffn /params/norm /weight_bytes/bf16 \
        /model/n_layers /context
}
llama_json() { # Llama 2 70B from its Hugging Face config: GQA KV bytes, attention FLOPs at 1024
    "$SHARDPLAN" model show "$top_srcdir/data/hf/llama2-70b/config.json" --context 1024 --json | json_check \
        '$1 == 327680 && abs($2 - 68.98e9) <= 0.005 * 68.98e9 && $3 == 1024 && $4 == 4 * 80 * 64 * 128 * 1024' \
        -n - "" /kv_bytes_per_token /params/total /context /attention_flops_per_token
}
list_len() { # verb, least entries: its --json is a list or object of at least that many
    "$SHARDPLAN" "$1" --json | json_check "\$1 >= $2" -l - ""
}
check "model show palm-540b --json: params.total within 0.5% of 540.35e9" palm_json
check "model show HF llama2-70b --json: kv bytes 327680" llama_json
check "models --json parses" list_len models 19
check "hw --json parses" list_len hw 5
check "hw show --json round-trips" sh -c '
    "$SHARDPLAN" hw show tpu-v4 --json > hw-rt.$$.json && "$SHARDPLAN" hw show hw-rt.$$.json --json | cmp - hw-rt.$$.json; rc=$?; rm -f hw-rt.$$.json; exit $rc'
exit $fail
