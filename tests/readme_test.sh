#!/usr/bin/env bash
# tests/readme_test.sh: README.md's examples run as written, and its
# synopsis table names only options the commands have.
#   tests/readme_test.sh RAGKV_BINARY SOURCE_DIR
#
# 1. Every command line in a ```sh block of README.md runs and exits 0, in a
#    temp dir that looks like the checkout (every top-level entry linked)
#    except that build/ is the build dir holding RAGKV_BINARY (build/cli/ragkv
#    is the binary under test, whatever BUILD_DIR is). Excepted:
#    scripts/test and scripts/demo (they are the whole suite and the demo).
# 2. In the table of `ragkv` commands, every --option in a row's synopsis
#    appears in `ragkv <command> --help` (for `bench a|b|..`, in one of the
#    subcommands' helps; a description's `sub --opt` in that subcommand's).
#    Every command in `ragkv --help` (and every family of `ragkv bench
#    --help`) has its row, and the table has no other. What a synopsis says
#    about option combinations is checked by the examples, not here.
set -euo pipefail
RAGKV=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
SRC=$(cd "$2" && pwd)
BUILD=$(cd "$(dirname "$RAGKV")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail=0

# --- 1. the examples ------------------------------------------------------
mkdir "$T/tree"
for e in "$SRC"/* "$SRC"/.[!.]*; do
  [ -e "$e" ] || continue
  name=$(basename "$e")
  case $name in build|.git) continue ;; esac
  ln -s "$e" "$T/tree/$name"
done
ln -s "$BUILD" "$T/tree/build"
# Command lines of ```sh blocks, a trailing "# comment" cut off.
awk '/^```sh[[:space:]]*$/ {in_sh = 1; next} /^```/ {in_sh = 0; next}
     in_sh && NF && $1 !~ /^#/ {sub(/[[:space:]]+#[[:space:]].*$/, ""); print}' \
  "$SRC/README.md" > "$T/examples"
ran=0
while IFS= read -r cmd; do
  case $cmd in scripts/test*|scripts/demo*) echo "readme_test: excepted: $cmd"; continue ;; esac
  echo "readme_test: \$ $cmd"
  if (cd "$T/tree" && bash -euo pipefail -c "$cmd") > "$T/out" 2>&1; then
    ran=$((ran + 1))
  else
    echo "readme_test: FAILED (exit $?): $cmd" >&2
    sed 's/^/    /' "$T/out" | tail -20 >&2
    fail=1
  fi
done < "$T/examples"
echo "readme_test: $ran example(s) ran"

# --- 2. the synopsis table ---------------------------------------------------
# Rows "| `ragkv CMD ...` | description |": the backticked spans of each.
python3 - "$SRC/README.md" "$T/table" > "$T/rows" <<'PY'
import re, sys
table = open(sys.argv[2], "w")
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.startswith("| `ragkv "):
        continue
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
    spans = [s.replace("\\|", "|") for c in cells for s in re.findall(r"`([^`]*)`", c)]
    syn = spans[0].split()
    subs = syn[2].split("|") if len(syn) > 2 and "|" in syn[2] else []
    print(syn[1], "|".join(subs) or "-", file=table)
    checks = [(syn[1], "", o) for o in re.findall(r"--[a-z0-9][a-z0-9-]*", spans[0])]
    for s in spans[1:]:  # "quality --task xchunk ...": the subcommand's options
        words = s.split()
        if words and words[0] in subs:
            checks += [(syn[1], words[0], o) for o in re.findall(r"--[a-z0-9][a-z0-9-]*", s)]
    for cmd, sub, opt in checks:
        print(cmd, sub or "-", "|".join(subs) or "-", opt)
PY
declare -A HELP
# has_opt CMD SUB OPT: whether `ragkv CMD [SUB] --help` names OPT. The help
# text is cached and grepped from a here-string: piping it into `grep -q`
# under pipefail failed at random (grep exits at the first match, the
# writer then dies of SIGPIPE and the pipeline counts as failed).
has_opt() {
  local key="$1 $2"
  if [ -z "${HELP[$key]+x}" ]; then
    if [ "$2" = "-" ]; then HELP[$key]=$("$RAGKV" "$1" --help 2>&1 || true)
    else HELP[$key]=$("$RAGKV" "$1" "$2" --help 2>&1 || true); fi
  fi
  grep -Eq -- "$3([^a-z0-9-]|\$)" <<<"${HELP[$key]}"
}
checked=0
while read -r cmd sub subs opt; do
  found=0
  if [ "$sub" != "-" ]; then
    has_opt "$cmd" "$sub" "$opt" && found=1
  elif [ "$subs" != "-" ]; then
    for s in ${subs//|/ }; do has_opt "$cmd" "$s" "$opt" && { found=1; break; }; done
  else
    has_opt "$cmd" - "$opt" && found=1
  fi
  checked=$((checked + 1))
  if [ $found = 0 ]; then
    label="ragkv $cmd"; [ "$sub" != "-" ] && label="$label $sub"
    echo "readme_test: README's synopsis of '$label' names $opt, which its --help lacks" >&2
    fail=1
  fi
done < "$T/rows"
echo "readme_test: $checked synopsis option(s) checked"
# Every command (and every `bench` family) has its row, and no row more.
subcommands() { "$RAGKV" "$@" --help 2>&1 | awk '/^Subcommands:/ {on = 1; next} on && NF {print $1}' | sort; }
rows=$(awk '{print $1}' "$T/table" | sort)
if [ "$(subcommands)" != "$rows" ]; then
  echo "readme_test: the table's commands ($(echo $rows)) are not ragkv's ($(subcommands | xargs))" >&2
  fail=1
fi
bench_row=$(awk '$1 == "bench" {print $2; exit}' "$T/table" | tr '|' '\n' | sort)
if [ "$(subcommands bench)" != "$bench_row" ]; then
  echo "readme_test: the bench row's families ($(echo $bench_row)) are not ragkv bench's ($(subcommands bench | xargs))" >&2
  fail=1
fi
[ "$checked" -gt 0 ] || { echo "readme_test: no synopsis rows found" >&2; fail=1; }
exit $fail
