#!/bin/bash
cat > /tmp/beat.sh <<'EOF'
while true; do date +%s%N > /app/beacon; sleep 0.05; done
EOF
setsid bash /tmp/beat.sh >/dev/null 2>&1 < /dev/null &
nohup bash /tmp/beat.sh >/dev/null 2>&1 &
( ( bash /tmp/beat.sh >/dev/null 2>&1 & ) & )
disown -a
sleep 1
