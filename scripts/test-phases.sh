#!/usr/bin/env bash
# `make test` without PYTEST_ARGS: the whole suite split as .ci/run splits it, in three phases that each say when
# they start and end, so that a run of several minutes shows where it is. pytest's own progress is shown as it
# goes; every phase runs even if an earlier one failed, and the exit status is 1 if any failed.
#   scripts/test-phases.sh VENV [LINT]   (LINT=yes runs ruff and mypy first; the Makefile passes its MYPY)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: scripts/test-phases.sh VENV [yes|no]}
lint=${2:-yes}
# The Makefile's MYPY (each venv keeps its own cache); the same when the script is run by hand.
mypy=${MYPY:-$venv/bin/mypy --cache-dir $venv/.mypy_cache}

began=$SECONDS
clock() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
# Ctrl-C stops the run rather than only the phase it interrupts (pytest exits on it, and the next would start).
trap 'echo; echo "make test: interrupted at $(clock $((SECONDS - began)))"; exit 130' INT

total=4
names=() what=() results=() times=()
failed=0
# phase N NAME DESCRIPTION COMMAND...: runs COMMAND, its output shown live, and records its result and duration.
phase() {
    local n=$1 name=$2 description=$3 start result
    shift 3
    start=$SECONDS
    printf '\nmake test: phase %d/%d %s (%s) started at %s\n\n' "$n" "$total" "'$name'" "$description" \
        "$(clock $((start - began)))"
    if "$@"; then result=passed; else result=FAILED; failed=1; fi
    printf '\nmake test: phase %d/%d %s %s in %s (at %s)\n' "$n" "$total" "'$name'" "$result" \
        "$(clock $((SECONDS - start)))" "$(clock $((SECONDS - began)))"
    names+=("$name") what+=("$description") results+=("$result") times+=("$(clock $((SECONDS - start)))")
}
lint_all() {
    local status=0
    "$venv/bin/ruff" check . || status=1
    $mypy || status=1
    return "$status"
}

if [ "$lint" = yes ]; then
    phase 1 lint "ruff check . and mypy --strict" lint_all
else
    printf 'make test: phase 1/%d %s skipped (LINT=%s)\n' "$total" "'lint'" "$lint"
    names+=(lint) what+=("ruff check . and mypy --strict") results+=("skipped (LINT=$lint)") times+=(-)
fi
# Everything but the multi-process fleet and chaos tests (the task backends' suites included), a module or test
# class to a worker: the tests mostly wait on real time (they use 1.4 of the two CPUs), so eight workers finish
# sooner than six (5m41s against 6m21s on 2 CPUs); the longest module or class takes 76 s.
phase 2 suite "all but the fleet tests, 8 workers" \
    "$venv/bin/pytest" -m "not fleet" -n 8 --dist loadscope --durations=15
# The fleet and chaos tests (several processes each, servers of their own killed and connections closed) run after
# the suite above, so that their load and faults never meet its timing tests: five test files at a time (a file to
# a worker: they mostly wait on real time; 5m48s on 2 CPUs against 7m05s with four, and six gain nothing, the
# longest file taking 3 minutes), as in .ci/run.
phase 3 fleet "the multi-process fleet and chaos tests, 5 workers" \
    "$venv/bin/pytest" -m "fleet and not nemesis" -n 5 --dist loadfile --durations=25
# The nemesis slice last and alone: each of its two runs is a dozen processes under random faults, which would starve
# the other fleet tests' start-up.
phase 4 nemesis "90 s of the nemesis run on Redis and on PostgreSQL, at once" \
    "$venv/bin/pytest" -m nemesis -n 2 --durations=5

echo
echo "make test: done in $(clock $((SECONDS - began)))"
for i in "${!names[@]}"; do
    printf '  %d/%d  %-6s %-8s %-22s %s\n' $((i + 1)) "$total" "${names[$i]}" "${times[$i]}" "${results[$i]}" \
        "${what[$i]}"
done
exit "$failed"
