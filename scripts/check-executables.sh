#!/usr/bin/env bash
# Fails when git tracks an executable: any ELF file, or a file with the
# executable bit that is not a script (first line "#!..."). Build outputs
# (binaries, compiled tests like slidelog.test) belong in .gitignore, not in
# the history of every clone. Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

bad=()
# git ls-files -s: "<mode> <object> <stage>\t<path>"; the mode is the index's.
while IFS= read -r -d '' entry; do
  mode=${entry%% *}
  path=${entry#*$'\t'}
  case $mode in 100644 | 100755) ;; *) continue ;; esac # symlinks, submodules
  [ -f "$path" ] || continue                            # deleted in the working tree
  magic=$(head -c 4 -- "$path" | od -An -tx1 | tr -d ' \n')
  if [ "$magic" = 7f454c46 ]; then
    bad+=("$path: an ELF binary")
  elif [ "$mode" = 100755 ] && [ "${magic:0:4}" != 2321 ]; then
    bad+=("$path: executable bit set but not a #! script")
  fi
done < <(git ls-files -s -z)

if [ ${#bad[@]} -gt 0 ]; then
  echo "executables are tracked (git rm --cached them, ignore build outputs in .gitignore," >&2
  echo "or chmod -x a file that is not a program: git update-index --chmod=-x FILE):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "no executable tracked ($(git ls-files | wc -l) files checked)"
