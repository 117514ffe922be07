#!/bin/sh
# The preview Worker of a branch: "assistants-gateway-preview-<branch>", the branch lowercased with
# every run of other characters as one "-", cut so that the name fits the 63 characters of a
# workers.dev label. Used by .github/workflows/ci.yml to deploy a branch and to delete its Worker
# with the branch. Two branches that differ only past the cut share a preview.
set -eu
prefix=assistants-gateway-preview-
branch=$(printf '%s' "$1" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-+//')
branch=$(printf '%s' "$branch" | cut -c1-$((63 - ${#prefix})) | sed -E 's/-+$//')
[ -n "$branch" ] || { echo "no preview name for branch '$1'" >&2; exit 1; }
printf '%s%s\n' "$prefix" "$branch"
