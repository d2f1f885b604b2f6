#!/bin/sh
# As the official image does: on an empty data directory, initdb (UTF-8) with POSTGRES_USER and its password,
# create POSTGRES_DB, accept password logins from the network; then run the server as postgres.
set -eu
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" && chown postgres:postgres "$PGDATA" && chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
user="${POSTGRES_USER:-postgres}"
db="${POSTGRES_DB:-$user}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    pwfile="$(mktemp)"
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb --username="$user" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 --auth-local=trust \
        --auth-host=scram-sha-256 -D "$PGDATA" >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
        createdb --username="$user" --host=/var/run/postgresql "$db"
        pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
    fi
fi
exec "$@" -c listen_addresses='*'
