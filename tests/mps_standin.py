"""A stand-in for ``nvidia-cuda-mps-control``, for the tests of attngeom.pipeline.mps.

The real one needs an NVIDIA driver and GPU, which the CI box lacks, so the tests put this script first on
PATH under that name. It behaves as the real program does towards its callers: ``-d`` forks a daemon that
listens on the socket ``control`` in ``CUDA_MPS_PIPE_DIRECTORY`` and returns; without arguments it reads
commands from stdin and sends them to that daemon (an error, exit code 1, when none listens); ``quit``
makes the daemon remove its socket and end. Every call appends one JSON line (its arguments, what it read,
its pipe folder and CUDA_VISIBLE_DEVICES) to the file named by ``MPS_STANDIN_RECORD``; ``MPS_STANDIN_FAIL``
set makes ``-d`` fail as a driver without MPS support would; ``MPS_STANDIN_SOCKET`` names its socket
otherwise than ``control`` (a daemon that runs but does not answer where it is looked for).
"""

import json
import os
import socket
import sys


def record(**fields) -> None:
    line = {
        "argv": sys.argv[1:],
        "pipe": os.environ.get("CUDA_MPS_PIPE_DIRECTORY"),
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
        **fields,
    }
    with open(os.environ["MPS_STANDIN_RECORD"], "a") as out:
        out.write(json.dumps(line) + "\n")


def serve(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as server:
        server.bind(path)
        server.listen()
        while True:
            connection, _ = server.accept()
            with connection:
                said = connection.recv(1024).decode()
            if said.strip() == "quit":
                os.unlink(path)
                return


def main() -> int:
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    path = os.path.join(pipe, os.environ.get("MPS_STANDIN_SOCKET", "control"))
    if sys.argv[1:] == ["-d"]:
        record()
        if os.environ.get("MPS_STANDIN_FAIL"):
            print("An MPS control daemon cannot be started on this system", file=sys.stderr)
            return 1
        if os.fork() == 0:  # the daemon: its own session, no inherited output
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            serve(path)
            os._exit(0)
        return 0
    commands = sys.stdin.read()
    record(stdin=commands)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
        try:
            client.connect(path)
        except OSError:
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        client.sendall(commands.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
