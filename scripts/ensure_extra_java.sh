#!/usr/bin/env bash
# Java and JDBC drivers for the PySpark usage reports (spark_reports/): a JRE when `java` is
# missing and PostgreSQL's JDBC driver, both from Debian's packages.
# Safe to run repeatedly; installs only what is absent.
set -euo pipefail
log() { echo "[ensure_extra_java] $*"; }
pkgs=()
command -v java >/dev/null 2>&1 || pkgs+=(default-jre-headless)
[ -f /usr/share/java/postgresql.jar ] || pkgs+=(libpostgresql-jdbc-java)
if [ "${#pkgs[@]}" -gt 0 ]; then
  log "installing ${pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
command -v java >/dev/null 2>&1
test -f /usr/share/java/postgresql.jar
