#!/bin/bash
set -e
sed -i 's/false/true/' /app/config.json
