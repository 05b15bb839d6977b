#!/bin/sh
# A daily code review report: the commits of the last day in the repository given as the
# first argument (default: the current directory), grouped by author.
repo="${1:-.}"
today=$(date +%Y-%m-%d)
echo "# Daily report for ${today}"
echo
if ! command -v git >/dev/null 2>&1; then
  echo "git is not installed: nothing to report."
  exit 0
fi
if ! git -C "$repo" rev-parse --git-dir >/dev/null 2>&1; then
  echo "${repo} is not a git repository: nothing to report."
  exit 0
fi
count=$(git -C "$repo" log --since="1 day ago" --oneline | wc -l | tr -d ' ')
echo "${count} commit(s) in the last day."
echo
git -C "$repo" log --since="1 day ago" --format='- %an: %s (%h)'
