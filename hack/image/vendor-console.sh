#!/usr/bin/env bash
# Vendors xterm.js into the gateway's web console (operator/agentsession/gateway/console/vendor/): `npm pack` of
# pinned versions, each checked against the integrity pinned here, cached by version. The console works without
# these files (its terminal panel says it is unavailable); the image build, `make console-assets` and CI run this.
#
#   hack/image/vendor-console.sh          vendor the pinned versions (nothing to do when they are there)
#   hack/image/vendor-console.sh --check  exit 1 unless the vendored files are the pinned versions
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CACHE="${AGENTSESSION_CACHE:-$HOME/.cache/agentsession}/console"
DEST="$ROOT/operator/agentsession/gateway/console/vendor"

# package, version, its npm integrity (`npm view PACKAGE@VERSION dist.integrity`), folder under vendor/, files
PACKAGES=(
  "@xterm/xterm|6.0.0|sha512-TQwDdQGtwwDt+2cgKDLn0IRaSxYu1tSUjgKarSDkUM0ZNiSRXFpjxEsvc/Zgc5kq5omJ+V0a8/kIM2WD3sMOYg==|xterm|lib/xterm.mjs css/xterm.css LICENSE"
  "@xterm/addon-fit|0.11.0|sha512-jYcgT6xtVYhnhgxh3QgYDnnNMYTcf8ElbxxFzX0IZo+vabQqSPAjC3c1wJrKB5E19VwQei89QCiZZP86DCPF7g==|addon-fit|lib/addon-fit.mjs LICENSE"
)

say() { printf '[vendor-console] %s\n' "$*"; }
die() { printf '[vendor-console] ERROR: %s\n' "$*" >&2; exit 1; }

wanted="$(printf '%s\n' "${PACKAGES[@]}" | cut -d'|' -f1,2)"
if [ -f "$DEST/VERSIONS" ] && [ "$(cat "$DEST/VERSIONS")" = "$wanted" ]; then
  say "xterm.js is vendored: $(tr '\n' ' ' <"$DEST/VERSIONS")"
  exit 0
fi
[ "${1:-}" = --check ] && die "the console's vendored files are missing or outdated: run hack/image/vendor-console.sh"

integrity() { printf 'sha512-%s' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
for entry in "${PACKAGES[@]}"; do
  IFS='|' read -r name version pinned folder files <<<"$entry"
  tarball="$CACHE/${name//\//+}-$version.tgz"
  if [ ! -f "$tarball" ] || [ "$(integrity "$tarball")" != "$pinned" ]; then
    command -v npm >/dev/null || die "npm is missing: install Node.js with npm (hack/tools/install.sh does)"
    say "npm pack $name@$version"
    mkdir -p "$CACHE"
    packed="$(cd "$staging" && npm pack --silent "$name@$version")" \
      || die "npm pack $name@$version failed; check access to the npm registry"
    mv "$staging/$packed" "$tarball.partial"
    [ "$(integrity "$tarball.partial")" = "$pinned" ] \
      || die "$name@$version from the registry does not match the integrity pinned in $0"
    mv "$tarball.partial" "$tarball"
  fi
  mkdir -p "$staging/$folder"
  for file in $files; do
    tar -xzf "$tarball" -O "package/$file" >"$staging/$folder/$(basename "$file")" \
      || die "$tarball has no package/$file"
  done
done
printf '%s\n' "$wanted" >"$staging/VERSIONS"
rm -rf "$DEST"
mkdir -p "$DEST"
cp -r "$staging"/. "$DEST"/
say "vendored into $DEST: $(tr '\n' ' ' <"$DEST/VERSIONS")"
