#!/bin/bash
set -e
cat > /app/run_limited.sh <<'EOF'
#!/bin/bash
timeout 2 "$@"
status=$?
if [ "$status" -eq 124 ]; then
    echo "timed out" >&2
fi
exit "$status"
EOF
chmod +x /app/run_limited.sh
