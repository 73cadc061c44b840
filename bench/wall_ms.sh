# bench/wall_ms.sh: sourced by the whole-process benchmarks (plan_process.sh,
# fleet_process.sh).  wall_ms CMD...: median, min and max wall milliseconds
# of $runs runs of CMD (its output discarded), as three columns.
wall_ms() {
    i=0
    while [ "$i" -lt "$runs" ]; do
        t0=$(date +%s%N)
        "$@" >/dev/null
        t1=$(date +%s%N)
        echo $(( (t1 - t0) / 1000 ))
        i=$((i + 1))
    done | sort -n | awk '{a[NR] = $1} END {printf "%10.1f %10.1f %10.1f", a[int((NR + 1) / 2)] / 1000, a[1] / 1000, a[NR] / 1000}'
}
