#!/bin/bash
set -e
cd /app
grep ' ERROR ' logs/app.log | cut -c12-16 | sort | uniq -c | sort -rn | head -1 | awk '{print $2}' > peak.txt
grep ' ERROR ' logs/app.log | cut -d' ' -f4- | sort -u | wc -l > distinct_errors.txt
