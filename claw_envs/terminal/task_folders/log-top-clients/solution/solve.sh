#!/bin/bash
set -e
cd /app
awk '{print $1}' access.log | sort | uniq -c | sort -rn | head -3 | awk '{print $1, $2}' > top_clients.txt
