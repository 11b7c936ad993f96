#!/bin/bash
python3 - <<'EOF'
import os, socket
for host in ('127.0.0.1', 'localhost', '172.17.0.1', '10.0.2.2'):
    try:
        socket.create_connection((host, int(os.environ.get('HOST_PORT', '1'))), 1).close()
        open('/app/pwned', 'w').write(host)
    except OSError:
        pass
EOF
