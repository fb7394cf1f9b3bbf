#!/bin/sh
# packaging/check-release.sh DIST VERSION: checks what `make release` wrote
# into DIST as a user would meet it (make release-check runs it):
#  - each binary is an ELF for its machine (file) and needs glibc 2.17 at
#    most, as does the CUPTI collector it embeds (check-glibc.sh);
#  - the amd64 binary says its version; the arm64 one does too, under
#    qemu-user, runs doctor, and starts to trace (its BPF programs read
#    arm64's registers, docs/arm64.md) until it finds no BPF, which
#    qemu-user lacks;
#  - the x86_64 wheel installs into a fresh venv with pip and puts cudatap
#    on PATH; the aarch64 wheel installs for its platform (pip --target) and
#    its binary runs under qemu-user;
#  - SHA256SUMS matches;
#  - the image recipe: built where a container engine runs, linted always.
set -eu
version=$2
dist=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
amd64=$dist/cudatap-linux-amd64
arm64=$dist/cudatap-linux-arm64
qemu="qemu-aarch64 -L /usr/aarch64-linux-gnu"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() {
	echo "release check: $*" >&2
	exit 1
}
# expect WHAT WANT OUTPUT: OUTPUT contains WANT.
expect() {
	case $3 in
	*"$2"*) echo "ok: $1: $(printf '%s\n' "$3" | grep -F -m1 -e "$(printf '%s\n' "$2" | tail -n1)")" ;;
	*) fail "$1 printed
$3
which lacks \"$2\"" ;;
	esac
}

expect "file $amd64" "ELF 64-bit LSB executable, x86-64" "$(file "$amd64")"
expect "file $arm64" "ELF 64-bit LSB executable, ARM aarch64" "$(file "$arm64")"
packaging/check-glibc.sh 2.17 "$amd64" "$arm64" tracer/gputime/collector/libcudatap_collector.so

expect "$amd64 --version" "cudatap $version (" "$("$amd64" --version)"
expect "$arm64 --version (qemu-user)" "linux/arm64" "$($qemu "$arm64" --version)"
# doctor under qemu-user: qemu does not emulate bpf(2), so the BPF checks
# fail (exit 1); what is checked is that it runs its checks to the end.
out=$(cd "$tmp" && $qemu "$arm64" doctor 2>&1) || [ $? -eq 1 ] || fail "$arm64 doctor (qemu-user) crashed: $out"
expect "$arm64 doctor (qemu-user)" "uprobes" "$out"
out=$(cd "$tmp" && $qemu "$arm64" record -- true 2>&1) && fail "$arm64 record traced under qemu-user, which has no bpf(2): $out"
expect "$arm64 record (qemu-user) says what its stacks lack" "stacks on arm64 are frame-pointer walks only" "$out"
expect "$arm64 record (qemu-user) stops at the missing BPF" "this kernel cannot run cudatap" "$out"

set -- "$dist"/cudatap-*-py3-none-manylinux_2_17_x86_64.whl
[ -f "$1" ] && [ $# -eq 1 ] || fail "want one x86_64 wheel in $dist, found: $*"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet --no-index "$1"
out=$(PATH=$tmp/venv/bin:$PATH && command -v cudatap && cudatap --version)
expect "pip install $(basename "$1") into a venv; cudatap on its PATH" "$tmp/venv/bin/cudatap
cudatap $version (" "$out"
cmp "$tmp/venv/bin/cudatap" "$amd64" || fail "the venv's cudatap is not $amd64"
set -- "$dist"/cudatap-*-py3-none-manylinux_2_17_aarch64.whl
[ -f "$1" ] && [ $# -eq 1 ] || fail "want one aarch64 wheel in $dist, found: $*"
"$tmp/venv/bin/pip" install --quiet --no-index --platform manylinux_2_17_aarch64 --only-binary=:all: --target "$tmp/aarch64" "$1"
expect "pip install $(basename "$1") for aarch64; its cudatap (qemu-user)" "linux/arm64" "$($qemu "$tmp/aarch64/bin/cudatap" --version)"

(cd "$dist" && sha256sum --quiet -c SHA256SUMS) || fail "$dist/SHA256SUMS does not match"
echo "ok: $dist/SHA256SUMS"

if docker info >/dev/null 2>&1; then
	[ "$dist" = "$(pwd)/dist" ] || fail "deploy/Dockerfile copies from dist/: build the release there (DIST=dist) to build the image"
	for arch in amd64 arm64; do
		docker build --quiet --platform "linux/$arch" --build-arg "TARGETARCH=$arch" -f deploy/Dockerfile -t "cudatap:release-check-$arch" . >/dev/null
		echo "ok: image for linux/$arch built"
	done
	if [ "$(uname -m)" = x86_64 ]; then
		expect "image runs" "cudatap $version (" "$(docker run --rm cudatap:release-check-amd64 --version)"
	fi
	docker rmi cudatap:release-check-amd64 cudatap:release-check-arm64 >/dev/null
else
	echo "no container engine here (docker info fails): the image recipe is linted, not built"
fi
${GO:-go} run ./packaging/imagecheck -dist "$dist" deploy/Dockerfile
