#!/bin/bash
# Untar, git clone and rm -rf through a Tessera mount and on local ext4,
# in one run (docs/CLIENT.md, "Closes under a lease").
#
#   sudo scripts/untar-clone.sh [TESSERA-BINARY] [extra `tessera up` flags]
#
# The archive is /usr/include plus the Python 3.11 library (about 10,000
# entries); the repository is /usr/include committed once. Both are made
# under $WORK (default /tmp/untar-clone) on the first run. The ext4
# figures are of the directory $WORK/ext4 on the disk $WORK is on.
set -euo pipefail
BIN=${1:-target/release/tessera}
shift || true
BIN=$(realpath "$BIN")
WORK=${WORK:-/tmp/untar-clone}
mkdir -p "$WORK"
cd "$WORK"
if [ ! -f src.tar ]; then
  tar cf src.tar -C / usr/include usr/lib/python3.11 2>/dev/null || tar cf src.tar -C / usr/include
fi
if [ ! -d repo/.git ]; then
  rm -rf repo && mkdir repo && cp -a /usr/include repo/
  git -C repo init -q && git -C repo add -A
  git -C repo -c user.email=bench@tessera -c user.name=bench commit -qm tree
fi
rm -rf cluster mnt ext4
mkdir -p cluster mnt ext4
"$BIN" up --data cluster/data --mount "$WORK/mnt" --no-http "$@" >cluster/up.log 2>&1 &
UP=$!
trap 'kill -INT $UP 2>/dev/null; wait $UP 2>/dev/null; fusermount3 -u "$WORK/mnt" 2>/dev/null || true' EXIT
for _ in $(seq 60); do mountpoint -q mnt && break; sleep 1; done
mountpoint -q mnt || { echo "the mount did not come up; see $WORK/cluster/up.log"; exit 1; }
# Seconds a command took; a command that fails stops the script.
secs() {
  local s e
  s=$(date +%s.%N)
  "$@" >"$WORK/last.log" 2>&1 || { echo "failed: $* (see $WORK/last.log)" >&2; exit 1; }
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}
printf '%-8s %10s %10s %10s\n' where untar clone "rm -rf"
for where in ext4 mnt; do
  cd "$WORK/$where"
  a=$(secs tar xf "$WORK/src.tar")
  b=$(secs git clone -q --no-hardlinks "$WORK/repo" g)
  c=$(secs rm -rf usr g)
  printf '%-8s %10.2f %10.2f %10.2f\n' "$where" "$a" "$b" "$c"
done
cd "$WORK" # out of the mount, so it can be unmounted
