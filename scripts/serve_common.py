"""What the kiln serve scripts share: starting `kiln serve` on a free loopback port and
stopping it with SIGTERM."""

import re
import signal
import subprocess
import sys
import threading


def start_server(cmd):
    """Starts `cmd` (a `kiln serve ... --port 0` command line); returns (process, 'host:port')
    once it says where it listens. Its log is drained in the background so it never blocks."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on http://(\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
    proc.wait()
    sys.exit("kiln serve did not start: " + " ".join(cmd))


def stop_server(proc, timeout=60):
    """Sends SIGTERM and returns the exit code ('killed' when it had to be killed)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "killed"
