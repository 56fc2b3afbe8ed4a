#!/bin/sh
# Initialise the cloud broker's dynamic security file once (before the first
# start), with an admin login whose password you choose and keep with the
# cloud's secrets, then make the cloud's service login (role tobira-cloud,
# which the cloud creates at its first start with BROKER_ACCOUNTS=mosquitto-dynsec).
#
#   deploy/mosquitto/dynsec-init.sh <data dir>          (reads MOSQ_ADMIN_PASSWORD, MOSQ_CLOUD_PASSWORD)
#
# Step 1 needs no broker; step 2 runs against the started broker.
set -eu
data=${1:?usage: dynsec-init.sh <data dir>}
: "${MOSQ_ADMIN_PASSWORD:?set MOSQ_ADMIN_PASSWORD}"
: "${MOSQ_CLOUD_PASSWORD:?set MOSQ_CLOUD_PASSWORD}"
host=${MOSQ_HOST:-127.0.0.1}
if [ ! -f "$data/dynamic-security.json" ]; then
  # mosquitto_ctrl reads the new admin's password from the terminal; -p is not a flag of init, so feed it twice
  printf '%s\n%s\n' "$MOSQ_ADMIN_PASSWORD" "$MOSQ_ADMIN_PASSWORD" | mosquitto_ctrl dynsec init "$data/dynamic-security.json" tobira-admin
  echo "initialised $data/dynamic-security.json; start the broker, start the cloud once, then run this again"
  exit 0
fi
ctrl() { mosquitto_ctrl -h "$host" -u tobira-admin -P "$MOSQ_ADMIN_PASSWORD" dynsec "$@"; }
ctrl createClient tobira-cloud -p "$MOSQ_CLOUD_PASSWORD" || true
ctrl addClientRole tobira-cloud tobira-cloud
echo "service login tobira-cloud has the tobira-cloud role"
