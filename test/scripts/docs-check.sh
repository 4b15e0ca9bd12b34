#!/usr/bin/env bash
# Three checks of the tree that keep the repository a reference that stands
# alone, each first proven on a planted tree:
#   - pointers: no file of the tree (tracked, or untracked and not ignored)
#     points into the "shared" directory beside the clone (dot-dot-slash
#     "shared"); what the tree needs from there is written into it
#     (third_party/reference/, docs/upstream/);
#   - history: the reference docs (README.md, every other README.md of the
#     tree, e.g. test/, bench/ttft/, the chart's, and docs/**/*.md, all except
#     docs/results/, whose run folders keep their history) carry no
#     run history and no words about how the work was organised: no commit
#     hash, no load average ("at load 15", "load 9-13"), no date or UTC time
#     of a run, no engineer, sprint, teammate, team member, worktree, work
#     period, "stop 11", "this stop", "the lead", "this session", "the
#     session's", "device time". History goes to CHANGELOG.md and
#     docs/results/;
#   - links: every relative Markdown link of every *.md file of the tree
#     ("[text](path)", "![image](path)", an anchor after "#" ignored)
#     names a file or directory that exists, relative to the file's own
#     directory (web addresses and in-page anchors are not checked).
# The self-test plants each kind of violation once, beside near misses that
# must pass (the team-a namespace, "sessions per replica", "direct load
# 0.89", a UUID, a 0x constant, a dated results folder's name, a results
# README with a hash; links to a page, a page's anchor, an in-page anchor
# and a web address), and wants exactly the planted lines: a check that
# finds nothing, or too much, fails.
# Prints "docs-check: ok: ..." / "docs-check: FAILED: ..." per check with the
# offending lines, and exits non-zero if one failed. Under 1 s.
# Usage: test/scripts/docs-check.sh [ROOT] (default: this clone)
set -uo pipefail
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
failed=0
ok() { echo "docs-check: ok: $*"; }
bad() { echo "docs-check: FAILED: $*"; failed=$((failed + 1)); }

# The pointer the tree must not hold, spelled in two parts so that this file
# does not hold it either.
outside_dir="../""shared"

# Prints "FILE:LINE:TEXT" for each line of the named files (paths relative to
# the current directory) that points into the shared directory beside the
# clone. Binary files are skipped.
outside_pointers() {
  [ $# -gt 0 ] || return 0
  grep -nHIF -e "$outside_dir" -- "$@" 2>/dev/null
  return 0
}

# The reference docs among the named paths.
reference_docs() {
  local f
  for f in "$@"; do
    case "$f" in
      docs/results/*) ;;
      README.md | */README.md | docs/*.md) echo "$f" ;;
    esac
  done
}

# Prints "FILE:LINE:TEXT" for each line of the named files that carries run
# history or words about how the work was organised, sorted by file and line.
#  - a commit hash: 7 to 40 lower-case hex digits with at least one digit and
#    one letter, not part of a longer word, path, number or UUID;
#  - load: "load average", "at load 15", "under a load of 6", "load 9-13"
#    (not "load 2-4 KiB", "direct load 0.89");
#  - a run's date (not a dated name after "-" or "/": results folders) or
#    its UTC time;
#  - work periods and people.
history_words() {
  [ $# -gt 0 ] || return 0
  local hash='(?<![\w./-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])'
  local words
  words='\bload average|\bload avg\b|\b(at|under) (a )?load (of )?[0-9]'
  words+='|\bload [0-9]+(\.[0-9]+)? ?[-–] ?[0-9]+(?! ?(KiB|MiB|GiB|K\b|tokens?|chunks?|blocks?))'
  words+='|(?<![-/\w])20[0-9]{2}-[01][0-9]-[0-3][0-9](?![-\w])'
  words+='|\b[0-2]?[0-9]:[0-5][0-9]([-–][0-2]?[0-9]:[0-5][0-9])? UTC\b'
  words+='|\bengineers?\b|\bsprints?\b|\bteammates?\b|\bteam members?\b|\bworktrees?\b'
  words+='|\bwork periods?\b|\bstops? [0-9]+\b|\b(this|last|previous|next|that) stop\b'
  words+="|\\bthe lead\\b|\\blead's\\b|\\b(this|the|last|previous|next|whole) session\\b"
  words+="|\\bsession's\\b|\\bdevice time\\b"
  {
    grep -nHP -e "$hash" -- "$@"
    grep -nHiP -e "$words" -- "$@"
  } 2>/dev/null | sort -t: -k1,1 -k2,2n -u
  return 0
}

# Prints "FILE:LINE:TARGET" for each relative link of the named Markdown
# files (paths relative to the current directory) whose target does not
# exist.
broken_links() {
  [ $# -gt 0 ] || return 0
  local f dir line target
  while IFS=: read -r f line target; do
    case "$target" in
      '#'* | *://* | mailto:*) continue ;;
    esac
    dir=.
    case "$f" in */*) dir=${f%/*} ;; esac
    [ -e "$dir/${target%%#*}" ] || echo "$f:$line:$target"
  done < <(grep -noHP '\]\(\K[^)\s]+(?=\))' -- "$@" 2>/dev/null)
  return 0
}

# Self-test on a planted tree.
planted=$(mktemp -d /tmp/cxlkv-docs-check.XXXXXX)
trap 'rm -rf "$planted"' EXIT
mkdir -p "$planted/docs/results/run-2026-12-01" "$planted/docs/sub" "$planted/test" \
         "$planted/src" "$planted/bench/x"
cat >"$planted/README.md" <<'TXT'
Measured at 9195e6a on main.
Warm, at a load average of 12.
Took 80 s at load 15.
Done in stop 11 by the lead.
Two engineers built this.
Measured 2026-12-02 19:58-20:45 UTC.
Device time used: 16 minutes of the session's 30.
TXT
cat >"$planted/docs/clean.md" <<'TXT'
Namespaces team-a and team-b; 1-8 sessions per replica.
Direct load 0.89, one load of 64 chunks, load 2-4 KiB pieces.
Claim 178503b0-74af-434b-9006-b260a4a00a01; magic 0xc0ffee1234; crc32c 1234567.
Results in docs/results/h200-2026-12-01/ and dra-2026-12-01-2119; run cxlkv stop.
The host agent and the stage's helpers; the deadbeef pattern; sha256.
TXT
echo "a sprint of work" >"$planted/docs/sub/deep.md"
echo "Rerun at a26b6be, load average 3." >"$planted/docs/results/run-2026-12-01/README.md"
echo "the worktree of the lead" >"$planted/test/README.md"
echo "Measured at a load average of 9." >"$planted/bench/x/README.md"
echo "Measured at a load average of 9." >"$planted/bench/x/notes.txt"
echo "Rerun at a26b6be, load average 3." >"$planted/CHANGELOG.md"
echo "see ${outside_dir}/reference/x.md" >"$planted/docs/clean2.md"
printf 'int x;  // from %s/tools\n' "$outside_dir" >"$planted/src/a.cc"
cat >"$planted/docs/links.md" <<'TXT'
See [the clean page](clean.md), [its part](clean.md#part), [a page](#here) and
[the web](https://example.com/x.md); [gone](missing.md) and ![a plot](results/plot.png).
TXT
printf 'Up: [readme](../../README.md), [no](../../nope/x.md#a)\n' >"$planted/docs/sub/links.md"
echo "ok" >"$planted/src/b.cc"
(
  cd "$planted" || exit 1
  mapfile -t all < <(find . -type f | sed 's#^\./##' | sort)
  mapfile -t docs < <(reference_docs "${all[@]}")
  history_words "${docs[@]}" | cut -d: -f1,2 >history.out
  outside_pointers "${all[@]}" | cut -d: -f1,2 | sort >pointers.out
  mapfile -t md < <(printf '%s\n' "${all[@]}" | grep '\.md$')
  broken_links "${md[@]}" | sort >links.out
)
want_history="README.md:1 README.md:2 README.md:3 README.md:4 README.md:5 README.md:6 README.md:7"
want_history+=" bench/x/README.md:1 docs/sub/deep.md:1 test/README.md:1"
got=$(tr '\n' ' ' <"$planted/history.out" | sed 's/ $//')
if [ "$got" = "$want_history" ]; then
  ok "history check finds exactly the planted lines"
else
  bad "history check on the planted tree: want '$want_history', found '$got'"
fi
got=$(tr '\n' ' ' <"$planted/pointers.out" | sed 's/ $//')
if [ "$got" = "docs/clean2.md:1 src/a.cc:1" ]; then
  ok "pointer check finds exactly the planted lines"
else
  bad "pointer check on the planted tree: want 'docs/clean2.md:1 src/a.cc:1', found '$got'"
fi

got=$(tr '\n' ' ' <"$planted/links.out" | sed 's/ $//')
want_links="docs/links.md:2:missing.md docs/links.md:2:results/plot.png docs/sub/links.md:1:../../nope/x.md#a"
if [ "$got" = "$want_links" ]; then
  ok "link check finds exactly the planted broken links"
else
  bad "link check on the planted tree: want '$want_links', found '$got'"
fi

# The tree itself.
cd "$ROOT" || exit 1
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files --cached --others --exclude-standard | sort -u)
else
  mapfile -t files < <(find . -type f -not -path './build*' -not -path './.git/*' \
                         -not -path './.*' | sed 's#^\./##' | sort)
fi
pointers=$(outside_pointers "${files[@]}")
if [ -z "$pointers" ]; then
  ok "no file points outside the repository"
else
  bad "files point outside the repository (write what they need into the tree:" \
      "third_party/reference/ or docs/upstream/):"
  echo "$pointers"
fi
mapfile -t docs < <(reference_docs "${files[@]}")
history=$(history_words "${docs[@]}")
if [ -z "$history" ]; then
  ok "the reference docs carry no run history (${#docs[@]} files)"
else
  bad "run history or words about the work's organisation in the reference docs (move" \
      "run history to CHANGELOG.md or docs/results/; say what the software does, not who" \
      "or when):"
  echo "$history"
fi
mapfile -t md < <(printf '%s\n' "${files[@]}" | grep '\.md$')
links=$(broken_links "${md[@]}")
if [ -z "$links" ]; then
  ok "every relative link of the Markdown files resolves (${#md[@]} files)"
else
  bad "relative links that name no file of the tree (FILE:LINE:TARGET; fix the path," \
      "relative to the file's own directory):"
  echo "$links"
fi
[ "$failed" -eq 0 ]
