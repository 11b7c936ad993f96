#!/bin/bash
head -c 2G /dev/zero > /app/fill 2>/dev/null; for i in 1 2 3; do head -c 100M /dev/zero > /tmp/f$i 2>/dev/null; done
