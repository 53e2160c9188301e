#!/usr/bin/env bash
# Runs a command with every file of the Debian packages that scripts/bootstrap installs for
# building (and their test tools) out of reach, as on a GPU machine with PyTorch, CUDA, CMake and
# ninja but no package registry: a private mount namespace with an overlay on /usr whose
# whiteouts hide the packages' headers, libraries, CMake and pkg-config files, and pkg-config
# itself. Runtime libraries (libcurl4, libarchive13, ...: Debian's cmake needs them) stay.
# The environment is emptied (env -i) but for PATH, HOME and what is named in KEEP_ENV.
# Usage: tests/kit/without_debian_dev.sh COMMAND [ARGS...]. Exit 77 (a skip): no root, or no
# mount namespace or overlay here.
set -euo pipefail

hidden_packages=(libgloo-dev libcli11-dev nlohmann-json3-dev libcurl4-openssl-dev libarchive-dev
                 libssl-dev zlib1g-dev libsqlite3-dev libcpp-httplib-dev libgtest-dev libgmock-dev
                 googletest pkgconf pkg-config pkgconf-bin dataset-fashion-mnist)

if [[ "${1:-}" == --inside ]]; then
  shift
  upper="$1"; work="$2"; shift 2
  mount --make-rprivate /
  mount -t overlay overlay -o "lowerdir=/usr,upperdir=$upper,workdir=$work" /usr
  for f in /usr/include/CLI/CLI.hpp /usr/include/nlohmann/json.hpp /usr/include/gloo/algorithm.h \
           /usr/include/zlib.h /usr/include/curl/curl.h /usr/include/archive.h /usr/include/sqlite3.h \
           /usr/include/httplib.h /usr/include/openssl/evp.h /usr/include/gtest/gtest.h \
           /usr/src/googletest/CMakeLists.txt /usr/bin/pkg-config \
           /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz; do
    if [[ -e "$f" ]]; then
      echo "without_debian_dev: $f is still visible" >&2
      exit 1
    fi
  done
  keep=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "HOME=$HOME")
  for v in ${KEEP_ENV:-}; do
    [[ -n "${!v:-}" ]] && keep+=("$v=${!v}")
  done
  exec env -i "${keep[@]}" "$@"
fi

if [[ $(id -u) -ne 0 ]] || ! unshare -m true 2>/dev/null || ! grep -qw overlay /proc/filesystems; then
  echo "without_debian_dev: skipped: needs root, mount namespaces (unshare -m) and overlayfs" >&2
  exit 77
fi
scratch=$(mktemp -d /tmp/ddpx-no-dev.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/upper" "$scratch/work"
# A whiteout (character device 0:0) in the upper layer hides the file of the same path.
n=0
for p in "${hidden_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || continue
  while read -r path; do
    [[ "$path" == /usr/* ]] || continue
    [[ -L "$path" || -f "$path" ]] || continue
    rel="${path#/usr/}"
    mkdir -p "$scratch/upper/$(dirname "$rel")"
    mknod "$scratch/upper/$rel" c 0 0
    n=$((n + 1))
  done < <(dpkg -L "$p")
done
echo "without_debian_dev: hiding $n files of ${#hidden_packages[@]} packages" >&2
set +e
unshare -m "$0" --inside "$scratch/upper" "$scratch/work" "$@"
rc=$?
exit $rc
