#!/bin/sh
# mpi_sweep.sh: `mpirun -np 3 shardplan sweep` (rank 0 writes, ranks 1 and 2
# compute) gives the database a one-process sweep gives (exports compared
# byte for byte: estimate, plan and frontier specs); a job killed with
# SIGKILL (mpirun and every rank at once) several times and rerun under
# mpirun ends equal to the uninterrupted one-process run, no row lost or
# duplicated; ranks reading different specs, and --jobs under mpirun, are
# refused.  Skips (77) without MPI.
set -u
: "${top_srcdir:=.}"
SHARDPLAN=${SHARDPLAN:-./shardplan}
if test -z "${MPIRUN:-}" || ! "$SHARDPLAN" run --help | grep -q "backend mpi"; then
    echo "mpi_sweep: SKIP: no MPI (MPIRUN='${MPIRUN:-}')"
    exit 77
fi
OMPI_ALLOW_RUN_AS_ROOT=1; export OMPI_ALLOW_RUN_AS_ROOT
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM
OMPI_MCA_btl=self,vader; export OMPI_MCA_btl
OMPI_MCA_rmaps_base_oversubscribe=1; export OMPI_MCA_rmaps_base_oversubscribe
. "$top_srcdir/tests/sweep_kill.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpi_sweep.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # description, command...
    d=$1; shift
    if "$@"; then echo "ok   $d"; else echo "FAIL $d"; fail=1; fi
}
mpi3() { # args...: shardplan under mpirun with 3 ranks
    timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np 3 "$SHARDPLAN" "$@" </dev/null
}
export_both() { # database, name: name.csv and name.json
    "$SHARDPLAN" sweep --export csv --db "$1" >"$tmp/$2.csv" &&
    "$SHARDPLAN" sweep --export json --db "$1" >"$tmp/$2.json"
}

# ---- one process and three ranks give the same database ----------------------
# 2 models x 11 batches x 32 prompts x 5 gens x 6 layouts = 21,120 estimate points
cat >"$tmp/grid.json" <<'EOF'
{"models": ["palm-62b", "palm-540b"], "hw": ["tpu-v4"], "chips": [64],
 "batch": {"from": 1, "to": 1024, "times": 2}, "prompt": {"from": 64, "to": 2048, "step": 64},
 "gen": {"from": 0, "to": 256, "step": 64}, "compute": "estimate",
 "layouts": ["mesh=4x4x4,prefill=ws1d/heads,decode=ws1d/heads", "mesh=4x4x4,prefill=ws2d/heads,decode=ws2d/batch",
   "mesh=4x4x4,weights=int8,prefill=ws2d/heads,decode=ws2d/batch", "mesh=8x8x1,prefill=ws2d/heads,decode=ws2d/batch",
   "mesh=4x4x4,prefill=wg-xyz/heads,decode=wg-xyz/heads", "mesh=2x4x8,prefill=ws2d/heads,decode=ws2d/batch"]}
EOF
total=21120
cat >"$tmp/plan.json" <<'EOF'
{"models": ["tiny-llama", "llama2-7b"], "hw": ["h100", "tpu-v4"], "chips": [1, 2, 4, 8], "batch": [1, 16],
 "prompt": [128], "gen": [0, 32], "compute": "plan", "objective": "cost"}
EOF
cat >"$tmp/front.json" <<'EOF'
{"models": ["palm-8b", "llama2-7b"], "hw": ["tpu-v4"], "chips": [4, 8, 16], "batch": [1, 8, 64], "prompt": [512],
 "gen": [0, 64], "compute": "frontier", "latency_metric": "decode", "cost_metric": "phase"}
EOF
for spec in grid plan front; do
    "$SHARDPLAN" sweep "$tmp/$spec.json" --db "$tmp/$spec.1.db" --jobs 2 --quiet || echo "  $spec: one process failed"
    mpi3 sweep "$tmp/$spec.json" --db "$tmp/$spec.3.db" --quiet >"$tmp/$spec.log" 2>&1; rc=$?
    check "$spec: mpirun -np 3 sweep exits 0" test "$rc" -eq 0 || sed 's/^/    /' "$tmp/$spec.log" | head -20
    export_both "$tmp/$spec.1.db" "$spec.1"
    export_both "$tmp/$spec.3.db" "$spec.3"
    check "$spec: rows present" test "$(wc -l <"$tmp/$spec.1.csv")" -gt 1
    check "$spec: 3 ranks = 1 process (csv)" cmp -s "$tmp/$spec.1.csv" "$tmp/$spec.3.csv"
    check "$spec: 3 ranks = 1 process (json)" cmp -s "$tmp/$spec.1.json" "$tmp/$spec.3.json"
done
check "grid: one row per point" test "$(wc -l <"$tmp/grid.1.csv")" -eq $((total + 1))
check "rank 0 reports, once" sh -c 'mpi3() { timeout 300 "$MPIRUN" --oversubscribe --bind-to none -np 3 "$SHARDPLAN" "$@" </dev/null; }
    n=$(mpi3 sweep "$0" --db "$1" 2>&1 | grep -c "already there"); [ "$n" -eq 1 ]' "$tmp/plan.json" "$tmp/plan.3.db"

# ---- killed with SIGKILL (mpirun and every rank), rerun: the same database --------
# each kill as soon as the database holds that many rows (mpirun's start-up
# and exit take long and vary, under a sanitizer most of all)
kill_rounds "$tmp/res.db" "$total" 0 "r1 r6000 r12000 r16000" \
    "$MPIRUN" --oversubscribe --bind-to none -np 3 "$SHARDPLAN" sweep "$tmp/grid.json" --db "$tmp/res.db" \
    --quiet --batch-rows 512
check "at least one kill landed mid-sweep ($partial)" test "$partial" -ge 1
mpi3 sweep "$tmp/grid.json" --db "$tmp/res.db" --quiet; rc=$?
check "resumed under mpirun: exits 0" test "$rc" -eq 0
export_both "$tmp/res.db" res
check "resumed under mpirun = uninterrupted one process (csv)" cmp -s "$tmp/grid.1.csv" "$tmp/res.csv"
check "resumed under mpirun = uninterrupted one process (json)" cmp -s "$tmp/grid.1.json" "$tmp/res.json"

# ---- refusals -----------------------------------------------------------------
# ranks reading different specs (MPMD: rank 0 one spec, ranks 1-2 another)
timeout 120 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$SHARDPLAN" sweep "$tmp/plan.json" --db "$tmp/mix.db" \
    --quiet : -np 2 "$SHARDPLAN" sweep "$tmp/front.json" --db "$tmp/mix.db" --quiet </dev/null >"$tmp/mix.log" 2>&1
rc=$?
check "ranks with different specs: refused (exit $rc), naming it" sh -c \
    '[ "$1" -ne 0 ] && [ "$1" -ne 124 ] && grep -q "another spec" "$0"' "$tmp/mix.log" "$rc"
mpi3 sweep "$tmp/plan.json" --db "$tmp/j.db" --jobs 2 >"$tmp/j.log" 2>&1; rc=$?
check "--jobs 2 under mpirun: refused (exit $rc), naming ranks" sh -c \
    '[ "$1" -ne 0 ] && [ "$1" -ne 124 ] && grep -q "start more ranks" "$0"' "$tmp/j.log" "$rc"
exit $fail
