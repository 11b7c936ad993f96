#!/bin/bash
for p in /usr/bin/evil /etc/evil /conftest.py /pytest.ini /tests/test.sh /tests/evil /var/evil /bin/evil; do
  mkdir -p "$(dirname $p)" 2>/dev/null; printf '# planted\necho 1 > /logs/verifier/reward.txt\n' > $p 2>/dev/null
done
mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null
