# cli_lib.sh: what the CLI suites share, sourced after `set -eu` with sinter's path as $1:
# $sinter (absolute: the suite changes directory), a scratch directory $dir removed at exit and
# made the working directory, fail MESSAGE, and refused CODE NEEDLE ARGS... (sinter ARGS exits
# with CODE within 60 s and its stderr holds NEEDLE).
sinter=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
dir=$(mktemp -d "/tmp/sn_$(basename "$0" .sh)_XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
fail() { echo "FAIL: $*"; [ -f err.txt ] && cat err.txt; exit 1; }
refused() {
    code=$1 needle=$2; shift 2
    status=0
    timeout 60 "$sinter" "$@" > out.txt 2> err.txt || status=$?
    [ "$status" = "$code" ] || fail "sinter $* exited with $status, not $code"
    grep -qF -- "$needle" err.txt || fail "sinter $* did not say: $needle"
}
