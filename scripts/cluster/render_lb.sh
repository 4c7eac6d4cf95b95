#!/usr/bin/env bash
# The balancer's configuration (deploy/cluster/haproxy.cfg.template) on stdout, for
# scripts/cluster/up.sh and tests/serving/test_balancer_errors.py.
#   render_lb.sh LISTEN APP1 APP2 TENANT_HOST   (address:port, the nodes' address:port, the Host of
#                                               the /health checks)
# CLUSTER_DIR holds its pid file and stats socket (lb/). Run in an app node's environment: the CORS
# headers of the balancer's own errors follow that node's MEDIATOR_CORS_ORIGINS, read from its
# settings (apps/decentrl/middleware.py haproxy_cors).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
: "${CLUSTER_DIR:?CLUSTER_DIR: where the balancer keeps its pid file and stats socket}"
sed -e "s#@CLUSTER_DIR@#$CLUSTER_DIR#g" -e "s/@LISTEN@/$1/g" -e "s/@APP1@/$2/g" -e "s/@APP2@/$3/g" \
  -e "s/@TENANT_HOST@/$4/g" "$ROOT/deploy/cluster/haproxy.cfg.template" \
  | DJANGO_SETTINGS_MODULE="${DJANGO_SETTINGS_MODULE:-mediator_project.settings}" PYTHONPATH="$ROOT" \
    "$ROOT/.venv/bin/python" -c '
import sys, django; django.setup(); from django.conf import settings
from apps.decentrl.middleware import haproxy_cors
rules, hdrs = haproxy_cors(settings.MEDIATOR_CORS_ORIGINS)
sys.stdout.write(sys.stdin.read().replace("@CORS_RULES@", "\n    ".join(rules)).replace("@CORS_HDRS@", hdrs))'
