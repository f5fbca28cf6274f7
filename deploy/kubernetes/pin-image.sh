#!/bin/sh
# Print indexed-job.yaml with the collector image pinned by digest, in `image:` and in
# BENCH_IMAGE_DIGEST alike, so every pod runs that image and each run records it:
#
#   deploy/kubernetes/pin-image.sh "$(podman image inspect --format \
#       '{{index .RepoDigests 0}}' ghcr.io/you/speed-matrix-collector:0.1.0)" | kubectl apply -f -
#
# Why a script: Kubernetes' downward API hands a pod its name, labels and annotations,
# never its image's digest, so the digest must be written into the manifest.
set -eu
ref="${1:?usage: pin-image.sh IMAGE@sha256:<64 hex> [MANIFEST]}"
manifest="${2:-$(dirname "$0")/indexed-job.yaml}"
if ! printf '%s\n' "$ref" | grep -Eq '^[^[:space:]@]+@sha256:[0-9a-f]{64}$'; then
    echo "error: pin-image.sh: expected IMAGE@sha256:<64 hex> (a digest, not a tag), got '$ref'" >&2
    exit 2
fi
sed -e "s|^\( *\)image: .*|\1image: $ref|" \
    -e '/- name: BENCH_IMAGE_DIGEST/{n;s|value: .*|value: "'"$ref"'"|;}' "$manifest"
