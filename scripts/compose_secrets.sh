#!/usr/bin/env bash
# The secrets of deploy/compose.yaml, one file each, in the folder given (default deploy/secrets,
# ignored by git; the folder 0700, the files 0644: compose mounts each file as it is, and the
# containers' user, not root, reads it): PostgreSQL's password, the DATABASE_URL that carries it, the
# Django secret key and the deployment key (docs/containers.md). An existing file is kept.
#   POSTGRES_PORT (5432) goes into the DATABASE_URL.
set -euo pipefail
DIR="${1:-$(dirname "$0")/../deploy/secrets}"
mkdir -p "$DIR" && chmod 700 "$DIR"
umask 022
new() { python3 -c 'import secrets; print(secrets.token_hex(32))'; }
[ -s "$DIR/postgres_password" ] || new > "$DIR/postgres_password"
[ -s "$DIR/database_url" ] || echo "postgresql://mediator:$(cat "$DIR/postgres_password")@127.0.0.1:${POSTGRES_PORT:-5432}/mediator" > "$DIR/database_url"
[ -s "$DIR/django_secret_key" ] || new > "$DIR/django_secret_key"
[ -s "$DIR/deployment_key" ] || new > "$DIR/deployment_key"
echo "$DIR"
