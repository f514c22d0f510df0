#!/usr/bin/env bash
# Stops the nginx service that installing Debian's nginx-light may start
# (its postinst runs `invoke-rc.d nginx start`), by the PID in the service's
# pid file, never by name: another nginx on the machine is not ours to stop.
# `make test-webserver` runs it right after it installed nginx-light, so an
# nginx master named by that pid file was started by the install.
#
# usage: stop-nginx-service.sh [pid file]   (default /run/nginx.pid, Debian's)
set -euo pipefail

pidfile=${1:-/run/nginx.pid}
if [[ ! -s $pidfile ]]; then
	exit 0 # the install started no service (no init system, or policy-rc.d)
fi
pid=$(tr -dc '0-9' <"$pidfile")
comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
if [[ -z $pid || $comm != nginx ]]; then
	echo "$pidfile names pid '$pid' (${comm:-not running}), not an nginx: nothing to stop"
	exit 0
fi

echo "stopping the nginx service that the install started: pid $pid (from $pidfile)"
# SIGQUIT: the master finishes its workers' requests, stops them and exits.
kill -QUIT "$pid"
# Wait for the exit with a deadline (tail --pid watches a process that is
# not our child).
if ! timeout 15 tail --pid="$pid" -f /dev/null; then
	echo "nginx (pid $pid) still running 15s after SIGQUIT: SIGTERM"
	kill -TERM "$pid" 2>/dev/null || true
	if ! timeout 15 tail --pid="$pid" -f /dev/null; then
		echo "nginx (pid $pid) still running after SIGTERM" >&2
		exit 1
	fi
fi
