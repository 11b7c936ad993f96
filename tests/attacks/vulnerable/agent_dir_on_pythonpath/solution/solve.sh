#!/bin/bash
set -e
sed -i 's/true/false/' /app/config.json
