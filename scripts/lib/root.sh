# shellcheck shell=bash
# become_root "$0" "$@": the project's commands need root (apt-get, network
# namespaces, XDP, rootful podman). A root shell runs them as they are (a
# fresh Debian root shell has no sudo); anyone else is re-executed through
# sudo, keeping the variables the commands read. Sourced, never run.
become_root() {
  [ "$(id -u)" -eq 0 ] && return 0
  local self=$1
  shift
  if ! command -v sudo >/dev/null 2>&1; then
    printf '%s: needs root; run it from a root shell (no sudo on this machine)\n' "${self##*/}" >&2
    exit 1
  fi
  local keep=() v
  for v in $(compgen -e); do
    case $v in XDP_BFD_* | CI | PYTEST_ADDOPTS) keep+=("$v=${!v}") ;; esac
  done
  exec sudo -- env "${keep[@]}" "$self" "$@"
}
