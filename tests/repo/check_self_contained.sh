#!/usr/bin/env bash
# Checks that the repository stands alone (issue "Fresh clone"):
#  1. no source, test, script, CMake, deploy file or .ci/run refers to the
#     shared folder that sits beside the developers' checkouts (users do not
#     have it); docs/benchmarks.md alone may cite it, in the commands that
#     made its numbers;
#  2. every relative link in a Markdown file points at a file or folder
#     inside the repository.
# Usage: check_self_contained.sh [REPO_ROOT]   (exit 0 clean, 1 with a list)
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
cd "$root"

# Built from parts so that this file does not match itself.
outside_dir="shared"
pattern="(\.\./|/work/)${outside_dir}(/|\b)"

list_files() {
  if git -C "$root" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    git -C "$root" ls-files --cached --others --exclude-standard
  else
    find . -type f -not -path './build/*' -not -path './.git/*' | sed 's#^\./##'
  fi
}

status=0
mapfile -t files < <(list_files)

for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in
    docs/benchmarks.md) continue ;;            # may cite it in commands
    tests/data/*) continue ;;                  # corpora, not code
  esac
  if grep -nIE "$pattern" "$f" > /tmp/self_contained.$$ 2>/dev/null; then
    while IFS= read -r hit; do
      echo "refers outside the repository: $f:$hit"
    done < /tmp/self_contained.$$
    status=1
  fi
done
rm -f /tmp/self_contained.$$

# Relative Markdown links: ](target) or ](target#anchor), not URLs.
for f in "${files[@]}"; do
  case "$f" in *.md) ;; *) continue ;; esac
  [ -f "$f" ] || continue
  dir=$(dirname "$f")
  while IFS= read -r target; do
    target="${target%%#*}"
    [ -n "$target" ] || continue
    case "$target" in
      http://*|https://*|mailto:*) continue ;;
    esac
    if [ ! -e "$dir/$target" ]; then
      echo "broken link: $f -> $target"
      status=1
    else
      resolved=$(cd "$dir" && realpath -m "$target")
      case "$resolved" in
        "$root"|"$root"/*) ;;
        *) echo "link leaves the repository: $f -> $target"; status=1 ;;
      esac
    fi
  done < <(grep -oE '\]\([^) ]+\)' "$f" | sed -E 's/^\]\((.*)\)$/\1/')
done

if [ "$status" -eq 0 ]; then
  echo "check_self_contained: ${#files[@]} files, no reference outside the repository"
fi
exit "$status"
