#!/bin/sh
# The official image's first start, in short: an empty PGDATA gets initdb, the password and the
# database; then the command runs in the foreground.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw="${POSTGRES_PASSWORD:-}"
  [ -n "${POSTGRES_PASSWORD_FILE:-}" ] && pw="$(cat "$POSTGRES_PASSWORD_FILE")"
  printf '%s\n' "$pw" > /tmp/pw
  initdb -U "${POSTGRES_USER:-postgres}" --pwfile=/tmp/pw -A scram-sha-256 -D "$PGDATA" >/dev/null
  rm -f /tmp/pw
  echo "host all all 127.0.0.1/32 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -c unix_socket_directories=/tmp" -w start >/dev/null
  db="${POSTGRES_DB:-${POSTGRES_USER:-postgres}}"
  [ "$db" = postgres ] || PGPASSWORD="$pw" createdb -h /tmp -U "${POSTGRES_USER:-postgres}" "$db"
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec "$@"
