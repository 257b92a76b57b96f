# Helpers the benchmark scripts share for starting servers side by side:
# sourced, not run.

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_up URL PID: waits (up to 2 minutes) until URL answers 2xx; fails at
# once if the process PID has exited.
wait_up() {
    for _ in $(seq 1 600); do
        if curl -fsS "$1" >/dev/null 2>&1; then return 0; fi
        kill -0 "$2" 2>/dev/null || { echo "server exited before $1 answered; see its log" >&2; return 1; }
        sleep 0.2
    done
    echo "server not ready: $1" >&2
    return 1
}
