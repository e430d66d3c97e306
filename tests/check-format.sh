#!/usr/bin/env bash
# Fails if any C++ source differs from .clang-format's style.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
mapfile -t files < <(find lib engines lazy-pages pagesrv migrator tests examples -name '*.cpp' -o -name '*.hpp' | sort)
clang-format --dry-run --Werror "${files[@]}"
echo "${#files[@]} files formatted"
