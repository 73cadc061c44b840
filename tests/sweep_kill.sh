# tests/sweep_kill.sh: sourced by cli_sweep.sh and mpi_sweep.sh.
# kill_rounds DB TOTAL MS "MOMENTS" CMD...: for each moment, starts CMD in
# the background (a sweep writing DB), SIGKILLs it and its children (the
# ranks, when CMD is mpirun: each in its own process group) at that moment,
# waits until they are gone, and prints the rows DB holds; each run resumes
# the previous one's.  A moment is a fraction f (after f·MS milliseconds) or
# rN (as soon as DB holds N rows or more, polled every 20 ms: independent of
# how long start-up and exit take, e.g. under a sanitizer).  Sets $partial
# to the number of kills that left 0 < rows < TOTAL.
rows_in() { # DB: its rows (0 when it has none or no table yet)
    _ri_n=0
    [ -f "$1" ] && _ri_n=$(( $("$SHARDPLAN" sweep --export csv --db "$1" 2>/dev/null | wc -l) - 1 ))
    [ "$_ri_n" -lt 0 ] && _ri_n=0
    echo "$_ri_n"
}
kill_rounds() {
    _kr_db=$1 _kr_total=$2 _kr_ms=$3 _kr_fr=$4; shift 4
    partial=0
    for _kr_f in $_kr_fr; do
        "$@" </dev/null >/dev/null 2>&1 &
        _kr_pid=$!
        case $_kr_f in
        r*) _kr_t=0
            while [ "$(rows_in "$_kr_db")" -lt "${_kr_f#r}" ] && [ "$_kr_t" -lt 5000 ] && kill -0 "$_kr_pid" 2>/dev/null; do
                sleep 0.02; _kr_t=$((_kr_t + 1))
            done ;;
        *) sleep "$(awk -v f="$_kr_f" -v ms="$_kr_ms" 'BEGIN { printf "%.3f", f * ms / 1000 }')" ;;
        esac
        _kr_kids=$(ps -o pid= --ppid "$_kr_pid" 2>/dev/null)
        kill -9 $_kr_kids "$_kr_pid" 2>/dev/null
        wait "$_kr_pid" 2>/dev/null
        for _kr_k in $_kr_kids; do while kill -0 "$_kr_k" 2>/dev/null; do sleep 0.05; done; done
        _kr_n=$(rows_in "$_kr_db")
        case $_kr_f in
        r*) echo "  killed at ${_kr_f#r} rows or more: $_kr_n of $_kr_total rows" ;;
        *) echo "  killed after ${_kr_f} x ${_kr_ms} ms: $_kr_n of $_kr_total rows" ;;
        esac
        if [ "$_kr_n" -gt 0 ] && [ "$_kr_n" -lt "$_kr_total" ]; then partial=$((partial + 1)); fi
    done
}
