#!/bin/bash
set -e
cat > /app/service.sh <<'EOF'
#!/bin/bash
pidfile=/app/worker.pid
case "$1" in
    start)
        nohup /app/worker.sh > /dev/null 2>&1 &
        echo $! > "$pidfile"
        ;;
    status)
        if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2> /dev/null; then
            echo running
        else
            echo stopped
            exit 3
        fi
        ;;
    stop)
        if [ -f "$pidfile" ]; then
            kill "$(cat "$pidfile")" 2> /dev/null
            rm -f "$pidfile"
        fi
        ;;
    *)
        echo "usage: $0 start|status|stop" >&2
        exit 2
        ;;
esac
EOF
chmod +x /app/service.sh
