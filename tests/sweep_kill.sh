# tests/sweep_kill.sh: sourced by cli_sweep.sh and mpi_sweep.sh.
# kill_rounds DB TOTAL MS "FRACTIONS" CMD...: for each fraction f, starts CMD
# in the background (a sweep writing DB), SIGKILLs it and its children (the
# ranks, when CMD is mpirun: each in its own process group) after f·MS
# milliseconds, waits until they are gone, and prints the rows DB holds;
# each run resumes the previous one's.  Sets $partial to the number of kills
# that left 0 < rows < TOTAL.
kill_rounds() {
    _kr_db=$1 _kr_total=$2 _kr_ms=$3 _kr_fr=$4; shift 4
    partial=0
    for _kr_f in $_kr_fr; do
        "$@" </dev/null >/dev/null 2>&1 &
        _kr_pid=$!
        sleep "$(awk -v f="$_kr_f" -v ms="$_kr_ms" 'BEGIN { printf "%.3f", f * ms / 1000 }')"
        _kr_kids=$(ps -o pid= --ppid "$_kr_pid" 2>/dev/null)
        kill -9 $_kr_kids "$_kr_pid" 2>/dev/null
        wait "$_kr_pid" 2>/dev/null
        for _kr_k in $_kr_kids; do while kill -0 "$_kr_k" 2>/dev/null; do sleep 0.05; done; done
        _kr_n=0
        [ -f "$_kr_db" ] && _kr_n=$(( $("$SHARDPLAN" sweep --export csv --db "$_kr_db" 2>/dev/null | wc -l) - 1 ))
        [ "$_kr_n" -lt 0 ] && _kr_n=0
        echo "  killed after ${_kr_f} x ${_kr_ms} ms: $_kr_n of $_kr_total rows"
        if [ "$_kr_n" -gt 0 ] && [ "$_kr_n" -lt "$_kr_total" ]; then partial=$((partial + 1)); fi
    done
}
