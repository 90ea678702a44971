#!/bin/bash
set -e
mkdir -p /app/restore
tar xzf /app/backup.tar.gz -C /app/restore --wildcards '*.conf'
