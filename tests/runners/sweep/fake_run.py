"""A stand-in for ``morl <command> CONFIG k=v ... --run-dir DIR --no-progress`` and ``morl resume
DIR --no-progress`` that keeps the shell's run-directory contract (lock, run.json, checkpoint,
final_metrics.json, exit statuses, SIGTERM -> checkpoint and 130) in a few milliseconds per step,
so the sweep's scheduling is tested without training anything.

Overrides it reads: ``steps=N`` (default 5), ``sleep=S`` seconds per step (default 0.02),
``fail=1`` (exit 2 at once, writing nothing, like a bad config), ``diverge=1`` (exit 3).
"""

import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path

stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
_locks = []


def claim_run_dir(run_dir):
    """The shell's lock (morl.runners.run_dir.claim_run_dir) without importing torch: 2 s per start."""
    handle = open(run_dir / ".lock", "a+")
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    _locks.append(handle)


def write_run_info(run_dir, **fields):
    path = run_dir / "run.json"
    info = json.loads(path.read_text()) if path.is_file() else {}
    info.update(fields)
    path.with_suffix(".tmp").write_text(json.dumps(info))
    os.replace(path.with_suffix(".tmp"), path)


def main(argv):
    if argv[0] == "resume":
        run_dir = Path(argv[1])
        claim_run_dir(run_dir)
        opts = json.loads((run_dir / "config.json").read_text())
        position = int((run_dir / "checkpoints" / "last.pt").read_text())
        print(f"morl: resuming {run_dir} at step {position}/{opts['steps']}", flush=True)
    else:
        run_dir = Path(argv[argv.index("--run-dir") + 1])
        opts = {"steps": 5, "sleep": 0.02}
        opts.update(item.split("=", 1) for item in argv[2 : argv.index("--run-dir")])
        if opts.get("fail", "0") != "0":
            print("morl: error: fail=1 asks for a failure", file=sys.stderr)
            return 2
        (run_dir / "checkpoints").mkdir(parents=True)
        claim_run_dir(run_dir)
        (run_dir / "config.json").write_text(json.dumps(opts))
        position = 0
        print(f"morl: run directory {run_dir}", flush=True)
    total = int(opts["steps"])
    write_run_info(run_dir, kind="rl", command="train", status="running", position=position, total=total, unit="step")
    while position < total:
        time.sleep(float(opts["sleep"]))
        position += 1
        (run_dir / "checkpoints" / "last.pt").write_text(str(position))
        write_run_info(run_dir, position=position)
        if opts.get("diverge", "0") != "0":
            write_run_info(run_dir, status="diverged")
            return 3
        if stop and position < total:
            write_run_info(run_dir, status="interrupted")
            return 130
    (run_dir / "final_metrics.json").write_text(json.dumps({"seed": opts.get("run.seed"), "steps": total}))
    write_run_info(run_dir, status="finished")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
